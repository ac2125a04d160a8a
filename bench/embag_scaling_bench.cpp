// One- and two-thread embedding bags over work size: where a second thread starts to pay.
//
// Names: embag_scaling/<impl>/<mode>/<rows>x<dim>/<bags>x<len>/t<threads>
//   impl  jit    the public C API (shapejit_set_num_threads(threads)); the engine decides itself
//                whether a call is worth its arena (runtime/engine/partition.hpp)
//         limit  the limit loop of the engine's ISA (bench/gather_limit_<isa>.cpp); at t2 the
//                bags are always split in two halves of equal index count, one per thread of a
//                2-slot tbb::task_arena, as the t2 limit rows of embedding_bag_bench.cpp do,
//                so small sizes show what forking costs
//         aten   at::_embedding_bag_forward_only with at::set_num_threads(threads); on a busy
//                2-core host its OpenMP pool at t2 can take milliseconds a call (why
//                embedding_bag_bench.cpp has no aten t2 rows): read aten t2 from quiet runs only
// Cases: sum on a 4096 x 64 table (1 MiB: warm in L2/L3), 32 uniform indices per bag,
// bags = 1, 2, 4, ..., 1024; sum 4096 x 128 with 256 bags of 1, 2, 4, ..., 128 indices.
// A row whose thread count exceeds the CPUs this process may run on (tbb::info::
// default_concurrency, which honours the affinity mask) is registered and reported as skipped.
// Timing and the fastest-call figure as embedding_bag_bench.cpp (embag_timing.hpp). Every
// (impl, case) is checked once against the reference output before its first timing.
//
// The family (embag_scaling_rows below) adds GBps, vs_t1 = time(t1 row of the same impl and
// case) / time and vs_limit = time(limit row, same case and threads) / time, and prints the
// curve: microseconds per call of every row of a case on one line.
#include <benchmark/benchmark.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "aten_runner.hpp"
#include "bench_rows.hpp"
#include "embag_timing.hpp"
#include "limit_select.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.h"
#include "workload.hpp"

namespace shapejit::bench {
namespace {

constexpr const char* kPrefix = "embag_scaling/";
const char* const kImpls[] = {"jit", "limit", "aten"};

shapejit_embedding_bag_args sum_args(const Workload& w, int64_t set) {
  return embag_call_args(w, set);
}

// All four outputs of a call of `args`, sized as the library asks (sum mode writes bag_size and
// offset2bag; the others may be empty).
struct Outputs {
  std::vector<float> output;
  std::vector<int64_t> offset2bag, bag_size, max_indices;
  explicit Outputs(const shapejit_embedding_bag_args& args) {
    const auto s = ref::embedding_bag_shapes(args);
    output.resize(size_t(s.output_rows * s.output_cols));
    offset2bag.resize(size_t(std::max<int64_t>(s.offset2bag_len, 1)));
    bag_size.resize(size_t(std::max<int64_t>(s.bag_size_len, 1)));
    max_indices.resize(size_t(std::max<int64_t>(s.max_indices_rows * s.max_indices_cols, 1)));
  }
};

// One implementation on one workload: prepare() before timing, run() per call.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void prepare() {}
  virtual void run() = 0;
  virtual const float* output() const = 0;
};

class JitRunner final : public Runner {
 public:
  JitRunner(const Workload& w, int threads) : args_(sum_args(w, 0)), threads_(threads), out_(args_) {}
  void prepare() override {
    if (shapejit_set_num_threads(threads_) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_set_num_threads: ") + shapejit_last_error());
  }
  void run() override {
    if (shapejit_embedding_bag(&args_, out_.output.data(), out_.offset2bag.data(),
                               out_.bag_size.data(), out_.max_indices.data()) != SHAPEJIT_OK)
      throw std::runtime_error(std::string("shapejit_embedding_bag: ") + shapejit_last_error());
  }
  const float* output() const override { return out_.output.data(); }

 private:
  shapejit_embedding_bag_args args_;
  int threads_;
  Outputs out_;
};

class LimitRunner final : public Runner {
 public:
  LimitRunner(const Workload& w, int threads)
      : threads_(threads), output_(size_t(w.spec().bags * w.spec().dim)) {
    std::string why_not;
    loop_ = limit_loop(rt::selected_isa(), why_not);
    if (!loop_) throw std::runtime_error(why_not);
    if (!limit_dim_supported(w.spec().dim))
      throw std::runtime_error("limit: no loop for D=" + std::to_string(w.spec().dim));
    args_ = {w.table(), w.spec().dim, w.spec().dim, w.indices(0), w.num_indices(),
             w.offsets().data(), int64_t(w.offsets().size()), nullptr, LimitOp::kSum,
             output_.data()};
    set_limit_prefetch(args_, rt::selected_isa(), w.spec().rows);
    // Half c starts at the first bag whose offset reaches c/threads of the indices.
    const auto& off = w.offsets();
    for (int c = 0; c <= threads; ++c)
      bounds_.push_back(c == threads ? int64_t(off.size())
                                     : int64_t(std::lower_bound(off.begin(), off.end(),
                                                                w.num_indices() * c / threads) -
                                               off.begin()));
    if (threads > 1) arena_ = std::make_unique<tbb::task_arena>(threads);
  }
  void run() override {
    if (!arena_) {
      loop_(args_, 0, args_.num_offsets);
      return;
    }
    arena_->execute([&] {
      tbb::parallel_for(
          0, threads_, [&](int c) { loop_(args_, bounds_[size_t(c)], bounds_[size_t(c) + 1]); },
          tbb::static_partitioner());
    });
  }
  const float* output() const override { return output_.data(); }

