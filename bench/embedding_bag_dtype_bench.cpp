// Embedding bags over f16, bf16 and rowwise-quantized tables: the library (jit) against its
// reference (ref), ATen (aten) and FBGEMM's own kernel (fbgemm), side by side in one process with
// the f32 rows of embedding_bag_bench.cpp.
//
// Names: embedding_bag/<impl>/<mode>/<rows>x<dim>/<bags>x<len>/t<threads>/<dtype>
//   dtype f16 bf16 q8 q4 q2 (q = rowwise-quantized rows as torch's prepack writes them; the
//         f32 rows have no dtype segment)
//   impl  jit   shapejit_embedding_bag_ex (output f32 for quantized tables, the table's dtype
//               for f16/bf16), shapejit_set_num_threads(threads)
//         ref   shapejit::ref::embedding_bag on the same arguments (t1)
//         aten  torch.embedding_bag for f16 (at::_embedding_bag_forward_only); torch's
//               quantized::embedding_bag_{byte,4bit,2bit}_rowwise_offsets for q8/q4/q2 in mode
//               sum only (torch computes a sum in every mode); none for bf16 (t1)
//         limit the byte-row limit loop of the engine's ISA (gather_limit.hpp, ByteLimitArgs): each
//               indexed row's stored bytes (codes and scale/bias for quantized rows) read once
//               and added as bytes, each per-sample weight read, each bag's output row written;
//               its prefetch distance is the engine's for such rows; what the memory system
//               allows a kernel of the dtype whose arithmetic were free (t1)
//         fbgemm FBGEMM's JIT kernel called directly (fbgemm_runner.hpp), generated once per
//               case: GenerateEmbeddingSpMDM for f16 (f16 out), bf16 (is_bf16_in, bf16 out)
//               and q8 (the packed rows as they are: FBGEMM's default 8-bit layout is torch's,
//               f32 scale and bias after the codes), GenerateEmbeddingSpMDMNBit for q4/q2 (f16
//               scale and bias after the codes); modes sum, mean, wsum, no max; f32 per-sample
//               weights (the f16/bf16 ones widened); t1; only in builds against pip torch 2.x
// Cases: every dtype x {sum, mean, wsum, max} on the 4096 x 128 table with 256 bags x 32
// indices (the f32 seed workload's data); sum at D = 32 and 512; and the 1,000,000 x 128 cold
// table, sum, for f16, q8 and q4. The table of a dtype is the f32 workload's table converted
// (f16/bf16 rounded, quantized by shapejit's prepack), so every dtype reads the same rows.
// Counters: `bytes` = rows x stored row bytes (packed row incl. its scale and bias), `rows`;
// embedding_bag_rows.cpp turns them into GBps, Mrows_s, vs_aten, vs_fbgemm and vs_f32.
//
// Before its first timing every (impl, case) is checked once against the reference output on
// index set 0 (widened to f32), a limit row against a scalar loop of its byte sums; a mismatch
// fails the row.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "aten_dtype_runner.hpp"
#include "dtype_tables.hpp"
#include "embag_timing.hpp"
#include "fbgemm_runner.hpp"
#include "limit_select.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.h"
#include "workload.hpp"

namespace shapejit::bench {
namespace {

enum class Impl { kLimit, kAten, kFbgemm, kRef, kJit };

const char* impl_name(Impl impl) {
  switch (impl) {
    case Impl::kLimit: return "limit";
    case Impl::kAten: return "aten";
    case Impl::kFbgemm: return "fbgemm";
    case Impl::kRef: return "ref";
    case Impl::kJit: return "jit";
  }
  return "?";
}

struct ModeSpec {
  const char* name;
  shapejit_mode mode;
  bool weighted;
};

constexpr ModeSpec kSum{"sum", SHAPEJIT_SUM, false};
constexpr ModeSpec kMean{"mean", SHAPEJIT_MEAN, false};
constexpr ModeSpec kWeightedSum{"wsum", SHAPEJIT_SUM, true};
constexpr ModeSpec kMax{"max", SHAPEJIT_MAX, false};

struct Case {
  Impl impl;
  ModeSpec mode;
  WorkloadSpec data;
  TableDtype dtype;
  int threads;

