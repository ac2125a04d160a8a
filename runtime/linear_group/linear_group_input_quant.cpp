// Rows are independent, so large inputs are cut into row ranges run on the engine arena; which
// thread quantizes a row never changes its bits.
#include "runtime/linear_group/linear_group_input_quant.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "jit/host_features.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 16;  // inputs smaller than this: one thread
constexpr int64_t kRowsPerTask = 32;

// Per calling thread, reused across runs.
struct InputQuantScratch {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> zeros;
  std::vector<QuantizedInput> parts;
  std::vector<int64_t> first;  // per part: the index of the first part with the same input
  std::vector<std::pair<int64_t, int64_t>> at;  // per first part: its code and row offsets
};
thread_local InputQuantScratch t_input_scratch;

using Io = shapejit_linear_group_io;

bool same_input(const Io& a, const Io& b) { return a.x == b.x && a.m == b.m && a.k == b.k && a.ldx == b.ldx; }

// The message for part p's first bad row.
[[noreturn]] void report_bad_row(const Io& io, int64_t p, int64_t row) {
  const float* x = io.x + row * io.ldx;
  for (int64_t c = 0; c < io.k; ++c)
    if (!std::isfinite(x[c]))
      throw Error(Status::kInvalidArgument,
                  "linear_group: io[" + std::to_string(p) + "].x row " + std::to_string(row) + " holds " +
                      (std::isnan(x[c]) ? std::string("NaN") : std::string(x[c] > 0 ? "+inf" : "-inf")) +
                      " at column " + std::to_string(c) +
                      " (a qd8 form quantizes each input row from finite values)");
  throw Error(Status::kInvalidArgument,
              "linear_group: io[" + std::to_string(p) + "].x row " + std::to_string(row) +
                  ": its max - min overflows float32 (a qd8 form's row range must be finite)");
}

bool quantize_row(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero, uint8_t flip);

// Quantizes rows [r0, r1) of one input (`signed_codes`: q, the biased codes' top bit flipped);
// returns the first bad row, or r1.
int64_t quantize_rows(const Io& io, int64_t r0, int64_t r1, uint8_t* u, int64_t ldu, float* scale, int32_t* zero,
                      bool signed_codes) {
  const uint8_t flip = signed_codes ? 0x80 : 0;
  for (int64_t r = r0; r < r1; ++r)
    if (!quantize_row(io.x + r * io.ldx, io.k, u + r * ldu, scale + r, zero + r, flip)) return r;
  return r1;
}

// All rows of one input, on the engine arena when it is large; the first bad row, or m.
int64_t quantize_input(const Io& io, uint8_t* u, int64_t ldu, float* scale, int32_t* zero, bool signed_codes) {
  const int64_t tasks = (io.m + kRowsPerTask - 1) / kRowsPerTask;
  if (io.m * io.k < kParallelElements || engine_threads() <= 1 || tasks <= 1)
    return quantize_rows(io, 0, io.m, u, ldu, scale, zero, signed_codes);
  std::atomic<int64_t> first_bad{io.m};
  EngineTasks run(static_cast<size_t>(tasks));
  run.run([&](size_t t) {
    const int64_t r0 = int64_t(t) * kRowsPerTask, r1 = std::min(io.m, r0 + kRowsPerTask);
    const int64_t bad = quantize_rows(io, r0, r1, u, ldu, scale, zero, signed_codes);
    if (bad == r1) return;
    int64_t seen = first_bad.load(std::memory_order_relaxed);
    while (bad < seen && !first_bad.compare_exchange_weak(seen, bad, std::memory_order_relaxed)) {
    }
  });
  return first_bad.load(std::memory_order_relaxed);
}

}  // namespace

