// The FP32 FMA peak and the DRAM read bandwidth that the linear-group rows are compared with.
//
// The FMA loop keeps kFmaPeakChains independent accumulators, each updated by one vfmadd231ps
// per round: with 4-cycle FMA latency and two FMA pipes, 8 chains in flight saturate the core,
// 12 leave a margin. Only the functions that use AVX-512 or AVX2 intrinsics are compiled for
// those ISAs (target attributes), and callers check the host first, so the file is safe to link
// into a binary that runs anywhere.
#include "fma_peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "jit/host_features.hpp"

namespace shapejit::bench {
namespace {

#if defined(__x86_64__)

// Through memory rather than _mm512_reduce_add_ps, which trips g++ 12's -Wuninitialized.
[[gnu::target("avx512f")]] float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

[[gnu::target("avx512f,fma")]] float fma_loop_zmm(int64_t iterations) {
  __m512 acc[kFmaPeakChains];
  for (int j = 0; j < kFmaPeakChains; ++j) acc[j] = _mm512_set1_ps(float(j));
  // acc = acc * a + b converges to b / (1 - a) = 1: no overflow, no denormals.
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kFmaPeakChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kFmaPeakChains; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return lane_sum(acc[0]);
}

[[gnu::target("avx2,fma")]] float fma_loop_ymm(int64_t iterations) {
  __m256 acc[kFmaPeakChains];
  for (int j = 0; j < kFmaPeakChains; ++j) acc[j] = _mm256_set1_ps(float(j));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kFmaPeakChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kFmaPeakChains; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

// Sums n floats (n a multiple of 128) with 8 independent accumulators, reading the four quarters
// side by side: one sequential stream stops short of what the memory gives one core (12-14 GB/s
// against 17-19 with 2-8 streams on a Zen 1 host), and the limit is the best a reader can do.
[[gnu::target("avx512f")]] float read_sum_zmm(const float* p, size_t n) {
  __m512 acc[8];
  for (auto& v : acc) v = _mm512_setzero_ps();
  const size_t q = n / 4;
  for (size_t i = 0; i < q; i += 32) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(p + (j / 2) * q + i + 16 * (j % 2)));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return lane_sum(acc[0]);
}

[[gnu::target("avx2")]] float read_sum_ymm(const float* p, size_t n) {
  __m256 acc[8];
  for (auto& v : acc) v = _mm256_setzero_ps();
  const size_t q = n / 4;
  for (size_t i = 0; i < q; i += 16) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(p + (j / 2) * q + i + 8 * (j % 2)));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

#endif  // __x86_64__

float read_sum(const float* p, size_t n) {
#if defined(__x86_64__)
  if (jit::host_runs(jit::Isa::kAvx512)) return read_sum_zmm(p, n);
  if (jit::host_runs(jit::Isa::kAvx2)) return read_sum_ymm(p, n);
#endif
  float s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// Runs body(t) on `threads` threads at once (the caller is thread 0); returns the wall seconds
// from the common start to the last finish.
template <class Body>
double timed_parallel(int threads, Body body) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back([&body, t] { body(t); });
  body(0);
  for (std::thread& th : others) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

volatile float g_sink;  // results land here so no loop is optimised away

}  // namespace

#if defined(__x86_64__)
bool fma_peak_supported(FmaWidth width) {
  // The engine's rule (jit/host_features.hpp): the peak is measured where its kernels would run.
  return jit::host_runs(width == FmaWidth::kZmm ? jit::Isa::kAvx512 : jit::Isa::kAvx2);
}

float fma_peak_loop(FmaWidth width, int64_t iterations) {
  return width == FmaWidth::kZmm ? fma_loop_zmm(iterations) : fma_loop_ymm(iterations);
}
#else
bool fma_peak_supported(FmaWidth) { return false; }
float fma_peak_loop(FmaWidth, int64_t) { return 0.0f; }
#endif

float fma_peak_parallel(FmaWidth width, int64_t iterations, int threads) {
  std::vector<float> sums(static_cast<size_t>(threads));
  timed_parallel(threads, [&](int t) { sums[size_t(t)] = fma_peak_loop(width, iterations); });
  float s = 0;
  for (float v : sums) s += v;
  return s;
}

double fma_peak_flops(FmaWidth width, int64_t iterations) {
  const int lanes = width == FmaWidth::kZmm ? 16 : 8;
  return 2.0 * lanes * kFmaPeakChains * double(iterations);
}

double measured_fma_peak(int threads) {
  static std::mutex mutex;
  static std::map<int, double> cache;
  std::lock_guard lock(mutex);
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  const FmaWidth width = fma_peak_supported(FmaWidth::kZmm) ? FmaWidth::kZmm : FmaWidth::kYmm;
  if (!fma_peak_supported(width)) return cache[threads] = 0.0;
  constexpr int64_t kIterations = 1 << 20;  // ~2 ms per thread at 200 GFLOP/s
  double best = 0;
  for (int round = 0; round < 9; ++round) {
    const double s = timed_parallel(threads, [&](int) { g_sink = fma_peak_loop(width, kIterations); });
    best = std::max(best, threads * fma_peak_flops(width, kIterations) / s);
  }
  return cache[threads] = best;
}

ReadBuffer::ReadBuffer() : data_(static_cast<float*>(std::aligned_alloc(64, kBytes))) {
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, kBytes);  // every page exists before anything is timed
}

ReadBuffer::~ReadBuffer() { std::free(data_); }

float ReadBuffer::read_all(int threads) const {
  const size_t per_thread = kBytes / sizeof(float) / size_t(threads) / 128 * 128;
  std::vector<float> sums(static_cast<size_t>(threads));
  timed_parallel(threads, [&](int t) { sums[size_t(t)] = read_sum(data_ + size_t(t) * per_thread, per_thread); });
  float s = 0;
  for (float v : sums) s += v;
  return s;
}

double measured_read_bandwidth(int threads) {
  static std::mutex mutex;
  static std::map<int, double> cache;
  std::lock_guard lock(mutex);
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  const ReadBuffer buffer;
  const size_t n = buffer.bytes() / sizeof(float), per_thread = n / size_t(threads) / 128 * 128;
  const float* data = buffer.data();
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const double s = timed_parallel(threads, [&](int t) { g_sink = read_sum(data + size_t(t) * per_thread, per_thread); });
    best = std::max(best, double(per_thread) * sizeof(float) * threads / s);
  }
  return cache[threads] = best;
}

}  // namespace shapejit::bench
