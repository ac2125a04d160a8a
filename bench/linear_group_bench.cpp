// Linear-group benchmarks: shapejit's LinearGroup (jit) against oneDNN, OpenBLAS, libxsmm and
// XNNPACK on the q/k/v in-projections of attention, and against the FMA peak and the DRAM read
// bandwidth of the machine, side by side in one process.
//
// Names: linear_group/<impl>/<case>/t<threads>
//   impl  jit              shapejit::LinearGroup (public C++ API), packed form, one call
//         onednn           bench/lg_peers_onednn.cpp     (matmul primitives, packed groups)
//         openblas_3x      bench/lg_peers_openblas.cpp   (one sgemm per part)
//         openblas_packed  bench/lg_peers_openblas.cpp   (one sgemm per packed group)
//         libxsmm_3x       bench/lg_peers_libxsmm.cpp    (small shapes only, t1)
//         xnnpack_3x       bench/lg_peers_xnnpack.cpp    (one fully-connected operator per part)
//   case  tiny_cross_e16   the seed's cross-attention: E=16, q from 5 rows with W[0:E], k and v
//                          from 7 memory rows with W[E:3E]
//         self_e768_m128   self-attention: one input [128, 768], N = 3 x 768
//         self_e1024_m512  one input [512, 1024], N = 3 x 1024
//         decode_e4096_m1  one input [1, 4096], N = 3 x 4096: 201 MB of weights per call, 6x the
//         decode_e4096_m8  L3, so every call streams them from DRAM (m1 and m8 share one copy)
// Plus the limits: linear_group/fma_peak/zmm/t{1,2} and fma_peak/ymm/t1 (bench/fma_peak.cpp: 12
// independent FMA chains per thread) and linear_group/read_peak/dram/t{1,2} (a 256 MiB streaming
// read split over the threads).
// Every part computes Y_p = X_p W_p^T + b_p into its own row-major output (bias included for
// every implementation; see lg_peers_common.hpp).
//
// Timing: as for every row of shapejit_bench (bench_main.cpp), --benchmark_repetitions
// repetitions with random interleaving, so the repetitions of all implementations of a case are
// spread over the same stretch of the run, and a row's time is its fastest repetition's wall
// time per call. The untimed part of a benchmark applies the thread count and makes one warm-up
// call (skipped when a call takes 0.5 s or more: the scalar fallback). Each row sets plain
// per-call counters that the reporter turns into figures and ratios (linear_group_rows.cpp):
//   flops       2 * M_p * N_p * K summed over parts         -> GFLOPs = flops / time
//   peak_flops  measured_fma_peak(threads), flop/s           -> vs_peak = GFLOPs / peak
//   bytes       (decode rows) weight bytes read per call     -> GBps = bytes / time
//   read_bw     (decode rows) measured_read_bandwidth(threads) -> vs_bw = GBps / bandwidth
// where peak and bandwidth are the larger of that counter (best of several short bursts in this
// process, on first use) and the GFLOPs / GBps of the fma_peak/zmm / read_peak/dram row of the
// same thread count in this run, so that neither ratio is flattered by an unlucky measurement;
// and vs_best_peer = time of the fastest peer row of the same case and thread count / time
// (1.0 on the best peer itself, > 1 when faster than every peer), empty when a filter dropped
// every peer of the case.
//
// Every implementation is built once per case (weights packed or reordered, primitives made,
// kernels dispatched) and checked once, before its first timing, against a double-precision
// reference on three rows of every part with the tolerance of split-gemm-semantics.md; a
// mismatch fails the row. Built implementations stay alive for the whole run (random
// interleaving comes back to every case), about 2.4 GB of resident memory in all.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fma_peak.hpp"
#include "lg_peers_common.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::bench {
namespace {

// ---- The cases --------------------------------------------------------------------------

LgCase self_case(const char* name, int64_t e, int64_t m) {
  return LgCase{name, e, {m}, {{0, 0, e}, {0, e, e}, {0, 2 * e, e}}};
}

const std::vector<LgCase>& cases() {
  static const std::vector<LgCase> all = {
      LgCase{"tiny_cross_e16", 16, {5, 7}, {{0, 0, 16}, {1, 16, 16}, {1, 32, 16}}},
      self_case("self_e768_m128", 768, 128),
      self_case("self_e1024_m512", 1024, 512),
      self_case("decode_e4096_m1", 4096, 1),
      self_case("decode_e4096_m8", 4096, 8),
  };
  return all;
}

// The weight-streaming cases, which report GB/s of weights and the ratio to the read bandwidth.
bool is_decode(const LgCase& c) {
  for (int64_t m : c.input_rows)
    if (m > 8) return false;
  return c.k >= 1024;
}

// ---- The jit implementation: shapejit's public API ------------------------------------------

class JitImpl final : public LgImpl {
 public:
  explicit JitImpl(const LgData& data) : group_(describe(data)), outs_(*data.c) {
    const LgCase& c = *data.c;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      inputs_.push_back(LinearInput{data.part_input(c.parts[i]), c.m_of(c.parts[i]), c.k, 0});
      outputs_.push_back(LinearOutput{outs_.part(i), 0, 0, 0});
    }
  }
  void activate(int threads) override { shapejit::set_num_threads(threads); }
  void run() override { group_.run(inputs_, outputs_); }
  const float* out_row(size_t part, int64_t m) const override { return outs_.row(part, m); }

