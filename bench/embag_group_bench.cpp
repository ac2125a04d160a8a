// A model's tables in one call (shapejit_embedding_bags) against one call per table.
//
// Names: embag_group/<impl>/sum/<T>x<rows>x<dim>/<bags>x<len>/t<threads>
//   impl  group  shapejit_embedding_bags over the T calls (one validation pass, one region)
//         concat the same call writing the tables' outputs side by side into one [bags, T x dim]
//                buffer (output_row_stride): what a model's torch.cat would produce
//         calls  shapejit_embedding_bag once per table, one after another
//         limit  the limit loop of the engine's ISA over every table; at t2 each thread of a
//                2-slot tbb::task_arena takes half of every table's bags (one fork for all)
//         aten   at::_embedding_bag_forward_only once per table (at::set_num_threads(threads))
// Table t is the workload of <rows + 16 t> x <dim> (distinct tables of about the same size, each
// its own random rows and indices), f32, int64 indices, sum, <bags> bags of <len> indices.
// Cases: 8 tables of 4096 x 64 with 256 bags of 8 (pooling as in recommendation models: the
// calls are small, so their fixed cost shows), 8 x 4096 x 128 with 256 x 32, and 26 tables (the
// Criteo count) of 4096 x 64 with 128 bags of 4. Every (impl, case) is checked once against the
// reference before its first timing; timing as embedding_bag_bench.cpp (embag_timing.hpp).
//
// The family adds GBps, vs_calls = time(calls row, same case and threads) / time and vs_limit =
// time(limit row) / time, and prints microseconds per call of each impl per case.
#include <benchmark/benchmark.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

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

constexpr const char* kPrefix = "embag_group/";
const char* const kImpls[] = {"group", "concat", "calls", "limit", "aten"};

struct GroupSpec {
  int64_t tables, rows, dim, bags, len;
  std::string name() const {
    return std::to_string(tables) + "x" + std::to_string(rows) + "x" + std::to_string(dim) + "/" + std::to_string(bags) +
           "x" + std::to_string(len);
  }
  WorkloadSpec table(int64_t t) const { return {.rows = rows + 16 * t, .dim = dim, .bags = bags, .mean_len = len}; }
};

// The tables of a group and one set of outputs per table, sized as the library asks.
struct GroupData {
  std::vector<Workload*> tables;
  std::vector<shapejit_embedding_bag_args> args;
  std::vector<std::vector<float>> output;
  std::vector<std::vector<int64_t>> offset2bag, bag_size, max_indices;

  explicit GroupData(const GroupSpec& spec) {
    for (int64_t t = 0; t < spec.tables; ++t) {
      tables.push_back(&workload_for(spec.table(t)));
      args.push_back(embag_call_args(*tables.back(), 0));
      const auto s = ref::embedding_bag_shapes(args.back());
      output.emplace_back(size_t(s.output_rows * s.output_cols));
      offset2bag.emplace_back(size_t(std::max<int64_t>(s.offset2bag_len, 1)));
      bag_size.emplace_back(size_t(std::max<int64_t>(s.bag_size_len, 1)));
      max_indices.emplace_back(size_t(std::max<int64_t>(s.max_indices_rows * s.max_indices_cols, 1)));
    }
  }
  double row_bytes() const {
    double b = 0;
    for (const Workload* w : tables) b += w->row_bytes_per_call();
    return b;
  }
  double rows() const {
    double n = 0;
    for (const Workload* w : tables) n += double(w->num_indices());
    return n;
  }
};

// One implementation on one group: prepare() before timing, run() per call, output(t) after.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual void prepare() {}
  virtual void run() = 0;
  virtual const float* output(size_t table) = 0;  // after run(); may gather the rows first
};

void require_ok(shapejit_status s, const char* what) {
  if (s != SHAPEJIT_OK) throw std::runtime_error(std::string(what) + ": " + shapejit_last_error());
}

