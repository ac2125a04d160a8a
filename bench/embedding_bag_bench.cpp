// Embedding-bag benchmarks: the library (jit) against its reference (ref), libtorch (aten),
// FBGEMM's own kernel (fbgemm) and the gather limit of the machine (limit), side by side in one
// process.
//
// Names: embedding_bag/<impl>/<mode>/<rows>x<dim>/<bags>x<len>/t<threads>
//   impl  jit    the public C API (shapejit_embedding_bag, shapejit_set_num_threads(threads)) on
//                the ISA the engine selects (the host's best, capped by SHAPEJIT_ISA)
//         ref    shapejit::ref::embedding_bag, called directly (one thread; no t2 rows)
//         aten   at::_embedding_bag_forward_only, at::set_num_threads(1) (t1 rows only)
//         fbgemm FBGEMM's JIT kernel, the one ATen runs, called directly (fbgemm_runner.hpp):
//                generated once per case, then the kernel call alone, single-threaded (t1
//                rows only); modes sum, mean, wsum and mean-noidx (FBGEMM has no max); only
//                in builds against pip torch 2.x (its header and libtorch_cpu's exports)
//         limit  bench/gather_limit_<isa>.cpp for the engine's ISA (avx512, avx2 or neon): the
//                minimal hand-written gather with prefetch 16 indices ahead; at t2 the bags are
//                split in two halves of equal index count on a 2-thread tbb::task_arena
//         jit-<isa>, limit-<isa>  the same two on a lower vector ISA the host also runs
//                (jit pinned with rt::ScopedIsaOverride): on AVX-512 hosts jit-avx2 and
//                limit-avx2, so every ISA's kernels meet the limit of their own ISA in one run
//   mode  sum, mean, wsum (sum with per_sample_weights), max; mean-noidx and max-noidx: jit
//         computes the output only (skip_index_outputs, NULL index outputs), as an inference
//         caller would; their limit and aten rows are mean's and max's (ATen has no such call);
//         fbgemm's mean-noidx row is its mean row again (FBGEMM only ever writes the output)
//   len   indices per bag; `zipf32` = Zipf-like lengths (bag of rank r gets ~1/r of the
//         indices) with the same total as 32 per bag, bag order shuffled
// Cases: D in {32, 64, 128, 256, 512} x every mode on 4096-row tables with 256 bags x 32
// uniform random int64 indices (the seed workload is `sum/4096x128/256x32`); a 1,000,000 x 128
// table, sum, cold: every call takes the next of 122 disjoint index sets that together are a
// permutation of the table's rows (one cursor shared by all implementations), so a row comes
// back only after the whole 512 MB table has been streamed; power-law lengths (`256xzipf32`) on
// the 4096 x 128 table, sum. Every case runs at t1 (every implementation; fbgemm not in
// max) and t2 (jit, limit). Tables are 64-byte aligned plain allocations (4 KiB pages: THP is madvise-only
// on the build machine and the benchmark does not madvise).
//
// Timing (bench_main.cpp): every benchmark runs --benchmark_repetitions times (default 7) of
// --benchmark_min_time (default 0.05 s) with --benchmark_enable_random_interleaving (default
// on), so the repetitions of every implementation of a case are spread over the whole run,
// interleaved with each other. Every call is also timed on its own, and a row's time is the
// fastest call over all repetitions (counter `min_call_seconds`), i.e. min-of-N with N = calls,
// the figure least disturbed by the other processes of the shared machine. Each benchmark sets the
// counter `bytes` = row bytes gathered per call (non-padding indices x D x 4);
// embedding_bag_rows.cpp turns it into GBps and computes, on jit rows, vs_limit = time(limit row of
// the same case, threads and ISA) / time(jit row) and vs_aten = time(aten t1 row of the same case) /
// time(jit row), i.e. ratios of GB/s from rows of the same run (ref, aten and fbgemm rows also
// get vs_limit, ref rows vs_aten); at t2, vs_aten is jit on 2 threads against ATen on 1. vs_fbgemm
// is the same ratio against the fbgemm t1 row of the case. A filter that drops the limit, aten or
// fbgemm row of a case leaves the ratio empty.
//
// Before its first timing every (impl, mode, case) is checked once against the reference
// output on index set 0; a mismatch fails the row.
#include <benchmark/benchmark.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "aten_runner.hpp"
#include "embag_timing.hpp"
#include "fbgemm_runner.hpp"
#include "gather_limit.hpp"
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
    case Impl::kLimit:
      return "limit";
    case Impl::kAten:
      return "aten";
    case Impl::kFbgemm:
      return "fbgemm";
    case Impl::kRef:
      return "ref";
    case Impl::kJit:
      return "jit";
  }
  return "?";
}