 private:
  static LinearGroupDesc describe(const LgData& data) {
    const LgCase& c = *data.c;
    std::vector<LinearPart> parts;
    for (const LgPart& p : c.parts) {
      LinearPart part;
      part.row_begin = p.row_begin;
      part.rows = p.rows;
      parts.push_back(part);
    }
    return LinearGroupDesc::packed(data.weight->data(), c.weight_rows(), c.k,
                                   std::span<const float>(data.bias->data(), size_t(c.weight_rows())),
                                   std::move(parts));
  }
  LinearGroup group_;
  LgPartOutputs outs_;
  std::vector<LinearInput> inputs_;
  std::vector<LinearOutput> outputs_;
};

std::unique_ptr<LgImpl> make_jit(const LgData& data, int) { return std::make_unique<JitImpl>(data); }
bool jit_applies(const LgCase&, int) { return true; }

// ---- The implementation table --------------------------------------------------------------

struct ImplSpec {
  const char* name;
  LgApplies applies;
  LgFactory make;
  bool per_thread_count;  ///< built separately for every thread count (plans for it)
};

const std::vector<ImplSpec>& impls() {
  static const std::vector<ImplSpec> all = {
      {"jit", jit_applies, make_jit, false},
      {"onednn", onednn_applies, make_onednn, true},
      {"openblas_3x", openblas_applies, make_openblas_3x, false},
      {"openblas_packed", openblas_packed_applies, make_openblas_packed, false},
      {"libxsmm_3x", libxsmm_applies, make_libxsmm_3x, false},
      {"xnnpack_3x", xnnpack_applies, make_xnnpack_3x, false},
  };
  return all;
}

// ---- Per-case state: data, reference rows, built implementations -----------------------------

std::mutex g_info_mutex;
std::map<std::string, std::string> g_infos;

void record_info(const std::string& key, const std::string& info) {
  if (info.empty()) return;
  std::lock_guard lock(g_info_mutex);
  g_infos[key] = info;
}

// The reference of one output row: values and the tolerance of each element.
struct RefRow {
  size_t part;
  int64_t m;
  std::vector<double> value, bound;
};

// A built implementation and how long its first (checked) call took.
struct Built {
  std::unique_ptr<LgImpl> impl;
  double first_call_seconds = 0;
};

class CaseState {
 public:
  explicit CaseState(const LgCase& c) : data_(c) { make_reference(); }

  // The implementation for (impl, threads), built and checked on first use; a build or check
  // failure is remembered and rethrown on every later use.
  Built& impl(const ImplSpec& spec, int threads) {
    const std::pair<std::string, int> key{spec.name, spec.per_thread_count ? threads : 0};
    if (auto it = errors_.find(key); it != errors_.end()) throw std::runtime_error(it->second);
    auto& slot = impls_[key];
    if (!slot.impl) {
      try {
        auto built = spec.make(data_, threads);
        if (!built) throw std::runtime_error(std::string(spec.name) + " is not built into this binary");
        built->activate(threads);
        const auto start = std::chrono::steady_clock::now();
        built->run();
        slot.first_call_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        check(spec.name, *built);
        record_info(std::string(spec.name) + "/" + data_.c->name + (spec.per_thread_count ? "/t" + std::to_string(threads) : ""),
                    built->info());
        slot.impl = std::move(built);
      } catch (const std::exception& e) {
        errors_[key] = e.what();
        impls_.erase(key);
        throw;
      }
    }
    return slot;
  }

 private:
  void make_reference() {
    const LgCase& c = *data_.c;
    for (size_t p = 0; p < c.parts.size(); ++p) {
      const LgPart& part = c.parts[p];
      const int64_t m_rows = c.m_of(part);
      std::vector<int64_t> rows = {0, m_rows / 2, m_rows - 1};
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      for (int64_t m : rows) {
        RefRow r{p, m, std::vector<double>(size_t(part.rows)), std::vector<double>(size_t(part.rows))};
        const float* x = data_.part_input(part) + m * c.k;
        for (int64_t n = 0; n < part.rows; ++n) {
          const float* w = data_.part_weight(part) + n * c.k;
          const double b = data_.part_bias(part)[n];
          double sum = 0, magnitude = std::fabs(b);
          for (int64_t k = 0; k < c.k; ++k) {
            sum += double(x[k]) * double(w[k]);
            magnitude += std::fabs(double(x[k]) * double(w[k]));
          }
          sum += b;
          // split-gemm-semantics.md: 2 K 2^-24 (sum |x w| + |b|) + one ulp of the result.
          const float f = float(sum);
          r.value[size_t(n)] = sum;
          r.bound[size_t(n)] = 2.0 * double(c.k) * std::ldexp(1.0, -24) * magnitude +
                               double(std::nextafter(std::fabs(f), INFINITY) - std::fabs(f));
        }
        refs_.push_back(std::move(r));
      }
    }
  }