namespace {

// The row's quantization parameters from lo <= 0 <= hi; false when the range overflows.
bool row_params(float lo, float hi, float& s, float& z) {
  const float range = hi - lo;
  if (!std::isfinite(range)) return false;
  s = range / 255.0f;
  if (s == 0.0f) s = 1.0f;  // a row of zeros, or a range below 255 * 2^-150
  // nearbyint: half to even in the default rounding mode (which the library never changes).
  z = std::clamp(std::nearbyint(-128.0f - lo / s), -128.0f, 127.0f);
  return true;
}

uint8_t code(float x, float s, float z) { return uint8_t(int(std::clamp(std::nearbyint(x / s) + z, -128.0f, 127.0f)) + 128); }

// `flip` (0, or 0x80 for signed codes q) is xor'ed into every code, never into the padding.
bool quantize_row_scalar(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero, uint8_t flip) {
  float lo = 0.0f, hi = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < k; ++i) {
    finite &= std::isfinite(x[i]);
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  float s, z;
  if (!finite || !row_params(lo, hi, s, z)) return false;
  for (int64_t i = 0; i < k; ++i) u[i] = code(x[i], s, z) ^ flip;
  std::memset(u + k, 0, size_t(quantized_row_bytes(k) - k));
  *scale = s;
  *zero = int32_t(z) + 128;
  return true;
}

#if defined(__x86_64__)
// The same rule eight lanes at a time: vdivps and vroundps (nearest even) give the scalar
// division's and nearbyint's bits, and min/max of finite values are exact, so the codes are
// those of quantize_row_scalar (tests/linear_group_quant_test.cpp holds both to the reference).
__attribute__((target("avx2"))) bool quantize_row_avx2(const float* x, int64_t k, uint8_t* u, float* scale,
                                                        int32_t* zero, uint8_t flip) {
  const int64_t k8 = k / 8 * 8;
  __m256 lo8 = _mm256_setzero_ps(), hi8 = _mm256_setzero_ps(), bad8 = _mm256_setzero_ps();
  for (int64_t i = 0; i < k8; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    bad8 = _mm256_or_ps(bad8, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
    lo8 = _mm256_min_ps(v, lo8);
    hi8 = _mm256_max_ps(v, hi8);
  }
  // Lanes folded in registers (min and max of finite values are exact in any order; a signed
  // zero's sign never reaches the parameters: lo and hi only enter as hi - lo and lo / s).
  __m128 lo4 = _mm_min_ps(_mm256_castps256_ps128(lo8), _mm256_extractf128_ps(lo8, 1));
  __m128 hi4 = _mm_max_ps(_mm256_castps256_ps128(hi8), _mm256_extractf128_ps(hi8, 1));
  lo4 = _mm_min_ps(lo4, _mm_movehl_ps(lo4, lo4));
  hi4 = _mm_max_ps(hi4, _mm_movehl_ps(hi4, hi4));
  lo4 = _mm_min_ss(lo4, _mm_movehdup_ps(lo4));
  hi4 = _mm_max_ss(hi4, _mm_movehdup_ps(hi4));
  float lo = _mm_cvtss_f32(lo4), hi = _mm_cvtss_f32(hi4);
  bool finite = _mm256_movemask_ps(bad8) == 0;
  for (int64_t i = k8; i < k; ++i) {
    finite &= std::isfinite(x[i]);
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  float s, z;
  if (!finite || !row_params(lo, hi, s, z)) return false;
  const __m256 s8 = _mm256_set1_ps(s), z8 = _mm256_set1_ps(z);
  const __m256 qmin = _mm256_set1_ps(-128.0f), qmax = _mm256_set1_ps(127.0f), bias = _mm256_set1_ps(128.0f);
  const __m128i flip16 = _mm_set1_epi8(char(flip));
  for (int64_t i = 0; i < k8; i += 8) {
    const __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 c = _mm256_add_ps(_mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, z8), qmin), qmax), bias);
    const __m256i c32 = _mm256_cvtps_epi32(c);
    const __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(c32), _mm256_extracti128_si256(c32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(u + i), _mm_xor_si128(_mm_packus_epi16(c16, c16), flip16));
  }
  if (k8 < k) {  // the last 8 bytes: codes, then the zero padding up to quantized_row_bytes(k)
    std::memset(u + k8, 0, 8);
    for (int64_t i = k8; i < k; ++i) u[i] = code(x[i], s, z) ^ flip;
  }
  *scale = s;
  *zero = int32_t(z) + 128;
  return true;
}

const bool kRowsOnAvx2 = jit::host_runs(jit::Isa::kAvx2);  // CPU and OS (ymm state)
#endif

}  // namespace

namespace {

bool quantize_row(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero, uint8_t flip) {
#if defined(__x86_64__)
  if (kRowsOnAvx2) return quantize_row_avx2(x, k, u, scale, zero, flip);
#endif
  return quantize_row_scalar(x, k, u, scale, zero, flip);
}

}  // namespace

bool quantize_input_row(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero) {
  return quantize_row(x, k, u, scale, zero, 0);
}

std::span<const QuantizedInput> quantize_run_inputs(std::span<const Io> io, bool signed_codes) {
  InputQuantScratch& s = t_input_scratch;
  const size_t n = io.size();
  s.parts.assign(n, QuantizedInput{});
  s.first.assign(n, -1);
  // Place each distinct input's rows: offsets in the three buffers, as element counts.
  std::vector<int64_t>& first = s.first;
  int64_t code_bytes = 0, rows = 0;
  std::vector<std::pair<int64_t, int64_t>>& at = s.at;
  at.assign(n, {0, 0});
  for (size_t p = 0; p < n; ++p) {
    if (io[p].m == 0) continue;
    for (size_t q = 0; q < p && first[p] < 0; ++q)
      if (first[q] == int64_t(q) && same_input(io[q], io[p])) first[p] = int64_t(q);
    if (first[p] >= 0) continue;
    first[p] = int64_t(p);
    at[p] = {code_bytes, rows};
    code_bytes += io[p].m * quantized_row_bytes(io[p].k);
    rows += io[p].m;
  }
  if (s.codes.size() < size_t(code_bytes)) s.codes.resize(size_t(code_bytes));
  if (s.scales.size() < size_t(rows)) s.scales.resize(size_t(rows)), s.zeros.resize(size_t(rows));
  for (size_t p = 0; p < n; ++p) {
    if (first[p] != int64_t(p)) continue;
    QuantizedInput& qi = s.parts[p];
    qi.u = s.codes.data() + at[p].first;
    qi.ldu = quantized_row_bytes(io[p].k);
    qi.signed_codes = signed_codes;
    qi.scale = s.scales.data() + at[p].second;
    qi.zero = s.zeros.data() + at[p].second;
    const int64_t bad = quantize_input(io[p], s.codes.data() + at[p].first, qi.ldu, s.scales.data() + at[p].second,
                                       s.zeros.data() + at[p].second, signed_codes);
    if (bad < io[p].m) report_bad_row(io[p], int64_t(p), bad);
  }
  for (size_t p = 0; p < n; ++p)
    if (first[p] >= 0 && first[p] != int64_t(p)) s.parts[p] = s.parts[size_t(first[p])];
  return s.parts;
}

}  // namespace shapejit::rt
