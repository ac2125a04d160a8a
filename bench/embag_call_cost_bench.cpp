// The fixed cost of one embedding-bag call and where it goes, in one run.
//
// Names: embag_call/<stage>/<bags>x<len>/D<dim>  (f32 table of 4096 rows, int64 indices and
// offsets, mode sum, one thread; the inputs and outputs stay the same for every call). Problems:
// 1x1 D128 (FBGEMM's fixed-cost figure), 8x4 D128 (a small call), 256x32 D32 (the seed's
// shape at the width where validation's pass over the 8192 indices weighs most) and 2048x4 D32
// (the same indices in short bags, as a recommendation model's features: the per-bag cost).
//   capi     shapejit_embedding_bag: the whole C ABI call
//   prepared shapejit_embedding_bag_prepared_run of the call prepared once (its form validated
//            and its kernel bound at prepare): the batch's checks, the outputs', the kernel; the
//            buffers are the last call's, whose buffer rules a prepared run does not test again
//   prepared_swap  the same, its outputs alternating between two sets (the buffer rules tested
//            on every call)
//   prepared_tables  two prepared forms (the table and a copy of it) run in turn on the same
//            buffers, as a model with several tables calls them
//   plan     rt::plan_embedding_bag of the call (the input rules: dtypes, sizes, alignment,
//            offsets, every index) from the plain args
//   outputs  rt::validate_embedding_bag_outputs of that plan (null, alignment, overlap)
//   key      rt::make_embag_key of the plan on the selected ISA (the key alone)
//   lookup   rt::embag_kernel_for the plan on that ISA: the API's key and lookup together (the
//            thread's last kernel in front of the process cache)
//   kernel   the cached kernel itself, called with prepared EmbagKernelArgs: the floor (what
//            FBGEMM's 0.07 us figure for 1x1 D=128 measures), and the column `vs_kernel`
//            (this row's time / the kernel row's) of every other row of the same problem
//   fbgemm   FBGEMM's own kernel (fbgemm_runner.hpp: GenerateEmbeddingSpMDM, generated once,
//            called through the std::function it returns, offsets with the index count
//            appended) on the same inputs: the peer of capi and kernel, and the column
//            `vs_fbgemm` (this row's time / the fbgemm row's); checked once to give capi's
//            output bit for bit; only in builds against pip torch 2.x
// The stage rows do not add up to capi exactly: capi also has the C ABI wrapper, the ex
// defaults, the bag schedule, the sum-mode count zeroing and the calls' own cache effects.
//
// Timing: each iteration times a batch of kBatch calls; a row's time is the fastest batch /
// kBatch (counter min_call_seconds, bench_main.cpp), which a clock read (~20 ns) cannot skew.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_rows.hpp"
#include "embag_timing.hpp"
#include "fbgemm_runner.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.h"
#include "workload.hpp"

namespace shapejit::bench {
namespace {

constexpr const char* kPrefix = "embag_call/";
constexpr int kBatch = 200;
constexpr int64_t kRows = 4096;

struct Problem {
  int64_t bags, len, dim;
  std::string name() const {
    return std::to_string(bags) + "x" + std::to_string(len) + "/D" + std::to_string(dim);
  }
};

// Inputs and outputs of one problem, built once.
struct CallData {
  CacheLineVector<float> table, output;  // rows on cache lines, as torch's allocator gives them
  std::vector<int64_t> indices, offsets, bag_size, max_indices;
  shapejit_embedding_bag_args args{};