  void check(const char* impl_name, const LgImpl& impl) const {
    for (const RefRow& r : refs_) {
      const float* y = impl.out_row(r.part, r.m);
      for (size_t n = 0; n < r.value.size(); ++n) {
        if (std::fabs(double(y[n]) - r.value[n]) <= r.bound[n]) continue;
        char msg[256];
        std::snprintf(msg, sizeof msg, "%s on %s: part %zu row %lld column %zu is %.9g, reference %.9g (tolerance %.3g)",
                      impl_name, data_.c->name.c_str(), r.part, static_cast<long long>(r.m), n, double(y[n]),
                      r.value[n], r.bound[n]);
        throw std::runtime_error(msg);
      }
    }
  }

  LgData data_;
  std::vector<RefRow> refs_;
  std::map<std::pair<std::string, int>, Built> impls_;
  std::map<std::pair<std::string, int>, std::string> errors_;
};

CaseState& state_for(const LgCase& c) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<CaseState>> states;
  std::lock_guard lock(mutex);
  auto& s = states[c.name];
  if (!s) s = std::make_unique<CaseState>(c);
  return *s;
}

// ---- Benchmarks ---------------------------------------------------------------------------

void run_linear_group(benchmark::State& state, const LgCase& c, const ImplSpec& spec, int threads) {
  try {
    const Built& built = state_for(c).impl(spec, threads);
    LgImpl& impl = *built.impl;
    impl.activate(threads);
    // Untimed: brings this case's data back into the caches after other benchmarks ran. Calls
    // of a second or more (the scalar fallback) gain nothing measurable from it.
    if (built.first_call_seconds < 0.5) impl.run();
    for (auto _ : state) {
      impl.run();
      benchmark::ClobberMemory();
    }
    state.counters["flops"] = c.flops();
    state.counters["peak_flops"] = measured_fma_peak(threads);
    if (is_decode(c)) {
      state.counters["bytes"] = c.weight_bytes();
      state.counters["read_bw"] = measured_read_bandwidth(threads);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void run_fma_peak(benchmark::State& state, FmaWidth width, int threads) {
  if (!fma_peak_supported(width)) {
    state.SkipWithError("the host lacks the ISA of this FMA loop");
    return;
  }
  constexpr int64_t kIterations = 1 << 20;  // ~1.5 ms per thread at the zmm peak
  float sink = fma_peak_parallel(width, kIterations, threads);
  for (auto _ : state) {
    sink += fma_peak_parallel(width, kIterations, threads);
    benchmark::DoNotOptimize(sink);
  }
  state.counters["flops"] = threads * fma_peak_flops(width, kIterations);
  state.counters["peak_flops"] = measured_fma_peak(threads);
}

void run_read_peak(benchmark::State& state, int threads) {
  const ReadBuffer buffer;  // 256 MiB, touched before timing
  float sink = 0;
  for (auto _ : state) {
    sink += buffer.read_all(threads);
    benchmark::DoNotOptimize(sink);
  }
  state.counters["bytes"] = double(buffer.bytes());
  state.counters["read_bw"] = measured_read_bandwidth(threads);
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

void finish(benchmark::internal::Benchmark* b) {
  b->ComputeStatistics("min", min_of)->Unit(benchmark::kMicrosecond);
}

bool register_all() {
  for (int threads : {1, 2}) {
    const std::string t = "/t" + std::to_string(threads);
    finish(benchmark::RegisterBenchmark(("linear_group/fma_peak/zmm" + t).c_str(), [threads](benchmark::State& s) {
      run_fma_peak(s, FmaWidth::kZmm, threads);
    }));
    if (threads == 1)
      finish(benchmark::RegisterBenchmark("linear_group/fma_peak/ymm/t1",
                                          [](benchmark::State& s) { run_fma_peak(s, FmaWidth::kYmm, 1); }));
    finish(benchmark::RegisterBenchmark(("linear_group/read_peak/dram" + t).c_str(),
                                        [threads](benchmark::State& s) { run_read_peak(s, threads); }));
  }
  for (int threads : {1, 2})
    for (const LgCase& c : cases())
      for (const ImplSpec& spec : impls()) {
        if (!spec.applies(c, threads)) continue;
        const std::string name = std::string("linear_group/") + spec.name + "/" + c.name + "/t" + std::to_string(threads);
        finish(benchmark::RegisterBenchmark(name.c_str(), [&c, &spec, threads](benchmark::State& s) {
          run_linear_group(s, c, spec, threads);
        }));
      }
  return true;
}

[[maybe_unused]] const bool kRegistered = register_all();

}  // namespace

std::map<std::string, std::string> lg_impl_infos() {
  std::lock_guard lock(g_info_mutex);
  return g_infos;
}

}  // namespace shapejit::bench