class JitRunner final : public Runner {
 public:
  enum class Layout { kCalls, kGroup, kConcat };
  JitRunner(const GroupSpec& spec, int threads, Layout layout)
      : d_(spec), threads_(threads), grouped_(layout != Layout::kCalls), concat_(layout == Layout::kConcat) {
    const int64_t columns = spec.tables * spec.dim;
    if (concat_) side_by_side_.resize(size_t(spec.bags * columns));
    for (size_t t = 0; t < d_.args.size(); ++t) {
      ex_.emplace_back();
      shapejit_embedding_bag_ex_init(&ex_.back(), &d_.args[t]);
      float* out = d_.output[t].data();
      if (concat_) {
        ex_.back().output_row_stride = columns;
        out = side_by_side_.data() + int64_t(t) * spec.dim;
      }
      outs_.push_back({out, d_.offset2bag[t].data(), d_.bag_size[t].data(), d_.max_indices[t].data()});
    }
    for (const auto& e : ex_) calls_.push_back(&e);
  }
  void prepare() override { require_ok(shapejit_set_num_threads(threads_), "shapejit_set_num_threads"); }
  void run() override {
    if (grouped_) return require_ok(shapejit_embedding_bags(calls_.data(), outs_.data(), int64_t(calls_.size())), "shapejit_embedding_bags");
    for (size_t t = 0; t < outs_.size(); ++t)
      require_ok(shapejit_embedding_bag(&d_.args[t], outs_[t].output, outs_[t].offset2bag, outs_[t].bag_size,
                                        outs_[t].max_indices),
                 "shapejit_embedding_bag");
  }
  const float* output(size_t t) override {
    if (!concat_) return d_.output[t].data();
    const int64_t dim = d_.args[t].dim, columns = int64_t(d_.args.size()) * dim;  // table t's rows, gathered
    std::vector<float>& rows = d_.output[t];
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i] = side_by_side_[size_t(int64_t(i) / dim * columns + int64_t(t) * dim + int64_t(i) % dim)];
    return rows.data();
  }

 private:
  GroupData d_;
  int threads_;
  bool grouped_, concat_;
  std::vector<float> side_by_side_;
  std::vector<shapejit_embedding_bag_ex_args> ex_;
  std::vector<const shapejit_embedding_bag_ex_args*> calls_;
  std::vector<shapejit_embedding_bag_outputs> outs_;
};

class LimitRunner final : public Runner {
 public:
  LimitRunner(const GroupSpec& spec, int threads) : d_(spec), threads_(threads) {
    std::string why_not;
    loop_ = limit_loop(rt::selected_isa(), why_not);
    if (!loop_) throw std::runtime_error(why_not);
    if (!limit_dim_supported(spec.dim)) throw std::runtime_error("limit: no loop for D=" + std::to_string(spec.dim));
    for (size_t t = 0; t < d_.tables.size(); ++t) {
      const Workload& w = *d_.tables[t];
      LimitArgs a{w.table(), spec.dim, spec.dim, w.indices(0), w.num_indices(), w.offsets().data(),
                  int64_t(w.offsets().size()), nullptr, LimitOp::kSum, d_.output[t].data()};
      set_limit_prefetch(a, rt::selected_isa(), w.spec().rows);
      args_.push_back(a);
    }
    if (threads > 1) arena_ = std::make_unique<tbb::task_arena>(threads);
  }
  void run() override {
    const auto part = [&](int c) {  // part c of every table's bags (equal bag lengths here)
      for (const LimitArgs& a : args_) loop_(a, a.num_offsets * c / threads_, a.num_offsets * (c + 1) / threads_);
    };
    if (!arena_) return part(0);
    arena_->execute([&] { tbb::parallel_for(0, threads_, part, tbb::static_partitioner()); });
  }
  const float* output(size_t t) override { return d_.output[t].data(); }

 private:
  GroupData d_;
  int threads_;
  LimitLoop loop_ = nullptr;
  std::vector<LimitArgs> args_;
  std::unique_ptr<tbb::task_arena> arena_;
};

class AtenRunners final : public Runner {
 public:
  AtenRunners(const GroupSpec& spec, int threads) : d_(spec) {
    for (const Workload* w : d_.tables) aten_.push_back(std::make_unique<AtenRunner>(*w, /*mode=*/0, false, threads));
  }
  void prepare() override { aten_.front()->prepare(); }
  void run() override {
    for (auto& a : aten_) a->run(0);
  }
  const float* output(size_t t) override { return aten_[t]->output(); }

 private:
  GroupData d_;
  std::vector<std::unique_ptr<AtenRunner>> aten_;
};

std::unique_ptr<Runner> make_runner(const std::string& impl, const GroupSpec& spec, int threads) {
  if (impl == "group") return std::make_unique<JitRunner>(spec, threads, JitRunner::Layout::kGroup);
  if (impl == "concat") return std::make_unique<JitRunner>(spec, threads, JitRunner::Layout::kConcat);
  if (impl == "calls") return std::make_unique<JitRunner>(spec, threads, JitRunner::Layout::kCalls);
  if (impl == "limit") return std::make_unique<LimitRunner>(spec, threads);
  return std::make_unique<AtenRunners>(spec, threads);
}