  std::string name() const {
    return std::string("embedding_bag/") + impl_name(impl) + "/" + mode.name + "/" + data.name() + "/t" +
           std::to_string(threads) + "/" + dtype.name;
  }
  std::string problem() const { return std::string(mode.name) + "/" + data.name() + "/" + dtype.name; }
};

// The output dtype of a table's calls: the table's default (f16/bf16 their own, f32 for quantized).
shapejit_dtype output_dtype(shapejit_dtype table) {
  return static_cast<shapejit_dtype>(jit::default_value_dtype(static_cast<DType>(table)));
}

int64_t element_bytes(shapejit_dtype t) { return jit::dtype_traits(static_cast<DType>(t)).element_bytes; }

shapejit_embedding_bag_ex_args make_args(const Workload& w, const DtypeTable& t, int64_t set, const ModeSpec& mode) {
  shapejit_embedding_bag_args a = embag_call_args(w, set);
  a.weight = t.data();
  a.weight_dtype = t.dtype();
  a.row_stride = t.row_stride();
  a.per_sample_weights = mode.weighted ? t.per_sample_weights() : nullptr;
  a.mode = mode.mode;
  shapejit_embedding_bag_ex_args ex{};
  shapejit_embedding_bag_ex_init(&ex, &a);
  return ex;
}

// All four outputs of a library-shaped call (jit, ref), the output in the call's dtype.
struct Outputs {
  std::vector<uint8_t> output;
  std::vector<int64_t> offset2bag, bag_size, max_indices;
  shapejit_dtype dtype;

  Outputs(const shapejit_embedding_bag_shapes& s, shapejit_dtype out_dtype)
      : output(size_t(s.output_rows * s.output_cols * element_bytes(out_dtype))),
        offset2bag(size_t(std::max<int64_t>(s.offset2bag_len, 1))),
        bag_size(size_t(std::max<int64_t>(s.bag_size_len, 1))),
        max_indices(size_t(std::max<int64_t>(s.max_indices_rows * s.max_indices_cols, 1))),
        dtype(out_dtype) {}