struct ModeSpec {
  const char* name;
  shapejit_mode mode;
  bool weighted;
  LimitOp limit_op;
  int aten_mode;
  bool output_only = false;  ///< jit: skip_index_outputs (the limit and ATen rows are the mode's)
};

constexpr ModeSpec kSum{"sum", SHAPEJIT_SUM, false, LimitOp::kSum, 0};
constexpr ModeSpec kMean{"mean", SHAPEJIT_MEAN, false, LimitOp::kMean, 1};
constexpr ModeSpec kWeightedSum{"wsum", SHAPEJIT_SUM, true, LimitOp::kWeightedSum, 0};
constexpr ModeSpec kMax{"max", SHAPEJIT_MAX, false, LimitOp::kMax, 2};
constexpr ModeSpec kMeanOutputOnly{"mean-noidx", SHAPEJIT_MEAN, false, LimitOp::kMean, 1, true};
constexpr ModeSpec kMaxOutputOnly{"max-noidx", SHAPEJIT_MAX, false, LimitOp::kMax, 2, true};

struct Case {
  Impl impl;
  ModeSpec mode;
  WorkloadSpec data;
  int threads;
  jit::Isa isa;         ///< what jit and limit run (aten and ref ignore it)
  bool pinned = false;  ///< isa is not the engine's selection: named <impl>-<isa>, jit pinned to it

  std::string name() const {
    // Appended piece by piece: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
    std::string s = "embedding_bag/";
    s += impl_name(impl);
    if (pinned) s.append("-").append(jit::isa_name(isa));
    s.append("/").append(mode.name).append("/").append(data.name());
    s.append("/t").append(std::to_string(threads));
    return s;
  }
  /// The case without the implementation: what the output check and the ratios match on.
  std::string problem() const {
    return std::string(mode.name) + "/" + data.name() + (data.cold ? "/cold" : "");
  }
};

shapejit_embedding_bag_args make_args(const Workload& w, int64_t set, const ModeSpec& mode) {
  shapejit_embedding_bag_args a = embag_call_args(w, set);
  a.per_sample_weights = mode.weighted ? w.per_sample_weights().data() : nullptr;
  a.mode = mode.mode;
  return a;
}

// One implementation bound to one case; run() is what the timed loop calls.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void prepare() {}
  virtual void run(int64_t set) = 0;
  virtual const float* output() const = 0;
};

// Outputs of the library-shaped implementations (jit, ref): all four ATen outputs.
struct LibraryOutputs {
  std::vector<float> output;
  std::vector<int64_t> offset2bag, bag_size, max_indices;

  explicit LibraryOutputs(const shapejit_embedding_bag_shapes& s)
      : output(size_t(s.output_rows * s.output_cols)),
        offset2bag(size_t(std::max<int64_t>(s.offset2bag_len, 1))),
        bag_size(size_t(std::max<int64_t>(s.bag_size_len, 1))),
        max_indices(size_t(std::max<int64_t>(s.max_indices_rows * s.max_indices_cols, 1))) {}
};

