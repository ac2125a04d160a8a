// The timing loop every embedding-bag benchmark row shares (f32 and dtype cases): untimed
// warm-up, each call timed on its own, and the per-call counters the reporter turns into GB/s
// and rows/s (embedding_bag_rows.cpp).
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <string>

namespace shapejit::bench {

/// What one call of an implementation gathers, for the counters.
struct CallVolume {
  double row_bytes = 0;  ///< table bytes read per call (rows x stored row bytes)
  double rows = 0;       ///< rows gathered per call
};

/// Times `call(set)` with next_set() choosing each call's index set; sets the counters `bytes`,
/// `rows` and `min_call_seconds`.
void time_calls(benchmark::State& state, const std::function<void(int64_t)>& call,
                const std::function<int64_t()>& next_set, const CallVolume& volume);

/// Registers a benchmark with the settings every embedding-bag row uses (real time, min
/// statistic, microseconds).
void register_embag_benchmark(const std::string& name, std::function<void(benchmark::State&)> body);

}  // namespace shapejit::bench
