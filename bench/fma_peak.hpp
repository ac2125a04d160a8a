// Physical limits for the linear-group benchmarks: the FP32 FMA peak of a core (independent
// vfmadd231ps chains, zmm and ymm) and the streaming read bandwidth from DRAM.
//
// fma_peak.cpp compiles only its SIMD functions for AVX-512 or AVX2 (target attributes) and
// checks the host before calling them, so nothing here is ever compiled for a wider ISA than
// the rest of the binary.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shapejit::bench {

/// Vector width of an FMA-peak loop.
enum class FmaWidth : int { kZmm = 512, kYmm = 256 };

/// True when the host can run the loop of this width (AVX-512F / AVX2 + FMA).
bool fma_peak_supported(FmaWidth width);

/// Runs `iterations` rounds of kFmaPeakChains independent FMAs on one thread; returns a value
/// derived from every accumulator (so the work cannot be dropped). Flops done:
/// fma_peak_flops(width, iterations).
float fma_peak_loop(FmaWidth width, int64_t iterations);

/// fma_peak_loop on `threads` threads at once (the caller is one of them), each doing
/// `iterations` rounds; flops done: threads * fma_peak_flops(width, iterations).
float fma_peak_parallel(FmaWidth width, int64_t iterations, int threads);

/// Independent accumulator chains of the loop (more than FMA latency x FMA pipes).
inline constexpr int kFmaPeakChains = 12;

/// Flops of fma_peak_loop(width, iterations).
double fma_peak_flops(FmaWidth width, int64_t iterations);

/// FP32 FMA peak in flop/s of `threads` threads running the widest supported loop at once,
/// best of a few short runs; measured on the first call for each thread count, then cached.
double measured_fma_peak(int threads);

/// Streaming read bandwidth in bytes/s of `threads` threads summing disjoint parts of a 256 MiB
/// buffer (8x the L3; each part read as four streams side by side), best of a few passes;
/// measured once per thread count, cached.
double measured_read_bandwidth(int threads);

/// A 256 MiB buffer (8x the L3) that read_all() streams through once, summing every float.
class ReadBuffer {
 public:
  ReadBuffer();
  ~ReadBuffer();
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  /// One pass over the whole buffer, split in `threads` contiguous parts read at once (the
  /// caller reads the first).
  float read_all(int threads = 1) const;
  size_t bytes() const { return kBytes; }
  const float* data() const { return data_; }

 private:
  static constexpr size_t kBytes = size_t(256) << 20;
  float* data_ = nullptr;
};

}  // namespace shapejit::bench