class JitRunner final : public Runner {
 public:
  JitRunner(const Workload& w, const ModeSpec& mode, int threads)
      : w_(w), mode_(mode), threads_(threads), out_(shapes(make_args(w, 0, mode))) {}
  void prepare() override {
    if (shapejit_set_num_threads(threads_) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_set_num_threads: ") + shapejit_last_error());
  }
  void run(int64_t set) override {
    const auto args = make_args(w_, set, mode_);
    if (mode_.output_only) {  // the output alone, as an inference caller asks for it
      shapejit_embedding_bag_ex_args ex;
      shapejit_embedding_bag_ex_init(&ex, &args);
      ex.skip_index_outputs = 1;
      if (shapejit_embedding_bag_ex(&ex, out_.output.data(), nullptr, nullptr, nullptr) != SHAPEJIT_OK)
        throw std::runtime_error(std::string("shapejit_embedding_bag_ex: ") + shapejit_last_error());
      return;
    }
    if (shapejit_embedding_bag(&args, out_.output.data(), out_.offset2bag.data(),
                               out_.bag_size.data(), out_.max_indices.data()) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_embedding_bag: ") + shapejit_last_error());
  }
  const float* output() const override { return out_.output.data(); }

 private:
  static shapejit_embedding_bag_shapes shapes(const shapejit_embedding_bag_args& args) {
    shapejit_embedding_bag_shapes s{};
    if (shapejit_embedding_bag_output_shapes(&args, &s) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_embedding_bag_output_shapes: ") +
                               shapejit_last_error());
    return s;
  }
  const Workload& w_;
  ModeSpec mode_;
  int threads_;
  LibraryOutputs out_;
};

class RefRunner final : public Runner {
 public:
  RefRunner(const Workload& w, const ModeSpec& mode)
      : w_(w), mode_(mode), out_(ref::embedding_bag_shapes(make_args(w, 0, mode))) {}
  void run(int64_t set) override {
    ref::embedding_bag(make_args(w_, set, mode_), out_.output.data(), out_.offset2bag.data(),
                       out_.bag_size.data(), out_.max_indices.data());
  }
  const float* output() const override { return out_.output.data(); }

 private:
  const Workload& w_;
  ModeSpec mode_;
  LibraryOutputs out_;
};

class AtenCaseRunner final : public Runner {
 public:
  AtenCaseRunner(const Workload& w, const ModeSpec& mode, int threads)
      : aten_(w, mode.aten_mode, mode.weighted, threads) {}
  void prepare() override { aten_.prepare(); }
  void run(int64_t set) override { aten_.run(set); }
  const float* output() const override { return aten_.output(); }

 private:
  AtenRunner aten_;
};

class FbgemmCaseRunner final : public Runner {
 public:
  FbgemmCaseRunner(const Workload& w, const ModeSpec& mode) : fbgemm_(w, nullptr, mode.mode, mode.weighted) {}
  void run(int64_t set) override { fbgemm_.run(set); }
  const float* output() const override { return static_cast<const float*>(fbgemm_.output()); }

 private:
  FbgemmRunner fbgemm_;
};

class LimitRunner final : public Runner {
 public:
  LimitRunner(const Workload& w, const ModeSpec& mode, int threads, jit::Isa isa)
      : w_(w), threads_(threads), output_(size_t(w.spec().bags * w.spec().dim)) {
    std::string why_not;
    loop_ = limit_loop(isa, why_not);
    if (!loop_) throw std::runtime_error(why_not);
    if (!limit_dim_supported(w.spec().dim))
      throw std::runtime_error("limit: no loop for D=" + std::to_string(w.spec().dim) +
                               " (D must be one of 16, 32, 64, 128, 256, 512)");
    args_.table = w.table();
    args_.row_stride = w.spec().dim;
    args_.dim = w.spec().dim;
    args_.num_indices = w.num_indices();
    args_.offsets = w.offsets().data();
    args_.num_offsets = int64_t(w.offsets().size());
    args_.per_sample_weights = w.per_sample_weights().data();
    args_.op = mode.limit_op;
    args_.output = output_.data();
    set_limit_prefetch(args_, isa, w.spec().rows);
    // Chunk c starts at the first bag whose offset reaches c/threads of the indices.
    for (int c = 0; c <= threads; ++c) {
      const int64_t target = w.num_indices() * c / threads;
      const auto& off = w.offsets();
      chunk_begin_.push_back(
          c == threads ? int64_t(off.size())
                       : int64_t(std::lower_bound(off.begin(), off.end(), target) - off.begin()));
    }
  }
  void run(int64_t set) override {
    args_.indices = w_.indices(set);
    if (threads_ == 1) {
      loop_(args_, 0, args_.num_offsets);
      return;
    }
    arena().execute([&] {
      tbb::parallel_for(
          0, threads_,
          [&](int c) {
            loop_(args_, chunk_begin_[size_t(c)], chunk_begin_[size_t(c) + 1]);
          },
          tbb::static_partitioner());
    });
  }
  const float* output() const override { return output_.data(); }

 private:
  tbb::task_arena& arena() {
    static std::map<int, std::unique_ptr<tbb::task_arena>> arenas;
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    auto& a = arenas[threads_];
    if (!a) a = std::make_unique<tbb::task_arena>(threads_);
    return *a;
  }
  const Workload& w_;
  int threads_;
  std::vector<float> output_;
  LimitLoop loop_ = nullptr;
  LimitArgs args_;
  std::vector<int64_t> chunk_begin_;
};

std::unique_ptr<Runner> make_runner(const Case& c, const Workload& w) {
  switch (c.impl) {
    case Impl::kLimit:
      return std::make_unique<LimitRunner>(w, c.mode, c.threads, c.isa);
    case Impl::kAten:
      return std::make_unique<AtenCaseRunner>(w, c.mode, c.threads);
    case Impl::kFbgemm:
      return std::make_unique<FbgemmCaseRunner>(w, c.mode);
    case Impl::kRef:
      return std::make_unique<RefRunner>(w, c.mode);
    case Impl::kJit:
      return std::make_unique<JitRunner>(w, c.mode, c.threads);
  }
  throw std::logic_error("unknown impl");
}

// The expected output of a problem on index set 0: the reference's.
const std::vector<float>& expected_output(const Case& c, const Workload& w) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<float>> cache;
  std::lock_guard lock(mutex);
  auto [it, inserted] = cache.try_emplace(c.problem());
  if (!inserted) return it->second;
  RefRunner oracle(w, c.mode);
  oracle.run(0);
  it->second.assign(oracle.output(), oracle.output() + w.spec().bags * w.spec().dim);
  return it->second;
}

// Sums and FMAs in index order are exact matches for every implementation here; the tolerance
// only admits a peer that rounds differently (one rounding per term), never a wrong row.
void check_output_once(const Case& c, Workload& w, Runner& runner) {
  static std::mutex mutex;
  static std::map<std::string, bool> checked;
  {
    std::lock_guard lock(mutex);
    if (checked[c.name()]) return;
  }
  const std::vector<float>& expected = expected_output(c, w);
  runner.prepare();
  runner.run(0);
  const float* got = runner.output();
  for (size_t i = 0; i < expected.size(); ++i) {
    const double tolerance = 1e-5 * (1.0 + std::fabs(expected[i]));
    if (!(std::fabs(double(got[i]) - double(expected[i])) <= tolerance))
      throw std::runtime_error("output[" + std::to_string(i / size_t(w.spec().dim)) + "][" +
                               std::to_string(i % size_t(w.spec().dim)) +
                               "] = " + std::to_string(got[i]) + ", reference " +
                               std::to_string(expected[i]));
  }
  std::lock_guard lock(mutex);
  checked[c.name()] = true;
}

void run_case(benchmark::State& state, const Case& c) {
  try {
    // A pinned jit row generates and runs its kernels for c.isa; the pin is process-wide and
    // benchmarks run one at a time, so it covers exactly this row's calls.
    std::optional<rt::ScopedIsaOverride> pin;
    if (c.pinned && c.impl == Impl::kJit) pin.emplace(c.isa);
    Workload& w = workload_for(c.data);
    const auto runner = make_runner(c, w);
    check_output_once(c, w, *runner);
    runner->prepare();
    time_calls(state, [&](int64_t set) { runner->run(set); }, [&] { return w.next_set(); },
               {w.row_bytes_per_call(), double(w.num_indices())});
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_case(const Case& c) {
  register_embag_benchmark(c.name(), [c](benchmark::State& s) { run_case(s, c); });
}

// Per problem: t1 limit, aten, fbgemm (where this build has FBGEMM and FBGEMM the mode), ref,
// jit, then limit-<isa>, jit-<isa> per lower ISA; the same at t2 without aten, fbgemm and ref.
// ATen is the 1-thread peer (its OpenMP pool at 2 threads is erratic on the shared 2-core machine
// next to the TBB pools: calls of milliseconds instead of microseconds), so there is no aten t2
// row; FBGEMM's kernel is single-threaded.
void register_problem(const ModeSpec& mode, const WorkloadSpec& data) {
  static const std::vector<jit::Isa> isas = bench_isas();
  const bool fbgemm = !fbgemm_unsupported_reason(SHAPEJIT_F32, mode.mode);
  for (int threads : {1, 2}) {
    for (Impl impl : {Impl::kLimit, Impl::kAten, Impl::kFbgemm, Impl::kRef, Impl::kJit})
      if ((threads == 1 || impl == Impl::kLimit || impl == Impl::kJit) && !(mode.output_only && impl == Impl::kRef) &&
          (impl != Impl::kFbgemm || fbgemm))
        register_case({impl, mode, data, threads, isas.front()});
    for (size_t i = 1; i < isas.size(); ++i)
      for (Impl impl : {Impl::kLimit, Impl::kJit})
        register_case({impl, mode, data, threads, isas[i], true});
  }
}

bool register_all() {
  for (int64_t dim : {32, 64, 128, 256, 512})
    for (const ModeSpec& mode : {kSum, kMean, kWeightedSum, kMax, kMeanOutputOnly, kMaxOutputOnly})
      register_problem(mode, WorkloadSpec{.rows = 4096, .dim = dim, .bags = 256, .mean_len = 32});
  register_problem(
      kSum, WorkloadSpec{.rows = 1000000, .dim = 128, .bags = 256, .mean_len = 32, .cold = true});
  register_problem(
      kSum,
      WorkloadSpec{
          .rows = 4096, .dim = 128, .bags = 256, .mean_len = 32, .lengths = LengthDist::kZipf});
  // Short bags, as a recommendation model's features have: the same 8192 indices in 2048 bags,
  // where the per-bag work (bounds, zeroing, stores) weighs four times as much.
  for (int64_t dim : {32, 128})
    register_problem(kSum, WorkloadSpec{.rows = 4096, .dim = dim, .bags = 2048, .mean_len = 4});
  return true;
}

[[maybe_unused]] const bool kRegistered = register_all();

}  // namespace
}  // namespace shapejit::bench
