// See embag_timing.hpp.
#include "embag_timing.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

namespace shapejit::bench {
namespace {

double min_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

}  // namespace

void time_calls(benchmark::State& state, const std::function<void(int64_t)>& call,
                const std::function<int64_t()>& next_set, const CallVolume& volume) {
  // Untimed warm-up of at least 1 ms: caches (warm cases) and the thread pools of t2 (OpenMP
  // and TBB workers asleep since another benchmark ran), so that Google Benchmark's iteration
  // estimate is not made from one slow first call.
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  for (int calls = 0; calls < 2 || std::chrono::steady_clock::now() < warm_until; ++calls) call(next_set());
  // Each call is timed on its own as well: the fastest call is the figure least disturbed by
  // the other processes of a shared 2-core machine (a repetition's mean always includes some).
  double fastest = std::numeric_limits<double>::infinity();
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    call(next_set());
    benchmark::ClobberMemory();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    fastest = std::min(fastest, took.count());
  }
  // Plain per-call values; the reporter turns them into the row's time, GB/s and rows/s.
  state.counters["bytes"] = volume.row_bytes;
  state.counters["rows"] = volume.rows;
  state.counters["min_call_seconds"] = fastest;
}

void register_embag_benchmark(const std::string& name, std::function<void(benchmark::State&)> body) {
  // Real time decides the iteration count, since t2 work runs on other threads too (Google
  // Benchmark then appends "/real_time" in --benchmark_list_tests; the reporter does not).
  benchmark::RegisterBenchmark(name.c_str(), [body = std::move(body)](benchmark::State& s) { body(s); })
      ->ComputeStatistics("min", min_of)
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace shapejit::bench