  std::vector<float> as_f32() const {
    return widen_to_f32(output.data(), output.size() / size_t(element_bytes(dtype)), dtype);
  }
};

shapejit_embedding_bag_shapes shapes_of(const shapejit_embedding_bag_ex_args& a) {
  shapejit_embedding_bag_shapes s{};
  if (shapejit_embedding_bag_ex_output_shapes(&a, &s) != SHAPEJIT_OK)
    throw std::runtime_error(std::string("shapejit_embedding_bag_ex_output_shapes: ") + shapejit_last_error());
  return s;
}

class Runner {
 public:
  virtual ~Runner() = default;
  virtual void prepare() {}
  virtual void run(int64_t set) = 0;
  virtual std::vector<float> output_f32() const = 0;
  /// Before the first timing: the output against the reference (check_output_once), unless the
  /// runner computes something else and checks that itself.
  virtual void check(const Case& c, const Workload& w, const DtypeTable& t);
};

class JitRunner final : public Runner {
 public:
  JitRunner(const Workload& w, const DtypeTable& t, const ModeSpec& mode, int threads)
      : w_(w), t_(t), mode_(mode), threads_(threads),
        out_(shapes_of(make_args(w, t, 0, mode)), output_dtype(t.dtype())) {}
  void prepare() override {
    if (shapejit_set_num_threads(threads_) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_set_num_threads: ") + shapejit_last_error());
  }
  void run(int64_t set) override {
    const auto args = make_args(w_, t_, set, mode_);
    if (shapejit_embedding_bag_ex(&args, out_.output.data(), out_.offset2bag.data(), out_.bag_size.data(),
                                  out_.max_indices.data()) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_embedding_bag_ex: ") + shapejit_last_error());
  }
  std::vector<float> output_f32() const override { return out_.as_f32(); }

 private:
  const Workload& w_;
  const DtypeTable& t_;
  ModeSpec mode_;
  int threads_;
  Outputs out_;
};

class RefRunner final : public Runner {
 public:
  RefRunner(const Workload& w, const DtypeTable& t, const ModeSpec& mode)
      : w_(w), t_(t), mode_(mode), out_(shapes_of(make_args(w, t, 0, mode)), output_dtype(t.dtype())) {}
  void run(int64_t set) override {
    ref::embedding_bag(make_args(w_, t_, set, mode_), out_.output.data(), out_.offset2bag.data(),
                       out_.bag_size.data(), out_.max_indices.data());
  }
  std::vector<float> output_f32() const override { return out_.as_f32(); }

 private:
  const Workload& w_;
  const DtypeTable& t_;
  ModeSpec mode_;
  Outputs out_;
};

class AtenRunner final : public Runner {
 public:
  AtenRunner(const Workload& w, const DtypeTable& t, const ModeSpec& mode)
      : aten_(w, t, mode.mode == SHAPEJIT_SUM ? 0 : mode.mode == SHAPEJIT_MEAN ? 1 : 2, mode.weighted) {}
  void prepare() override { aten_.prepare(); }
  void run(int64_t set) override { aten_.run(set); }
  std::vector<float> output_f32() const override { return aten_.output_f32(); }

 private:
  AtenDtypeRunner aten_;
};

class FbgemmCaseRunner final : public Runner {
 public:
  FbgemmCaseRunner(const Workload& w, const DtypeTable& t, const ModeSpec& mode)
      : fbgemm_(w, &t, mode.mode, mode.weighted) {}
  void run(int64_t set) override { fbgemm_.run(set); }
  std::vector<float> output_f32() const override { return fbgemm_.output_f32(); }

 private:
  FbgemmRunner fbgemm_;
};

// The byte-row limit loop of the engine's ISA over the table's rows, on one thread.
class LimitRunner final : public Runner {
 public:
  LimitRunner(const Workload& w, const DtypeTable& t, const ModeSpec& mode) : w_(w) {
    std::string why_not;
    loop_ = byte_limit_loop(rt::selected_isa(), why_not);
    if (!loop_) throw std::runtime_error(why_not);
    // Per-sample weights and outputs are in the table's value dtype (f32 for quantized tables).
    const int64_t value_bytes = element_bytes(output_dtype(t.dtype()));
    args_.table = static_cast<const uint8_t*>(t.data());
    args_.row_stride_bytes = is_quantized(t.dtype()) ? t.row_stride() : t.row_stride() * value_bytes;
    args_.row_bytes = t.row_bytes();
    args_.num_indices = w.num_indices();
    args_.offsets = w.offsets().data();
    args_.num_offsets = int64_t(w.offsets().size());
    args_.per_sample_weights = mode.weighted ? t.per_sample_weights() : nullptr;
    args_.weight_bytes = value_bytes;
    args_.output_bytes = w.spec().dim * value_bytes;
    output_.resize(size_t(args_.num_offsets * args_.output_bytes));
    args_.output = output_.data();
    set_byte_limit_prefetch(args_, rt::selected_isa(), w.spec().rows);
  }
  void run(int64_t set) override {
    args_.indices = w_.indices(set);
    if (!loop_(args_, 0, args_.num_offsets))
      throw std::runtime_error("limit: the byte-row loop takes rows of whole dwords and outputs of whole 16-byte "
                               "lane sets, not " + std::to_string(args_.row_bytes) + " and " +
                               std::to_string(args_.output_bytes) + " bytes");
  }
  std::vector<float> output_f32() const override { throw std::logic_error("a limit row has no embedding output"); }

  /// Runs index set 0 and compares every output byte with ByteLimitArgs' definition, computed
  /// here by a scalar loop.
  void check(const Case&, const Workload&, const DtypeTable&) override {
    run(0);
    const ByteLimitArgs& a = args_;
    const auto* weights = static_cast<const uint8_t*>(a.per_sample_weights);
    for (int64_t b = 0; b < a.num_offsets; ++b) {
      uint8_t lanes[16] = {};
      const int64_t end = b + 1 < a.num_offsets ? a.offsets[b + 1] : a.num_indices;
      for (int64_t i = a.offsets[b]; i < end; ++i) {
        const uint8_t* row = a.table + a.indices[i] * a.row_stride_bytes;
        for (int64_t k = 0; k < a.row_bytes; ++k) lanes[k % 16] = uint8_t(lanes[k % 16] + row[k]);
        for (int64_t k = 0; weights && k < a.weight_bytes; ++k)
          lanes[k] = uint8_t(lanes[k] + weights[i * a.weight_bytes + k]);
      }
      for (int64_t o = 0; o < a.output_bytes; ++o)
        if (output_[size_t(b * a.output_bytes + o)] != lanes[o % 16])
          throw std::runtime_error("limit: bag " + std::to_string(b) + " output byte " + std::to_string(o) + " is " +
                                   std::to_string(output_[size_t(b * a.output_bytes + o)]) + ", its byte sum " +
                                   std::to_string(lanes[o % 16]));
    }
  }

 private:
  const Workload& w_;
  ByteLimitLoop loop_ = nullptr;
  ByteLimitArgs args_;
  std::vector<uint8_t> output_;
};

std::unique_ptr<Runner> make_runner(const Case& c, const Workload& w, const DtypeTable& t) {
  switch (c.impl) {
    case Impl::kLimit: return std::make_unique<LimitRunner>(w, t, c.mode);
    case Impl::kAten: return std::make_unique<AtenRunner>(w, t, c.mode);
    case Impl::kFbgemm: return std::make_unique<FbgemmCaseRunner>(w, t, c.mode);
    case Impl::kRef: return std::make_unique<RefRunner>(w, t, c.mode);
    case Impl::kJit: return std::make_unique<JitRunner>(w, t, c.mode, c.threads);
  }
  throw std::logic_error("unknown impl");
}

// Bitwise where the semantics documents say so (every implementation here, ATen included);
// the tolerance only keeps a report readable, a wrong row still fails.
void check_output_once(const Case& c, const Workload& w, const DtypeTable& t, Runner& runner) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<float>> expected_by_problem;
  static std::map<std::string, bool> checked;
  std::vector<float> expected;
  {
    std::lock_guard lock(mutex);
    if (checked[c.name()]) return;
    auto [it, inserted] = expected_by_problem.try_emplace(c.problem());
    if (inserted) {
      RefRunner oracle(w, t, c.mode);
      oracle.run(0);
      it->second = oracle.output_f32();
    }
    expected = it->second;
  }
  runner.prepare();
  runner.run(0);
  const std::vector<float> got = runner.output_f32();
  if (got.size() != expected.size()) throw std::runtime_error("output has the wrong size");
  for (size_t i = 0; i < expected.size(); ++i) {
    const double tolerance = 1e-6 * (1.0 + std::fabs(expected[i]));
    if (!(std::fabs(double(got[i]) - double(expected[i])) <= tolerance))
      throw std::runtime_error("output[" + std::to_string(i / size_t(w.spec().dim)) + "][" +
                               std::to_string(i % size_t(w.spec().dim)) + "] = " + std::to_string(got[i]) +
                               ", reference " + std::to_string(expected[i]));
  }
  std::lock_guard lock(mutex);
  checked[c.name()] = true;
}

void Runner::check(const Case& c, const Workload& w, const DtypeTable& t) { check_output_once(c, w, t, *this); }

void run_case(benchmark::State& state, const Case& c) {
  try {
    Workload& w = workload_for(c.data);
    const DtypeTable& t = dtype_table_for(w, c.dtype.dtype);
    const auto runner = make_runner(c, w, t);
    runner->check(c, w, t);
    runner->prepare();
    const double rows = double(w.num_indices());
    time_calls(state, [&](int64_t set) { runner->run(set); }, [&] { return w.next_set(); },
               {rows * double(t.row_bytes()), rows});
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_case(const Case& c) {
  register_embag_benchmark(c.name(), [c](benchmark::State& s) { run_case(s, c); });
}

// Per problem: t1 limit, aten and fbgemm (where each has the operation), ref, jit; then t2 jit.
void register_problem(const ModeSpec& mode, const WorkloadSpec& data, const TableDtype& dtype) {
  register_case({Impl::kLimit, mode, data, dtype, 1});
  const int aten_mode = mode.mode == SHAPEJIT_SUM ? 0 : mode.mode == SHAPEJIT_MEAN ? 1 : 2;
  if (!aten_dtype_unsupported_reason(dtype.dtype, aten_mode)) register_case({Impl::kAten, mode, data, dtype, 1});
  if (!fbgemm_unsupported_reason(dtype.dtype, mode.mode)) register_case({Impl::kFbgemm, mode, data, dtype, 1});
  if (!data.cold) register_case({Impl::kRef, mode, data, dtype, 1});
  register_case({Impl::kJit, mode, data, dtype, 1});
  register_case({Impl::kJit, mode, data, dtype, 2});
}

bool register_all() {
  const TableDtype all[] = {kF16Table, kBF16Table, kQ8Table, kQ4Table, kQ2Table};
  for (const TableDtype& dtype : all)
    for (const ModeSpec& mode : {kSum, kMean, kWeightedSum, kMax})
      register_problem(mode, WorkloadSpec{.rows = 4096, .dim = 128, .bags = 256, .mean_len = 32}, dtype);
  for (int64_t dim : {32, 512})
    for (const TableDtype& dtype : all)
      register_problem(kSum, WorkloadSpec{.rows = 4096, .dim = dim, .bags = 256, .mean_len = 32}, dtype);
  for (const TableDtype& dtype : {kF16Table, kQ8Table, kQ4Table})
    register_problem(kSum, WorkloadSpec{.rows = 1000000, .dim = 128, .bags = 256, .mean_len = 32, .cold = true},
                     dtype);
  return true;
}

[[maybe_unused]] const bool kRegistered = register_all();

}  // namespace
}  // namespace shapejit::bench