 private:
  int threads_;
  std::vector<float> output_;
  LimitLoop loop_ = nullptr;
  LimitArgs args_;
  std::vector<int64_t> bounds_;
  std::unique_ptr<tbb::task_arena> arena_;
};

class AtenSumRunner final : public Runner {
 public:
  AtenSumRunner(const Workload& w, int threads) : aten_(w, /*mode=*/0, /*weighted=*/false, threads) {}
  void prepare() override { aten_.prepare(); }
  void run() override { aten_.run(0); }
  const float* output() const override { return aten_.output(); }

 private:
  AtenRunner aten_;
};

std::unique_ptr<Runner> make_runner(const std::string& impl, const Workload& w, int threads) {
  if (impl == "jit") return std::make_unique<JitRunner>(w, threads);
  if (impl == "limit") return std::make_unique<LimitRunner>(w, threads);
  return std::make_unique<AtenSumRunner>(w, threads);
}

// Sums in index order: every implementation matches the reference up to peers' rounding.
void check_once(Runner& runner, const Workload& w) {
  const auto args = sum_args(w, 0);
  Outputs ref_out(args);
  ref::embedding_bag(args, ref_out.output.data(), ref_out.offset2bag.data(),
                     ref_out.bag_size.data(), ref_out.max_indices.data());
  const std::vector<float>& expected = ref_out.output;
  runner.prepare();
  runner.run();
  for (size_t i = 0; i < expected.size(); ++i)
    if (!(std::fabs(double(runner.output()[i]) - double(expected[i])) <=
          1e-5 * (1.0 + std::fabs(expected[i]))))
      throw std::runtime_error("output[" + std::to_string(i) + "] = " +
                               std::to_string(runner.output()[i]) + ", reference " +
                               std::to_string(expected[i]));
}

void register_row(const std::string& impl, const WorkloadSpec& spec, int threads) {
  const std::string name = kPrefix + impl + "/sum/" + spec.name() + "/t" + std::to_string(threads);
  register_embag_benchmark(name, [impl, spec, threads](benchmark::State& state) {
    const int cpus = tbb::info::default_concurrency();
    if (threads > cpus) {
      state.SkipWithError(("skipped: t" + std::to_string(threads) + " needs " +
                           std::to_string(threads) + " CPUs, this process may run on " +
                           std::to_string(cpus)).c_str());
      return;
    }
    try {
      Workload& w = workload_for(spec);
      const auto runner = make_runner(impl, w, threads);
      check_once(*runner, w);
      runner->prepare();
      time_calls(state, [&](int64_t) { runner->run(); }, [] { return int64_t(0); },
                 {w.row_bytes_per_call(), double(w.num_indices())});
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  });
}

bool register_all() {
  std::vector<WorkloadSpec> specs;
  for (int64_t bags = 1; bags <= 1024; bags *= 2)
    specs.push_back({.rows = 4096, .dim = 64, .bags = bags, .mean_len = 32});
  for (int64_t len = 1; len <= 128; len *= 2)
    specs.push_back({.rows = 4096, .dim = 128, .bags = 256, .mean_len = len});
  for (const WorkloadSpec& spec : specs)
    for (int threads : {1, 2})
      for (const char* impl : kImpls)
        if (std::string(impl) != "aten" || aten_available()) register_row(impl, spec, threads);
  return true;
}

[[maybe_unused]] const bool kRegistered = register_all();

// --- rows: <impl>/sum/<case>/t<n> ------------------------------------------------------------

std::optional<ImplRowName> parse(const std::string& name) { return parse_impl_row_name(name, kPrefix); }

void finish(std::vector<BenchRow*>& rows) {
  std::map<std::string, double> seconds;
  for (const BenchRow* r : rows)
    if (const auto n = parse(r->name); n && !r->error && r->seconds > 0)
      seconds[impl_row_key(n->impl, n->problem, n->threads)] = r->seconds;
  const auto ratio = [&](const std::string& k, double s) -> std::optional<double> {
    const auto it = seconds.find(k);
    return it == seconds.end() ? std::nullopt : std::optional<double>(it->second / s);
  };
  for (BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || r->error || r->seconds <= 0) continue;
    r->set("GBps", r->giga_per_second("bytes"));
    r->set("vs_t1", ratio(impl_row_key(n->impl, n->problem, 1), r->seconds));
    if (n->impl != "limit") r->set("vs_limit", ratio(impl_row_key("limit", n->problem, n->threads), r->seconds));
  }
}

// The curve: per case, microseconds per call of each impl at t1 and t2, then the speed-ups.
void summary(std::ostream& out, const std::vector<const BenchRow*>& rows) {
  std::vector<std::string> order;
  std::map<std::string, const BenchRow*> by_key;
  for (const BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n) continue;
    if (std::find(order.begin(), order.end(), n->problem) == order.end()) order.push_back(n->problem);
    by_key[impl_row_key(n->impl, n->problem, n->threads)] = r;
  }
  const auto us = [&](const std::string& k) -> std::optional<double> {
    const auto it = by_key.find(k);
    if (it == by_key.end() || it->second->error || it->second->seconds <= 0) return std::nullopt;
    return it->second->seconds * 1e6;
  };
  const auto cell = [](std::optional<double> v, const char* format) {
    char buf[32] = "-";
    if (v) std::snprintf(buf, sizeof buf, format, *v);
    return std::string(buf);
  };
  const auto div = [](std::optional<double> a, std::optional<double> b) -> std::optional<double> {
    return a && b && *b > 0 ? std::optional<double>(*a / *b) : std::nullopt;
  };
  out << "\nembag_scaling: microseconds per call (fastest call); t2/t1 = speed-up of 2 threads "
         "over 1 (above 1: t2 faster); jit/limit at t2 = limit time / jit time\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %8s %8s %8s %8s %8s %8s %9s %11s %9s\n", "case",
                "jit t1", "jit t2", "lim t1", "lim t2", "aten t1", "aten t2", "jit t2/t1",
                "limit t2/t1", "jit/limit");
  out << line;
  for (const std::string& p : order) {
    const auto j1 = us(impl_row_key("jit", p, 1)), j2 = us(impl_row_key("jit", p, 2));
    const auto l1 = us(impl_row_key("limit", p, 1)), l2 = us(impl_row_key("limit", p, 2));
    std::snprintf(line, sizeof line, "%-22s %8s %8s %8s %8s %8s %8s %9s %11s %9s\n",
                  p.substr(p.find('/') + 1).c_str(), cell(j1, "%.2f").c_str(),
                  cell(j2, "%.2f").c_str(), cell(l1, "%.2f").c_str(), cell(l2, "%.2f").c_str(),
                  cell(us(impl_row_key("aten", p, 1)), "%.2f").c_str(),
                  cell(us(impl_row_key("aten", p, 2)), "%.2f").c_str(), cell(div(j1, j2), "%.3f").c_str(),
                  cell(div(l1, l2), "%.3f").c_str(), cell(div(l2, j2), "%.3f").c_str());
    out << line;
  }
}

[[maybe_unused]] const bool kRows = register_row_family({kPrefix, finish, summary});

}  // namespace
}  // namespace shapejit::bench