// Sums in index order: every implementation matches the reference up to peers' rounding.
void check_once(Runner& runner, const GroupSpec& spec) {
  runner.prepare();
  runner.run();
  GroupData ref_data(spec);
  for (size_t t = 0; t < ref_data.args.size(); ++t) {
    ref::embedding_bag(ref_data.args[t], ref_data.output[t].data(), ref_data.offset2bag[t].data(),
                       ref_data.bag_size[t].data(), ref_data.max_indices[t].data());
    const std::vector<float>& want = ref_data.output[t];
    for (size_t i = 0; i < want.size(); ++i)
      if (!(std::fabs(double(runner.output(t)[i]) - double(want[i])) <= 1e-5 * (1.0 + std::fabs(want[i]))))
        throw std::runtime_error("table " + std::to_string(t) + " output[" + std::to_string(i) +
                                 "] = " + std::to_string(runner.output(t)[i]) + ", reference " + std::to_string(want[i]));
  }
}

void register_row(const std::string& impl, const GroupSpec& spec, int threads) {
  const std::string name = kPrefix + impl + "/sum/" + spec.name() + "/t" + std::to_string(threads);
  register_embag_benchmark(name, [impl, spec, threads](benchmark::State& state) {
    if (threads > tbb::info::default_concurrency()) {
      state.SkipWithError(("skipped: t" + std::to_string(threads) + " needs " + std::to_string(threads) +
                           " CPUs, this process may run on " + std::to_string(tbb::info::default_concurrency()))
                              .c_str());
      return;
    }
    try {
      const auto runner = make_runner(impl, spec, threads);
      check_once(*runner, spec);
      runner->prepare();
      const GroupData volume(spec);
      time_calls(state, [&](int64_t) { runner->run(); }, [] { return int64_t(0); }, {volume.row_bytes(), volume.rows()});
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  });
}

bool register_all() {
  const GroupSpec specs[] = {{8, 4096, 64, 256, 8}, {8, 4096, 128, 256, 32}, {26, 4096, 64, 128, 4}};
  for (const GroupSpec& spec : specs)
    for (int threads : {1, 2})
      for (const char* impl : kImpls)
        if (std::string(impl) != "aten" || aten_available()) register_row(impl, spec, threads);
  return true;
}

[[maybe_unused]] const bool kRegistered = register_all();

// --- rows: <impl>/sum/<case>/t<n> ------------------------------------------------------------

std::optional<ImplRowName> parse(const std::string& name) { return parse_impl_row_name(name, kPrefix); }

std::map<std::string, const BenchRow*> rows_by_key(const std::vector<const BenchRow*>& rows) {
  std::map<std::string, const BenchRow*> by_key;
  for (const BenchRow* r : rows)
    if (const auto n = parse(r->name); n && !r->error && r->seconds > 0) by_key[impl_row_key(n->impl, n->problem, n->threads)] = r;
  return by_key;
}

void finish(std::vector<BenchRow*>& rows) {
  const auto by_key = rows_by_key(std::vector<const BenchRow*>(rows.begin(), rows.end()));
  for (BenchRow* r : rows) {
    const auto n = parse(r->name);
    if (!n || r->error || r->seconds <= 0) continue;
    const auto ratio = [&](const char* impl) -> std::optional<double> {
      const auto it = by_key.find(impl_row_key(impl, n->problem, n->threads));
      return it == by_key.end() ? std::nullopt : std::optional<double>(it->second->seconds / r->seconds);
    };
    r->set("GBps", r->giga_per_second("bytes"));
    r->set("vs_calls", ratio("calls"));
    r->set("vs_limit", ratio("limit"));
  }
}

void summary(std::ostream& out, const std::vector<const BenchRow*>& rows) {
  const auto by_key = rows_by_key(rows);
  std::vector<std::string> order;
  for (const BenchRow* r : rows)
    if (const auto n = parse(r->name); n && std::find(order.begin(), order.end(), n->problem) == order.end())
      order.push_back(n->problem);
  const auto us = [&](const char* impl, const std::string& p, int threads) -> std::string {
    const auto it = by_key.find(impl_row_key(impl, p, threads));
    char buf[32] = "-";
    if (it != by_key.end()) std::snprintf(buf, sizeof buf, "%.2f", it->second->seconds * 1e6);
    return buf;
  };
  out << "\nembag_group: microseconds per call (fastest call) of all tables\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "case", "group t1",
                "concat t1", "calls t1", "limit t1", "aten t1", "group t2", "concat t2", "calls t2", "limit t2",
                "aten t2");
  out << line;
  for (const std::string& p : order) {
    std::snprintf(line, sizeof line, "%-22s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n",
                  p.substr(p.find('/') + 1).c_str(), us("group", p, 1).c_str(), us("concat", p, 1).c_str(),
                  us("calls", p, 1).c_str(), us("limit", p, 1).c_str(), us("aten", p, 1).c_str(),
                  us("group", p, 2).c_str(), us("concat", p, 2).c_str(), us("calls", p, 2).c_str(),
                  us("limit", p, 2).c_str(), us("aten", p, 2).c_str());
    out << line;
  }
}

[[maybe_unused]] const bool kRows = register_row_family({kPrefix, finish, summary});

}  // namespace
}  // namespace shapejit::bench