  explicit CallData(const Problem& p)
      : table(size_t(kRows * p.dim)),
        output(size_t(p.bags * p.dim)),
        indices(size_t(p.bags * p.len)),
        offsets(size_t(p.bags)),
        bag_size(size_t(p.bags)),
        max_indices(size_t(p.bags)) {
    std::mt19937_64 rng(13);
    for (float& v : table) v = float(rng() % 64) - 32.0f;
    for (int64_t& i : indices) i = int64_t(rng() % uint64_t(kRows));
    for (int64_t b = 0; b < p.bags; ++b) offsets[size_t(b)] = b * p.len;
    args.weight = table.data();
    args.weight_dtype = SHAPEJIT_F32;
    args.num_rows = kRows;
    args.dim = p.dim;
    args.row_stride = p.dim;
    args.indices = indices.data();
    args.index_dtype = SHAPEJIT_I64;
    args.num_indices = int64_t(indices.size());
    args.offsets = offsets.data();
    args.offset_dtype = SHAPEJIT_I64;
    args.num_offsets = int64_t(offsets.size());
    args.mode = SHAPEJIT_SUM;
  }
  // Sum mode without padding: no offset2bag; bag_size and max_indices hold B zeros.
  void call_capi() {
    if (shapejit_embedding_bag(&args, output.data(), nullptr, bag_size.data(), max_indices.data()) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_embedding_bag: ") + shapejit_last_error());
  }
};

// Times batches of `call`; the row's time is the fastest batch per call.
void time_batches(benchmark::State& state, const std::function<void()>& call) {
  for (int i = 0; i < 1000; ++i) call();  // warm: caches, the kernel, the thread's last key
  double fastest = std::numeric_limits<double>::infinity();
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) call();
    benchmark::ClobberMemory();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    fastest = std::min(fastest, took.count() / kBatch);
  }
  state.counters["min_call_seconds"] = fastest;
}

// The body of one stage on a prepared problem.
std::function<void()> stage_body(const std::string& stage, CallData& d) {
  if (stage == "capi") return [&d] { d.call_capi(); };
  const auto prepare = [](const shapejit_embedding_bag_args& args) {
    shapejit_embedding_bag_ex_args form{};
    shapejit_embedding_bag_ex_init(&form, &args);
    shapejit_embedding_bag_prepared* raw = nullptr;
    if (shapejit_embedding_bag_prepare(&form, &raw) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_embedding_bag_prepare: ") + shapejit_last_error());
    return std::shared_ptr<shapejit_embedding_bag_prepared>(raw, shapejit_embedding_bag_prepared_destroy);
  };
  const shapejit_embedding_bag_batch batch{d.args.indices, d.args.num_indices, d.args.offsets, d.args.num_offsets,
                                           nullptr};
  if (stage == "prepared_tables") {
    auto copy = std::make_shared<CacheLineVector<float>>(d.table);
    shapejit_embedding_bag_args second = d.args;
    second.weight = copy->data();
    std::array<std::shared_ptr<shapejit_embedding_bag_prepared>, 2> forms{prepare(d.args), prepare(second)};
    auto turn = std::make_shared<size_t>(0);
    return [&d, forms, copy, batch, turn] {
      *turn ^= 1;
      if (shapejit_embedding_bag_prepared_run(forms[*turn].get(), &batch, d.output.data(), nullptr,
                                              d.bag_size.data(), d.max_indices.data()) != SHAPEJIT_OK)
        throw std::runtime_error(std::string("shapejit_embedding_bag_prepared_run: ") + shapejit_last_error());
    };
  }
  if (stage == "prepared" || stage == "prepared_swap") {
    const auto prepared = prepare(d.args);
    // The second set of outputs (prepared_swap): copies of the first, so both have their sizes.
    auto other = std::make_shared<std::array<std::vector<int64_t>, 2>>();
    auto other_output = std::make_shared<CacheLineVector<float>>(d.output);
    (*other)[0] = d.bag_size;
    (*other)[1] = d.max_indices;
    auto flip = std::make_shared<bool>(false);
    const bool swap = stage == "prepared_swap";
    return [&d, prepared, batch, other, other_output, flip, swap] {
      const bool second = swap && (*flip = !*flip);
      float* out = second ? other_output->data() : d.output.data();
      int64_t* sizes = second ? (*other)[0].data() : d.bag_size.data();
      int64_t* maxi = second ? (*other)[1].data() : d.max_indices.data();
      if (shapejit_embedding_bag_prepared_run(prepared.get(), &batch, out, nullptr, sizes, maxi) != SHAPEJIT_OK)
        throw std::runtime_error(std::string("shapejit_embedding_bag_prepared_run: ") + shapejit_last_error());
    };
  }
  // The remaining stages start from the state a capi call leaves (its kernel compiled).
  d.call_capi();
  auto plan = std::make_shared<rt::EmbagCallPlan>(rt::plan_embedding_bag(d.args));
  if (stage == "plan")
    return [&d] {
      const rt::EmbagCallPlan p = rt::plan_embedding_bag(d.args);
      benchmark::DoNotOptimize(&p);
    };
  if (stage == "outputs")
    return [&d, plan] {
      rt::validate_embedding_bag_outputs(*plan, d.output.data(), nullptr, d.bag_size.data(), d.max_indices.data());
    };
  const jit::Isa isa = rt::selected_isa();
  if (stage == "key")
    return [plan, isa] {
      const jit::EmbagKey key = rt::make_embag_key(*plan, isa);
      benchmark::DoNotOptimize(&key);
    };
  if (stage == "lookup")
    return [plan, isa] {
      const rt::EmbagKernelHandle h = rt::embag_kernel_for(*plan, isa);
      benchmark::DoNotOptimize(&h);
    };
  if (stage == "fbgemm") {
    auto fbgemm = std::make_shared<FbgemmKernel>(SHAPEJIT_F32, d.args.dim, SHAPEJIT_SUM, false);
    auto offsets = std::make_shared<std::vector<int64_t>>(d.offsets);
    offsets->push_back(d.args.num_indices);  // FBGEMM reads offsets[bags] as the last bag's end
    const std::vector<float> expected(d.output.begin(), d.output.end());  // capi's, from the call above
    auto call = [&d, fbgemm, offsets] {
      fbgemm->run(d.args.num_offsets, d.args.num_indices, d.args.num_rows, d.table.data(), d.indices.data(),
                  offsets->data(), nullptr, d.output.data());
      benchmark::ClobberMemory();
    };
    std::fill(d.output.begin(), d.output.end(), -1.0f);
    call();
    if (std::memcmp(d.output.data(), expected.data(), expected.size() * sizeof(float)) != 0)
      throw std::runtime_error("fbgemm: the output differs from shapejit_embedding_bag's");
    return call;
  }
  if (stage == "kernel") {
    const rt::EmbagKernelHandle h = rt::embag_kernel_for(*plan, isa);
    const jit::EmbagKernelArgs a =
        rt::make_embag_kernel_args(*plan, d.output.data(), nullptr, d.bag_size.data(), d.max_indices.data());
    return [fn = h.fn(), a, plan] {
      fn(&a);
      benchmark::ClobberMemory();
    };
  }
  throw std::logic_error("unknown stage " + stage);
}

void run_row(benchmark::State& state, const std::string& stage, const Problem& p) {
  try {
    if (shapejit_set_num_threads(1) != SHAPEJIT_OK) throw std::runtime_error(shapejit_last_error());
    CallData d(p);
    time_batches(state, stage_body(stage, d));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// vs_kernel and vs_fbgemm: each row's time over the kernel row, and over the fbgemm row, of its
// problem.
void finish(std::vector<BenchRow*>& rows) {
  std::map<std::string, double> kernel, fbgemm;  // problem -> seconds
  auto problem_of = [](const std::string& name) { return name.substr(name.find('/', std::strlen(kPrefix)) + 1); };
  for (const BenchRow* r : rows) {
    if (r->error) continue;
    if (r->name.rfind(std::string(kPrefix) + "kernel/", 0) == 0) kernel[problem_of(r->name)] = r->seconds;
    if (r->name.rfind(std::string(kPrefix) + "fbgemm/", 0) == 0) fbgemm[problem_of(r->name)] = r->seconds;
  }
  for (BenchRow* r : rows) {
    const auto over = [&](const std::map<std::string, double>& peer) {
      const auto it = peer.find(problem_of(r->name));
      return it == peer.end() || r->error || it->second <= 0 ? std::nullopt
                                                             : std::optional<double>(r->seconds / it->second);
    };
    r->set("ns", r->error ? std::nullopt : std::optional<double>(r->seconds * 1e9));
    r->set("vs_kernel", over(kernel));
    r->set("vs_fbgemm", over(fbgemm));
  }
}

bool register_all() {
  const bool fbgemm = !fbgemm_unsupported_reason(SHAPEJIT_F32, SHAPEJIT_SUM);
  for (const Problem& p : {Problem{1, 1, 128}, Problem{8, 4, 128}, Problem{256, 32, 32}, Problem{2048, 4, 32}})
    for (const char* stage : {"capi", "prepared", "prepared_swap", "prepared_tables", "plan", "outputs", "key", "lookup", "kernel", "fbgemm"})
      if (std::string(stage) != "fbgemm" || fbgemm)
        register_embag_benchmark(std::string(kPrefix) + stage + "/" + p.name(),
                                 [stage = std::string(stage), p](benchmark::State& s) { run_row(s, stage, p); });
  return register_row_family({kPrefix, finish, {}});
}

[[maybe_unused]] const bool kRegistered = register_all();

}  // namespace
}  // namespace shapejit::bench
