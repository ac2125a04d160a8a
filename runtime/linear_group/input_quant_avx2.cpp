// Why the reciprocal gives the division's codes. Let Q = x / s exactly, d = fl(x / s) the rule's
// quotient, r = fl(1 / s) and y = fl(x * r). For a normal s in [2^-125, 2^121] (s <= FLT_MAX /
// 255 < 2^121 always holds), 1 / s is normal, so r = (1 / s)(1 + e1) and y = Q (1 + e1)(1 + e2),
// |e1|, |e2| <= 2^-24 (plus at most 2^-150 absolute where y is subnormal), and d = Q (1 + e3).
// Every |x| <= max(-lo, hi) <= hi - lo, and s is (hi - lo) / 255 rounded, so |Q| < 255.001 and
//     |y - d| <= 255.001 * (3 * 2^-24 + 2^-48) + 2^-149 < 2^-14.
// The codes only need rne(d). With t = rne(y): when |y - t| < 0.5 - 2^-13, no half-integer lies
// within 2^-13 of y, so d is strictly inside the same interval (t - 1/2, t + 1/2) and rne(d) = t.
// y - t is computed exactly (both are within 1/2 of each other and below 2^9 in magnitude). Any
// vector with a lane at 0.5 - 2^-13 or beyond (about 1 lane in 4000 for spread-out inputs; more
// for inputs that sit on half steps) is coded again with the division, as are the rows whose s
// is below 2^-125. The scale, the zero point and 1 / s are vdivps: the scalar rule's bits.
//
// The rest of the rule in integers: t and z are integers below 2^9, so t + z + 128 is exact in
// int32, and the saturating packs (int32 -> int16 -> u8) clamp it to [0, 255] as the rule's
// clamp(t + z, -128, 127) + 128 does. tests/linear_group_quant_test.cpp holds this to the
// scalar reference, with rows built on and next to half steps.
#include "runtime/linear_group/input_quant_avx2.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>

namespace shapejit::rt {
namespace {

#define SJ_AVX2 __attribute__((target("avx2,fma")))

// The rows of a block are read twice (range, then codes): a block stays within half of L1.
constexpr int64_t kBlockBytes = int64_t(16) << 10;
constexpr int kBlockRows = 8;  // one vector of per-row parameters
constexpr float kMinRecipScale = 0x1p-125f;
constexpr float kAmbiguous = 0.5f - 0x1p-13f;  // |y - rne(y)| from here on: decided by division

alignas(32) constexpr int32_t kLaneMasks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
alignas(16) constexpr uint8_t kByteMasks[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0};

// The first n (1..8) lanes set.
SJ_AVX2 __m256i lane_mask(int64_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMasks + 8 - n));
}

// The row's lanes of min(0, x) and max(0, x) (exact, in any order, for finite values; a signed
// zero's sign never reaches the parameters: lo and hi only enter as hi - lo and lo / s); NaNs
// set lanes of `nan`, infinities show as an overflowing range. The tail is a masked load, so
// nothing past x[k - 1] is read (its lanes read as 0, which the range already holds).
SJ_AVX2 void row_range(const float* x, int64_t k, __m256& lo, __m256& hi, __m256& nan) {
  __m256 lo8 = _mm256_setzero_ps(), hi8 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    lo8 = _mm256_min_ps(lo8, v);
    hi8 = _mm256_max_ps(hi8, v);
  }
  if (i < k) {
    const __m256 v = _mm256_maskload_ps(x + i, lane_mask(k - i));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    lo8 = _mm256_min_ps(lo8, v);
    hi8 = _mm256_max_ps(hi8, v);
  }
  lo = lo8, hi = hi8;
}

// Lane i of the result: op over the 8 lanes of v[i] (a transposing reduction: 7 shuffles and 7
// ops for 8 rows, where one row at a time takes 6 and 3 per row, and leaves the rows' values in
// one vector, as the parameters are computed).
template <class Op>
SJ_AVX2 __m256 reduce_rows(const __m256 (&v)[8], Op op) {
  __m256 a[4];
  for (int j = 0; j < 4; ++j)
    a[j] = op(_mm256_unpacklo_ps(v[2 * j], v[2 * j + 1]), _mm256_unpackhi_ps(v[2 * j], v[2 * j + 1]));
  __m256 b[2];
  for (int j = 0; j < 2; ++j) {
    const __m256d lo = _mm256_castps_pd(a[2 * j]), hi = _mm256_castps_pd(a[2 * j + 1]);
    b[j] = op(_mm256_castpd_ps(_mm256_unpacklo_pd(lo, hi)), _mm256_castpd_ps(_mm256_unpackhi_pd(lo, hi)));
  }
  return op(_mm256_permute2f128_ps(b[0], b[1], 0x20), _mm256_permute2f128_ps(b[0], b[1], 0x31));
}

SJ_AVX2 __m256 min8(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }
SJ_AVX2 __m256 max8(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }

// The first row of [0, n) holding a NaN (rare: the run fails).
int64_t first_nan_row(const float* x, int64_t ldx, int64_t k, int64_t n) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i)
      if (x[r * ldx + i] != x[r * ldx + i]) return r;
  return n;
}

// 8 codes from the rounded quotients t: t + (z + 128), saturated to [0, 255], xor flip, and
// `keep` (0xFF per code, 0 for the padding lanes of the tail).
SJ_AVX2 void store_codes(uint8_t* u, __m256 t, __m256i zb, __m128i flip, __m128i keep) {
  const __m256i c = _mm256_add_epi32(_mm256_cvtps_epi32(t), zb);  // t is integral: exact
  const __m128i c16 = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  const __m128i c8 = _mm_packus_epi16(c16, c16);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(u), _mm_and_si128(_mm_xor_si128(c8, flip), keep));
}

// The codes of 8 values v (see store_codes); returns the lanes whose quotient came too close to
// a half step to trust (kRecip only).
template <bool kRecip>
SJ_AVX2 __m256 code_vector(__m256 v, __m256 s8, __m256 r8, __m256i zb, __m128i flip, __m128i keep, uint8_t* out) {
  const __m256 y = kRecip ? _mm256_mul_ps(v, r8) : _mm256_div_ps(v, s8);
  const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  store_codes(out, t, zb, flip, keep);
  if (!kRecip) return _mm256_setzero_ps();
  const __m256 off = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(y, t));  // |y - t|, exact
  return _mm256_cmp_ps(off, _mm256_set1_ps(kAmbiguous), _CMP_GE_OQ);
}

// The codes of 16 values v0, v1 (as two code_vector calls, with one pack sequence for both).
template <bool kRecip>
SJ_AVX2 __m256 code_pair(__m256 v0, __m256 v1, __m256 s8, __m256 r8, __m256i zb, __m128i flip, uint8_t* out) {
  const __m256 y0 = kRecip ? _mm256_mul_ps(v0, r8) : _mm256_div_ps(v0, s8);
  const __m256 y1 = kRecip ? _mm256_mul_ps(v1, r8) : _mm256_div_ps(v1, s8);
  const __m256 t0 = _mm256_round_ps(y0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 t1 = _mm256_round_ps(y1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i c0 = _mm256_add_epi32(_mm256_cvtps_epi32(t0), zb), c1 = _mm256_add_epi32(_mm256_cvtps_epi32(t1), zb);
  // Per 128-bit lane: packs gives c0[0..3] c1[0..3] (low lane), c0[4..7] c1[4..7] (high lane) as
  // words, packus those as bytes in each lane's low 8; the dword interleave puts them in order.
  const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_setzero_si256());
  const __m128i ordered = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_xor_si128(ordered, flip));
  if (!kRecip) return _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f), limit = _mm256_set1_ps(kAmbiguous);
  const __m256 off0 = _mm256_andnot_ps(sign, _mm256_sub_ps(y0, t0));
  const __m256 off1 = _mm256_andnot_ps(sign, _mm256_sub_ps(y1, t1));
  return _mm256_cmp_ps(_mm256_max_ps(off0, off1), limit, _CMP_GE_OQ);
}

// One row's codes and padding. kRecip: y = x * r, and false when a lane was too close to a half
// step to trust (the caller codes the row again with the division); else y = x / s.
template <bool kRecip>
SJ_AVX2 bool code_row(const float* x, int64_t k, uint8_t* u, float s, float r, int32_t zb, uint8_t flip) {
  const __m256 s8 = _mm256_set1_ps(s), r8 = _mm256_set1_ps(r);
  const __m256i zb8 = _mm256_set1_epi32(zb);
  const __m128i flip16 = _mm_set1_epi8(char(flip)), all = _mm_set1_epi8(char(0xFF));
  __m256 ambiguous = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    ambiguous = _mm256_or_ps(ambiguous, code_pair<kRecip>(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8), s8, r8,
                                                          zb8, flip16, u + i));
  for (; i + 8 <= k; i += 8)
    ambiguous = _mm256_or_ps(ambiguous, code_vector<kRecip>(_mm256_loadu_ps(x + i), s8, r8, zb8, flip16, all, u + i));
  if (i < k) {
    const __m128i keep = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(kByteMasks + 8 - (k - i)));
    ambiguous = _mm256_or_ps(ambiguous, code_vector<kRecip>(_mm256_maskload_ps(x + i, lane_mask(k - i)), s8, r8, zb8,
                                                            flip16, keep, u + i));
  }
  return _mm256_movemask_ps(ambiguous) == 0;
}

// kK > 0: the rows' width as a constant, for the small rows of tiny calls, where the loops' own
// bookkeeping is much of the work and the compiler then unrolls them (tiny_cross_e16's 12 rows of
// 16: 0.235 -> 0.211 us); 0: any width.
template <int64_t kK>
SJ_AVX2 int64_t quantize_rows_k(const float* x, int64_t ldx, int64_t k_any, int64_t rows, uint8_t* u, int64_t ldu,
                                float* scale, int32_t* zero, uint8_t flip) {
  const int64_t k = kK > 0 ? kK : k_any;
  // (k * 4 * 8 <= kBlockBytes, not a division: an idiv costs as much as a small row.)
  const int64_t block = k * 4 * kBlockRows <= kBlockBytes ? kBlockRows : std::max<int64_t>(1, kBlockBytes / (k * 4));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    __m256 lo_of[kBlockRows], hi_of[kBlockRows], nan = _mm256_setzero_ps();
    for (int64_t i = 0; i < kBlockRows; ++i) {
      lo_of[i] = hi_of[i] = _mm256_setzero_ps();  // rows past n: zeros, harmless (s = 1)
      if (i < n) row_range(x + (r0 + i) * ldx, k, lo_of[i], hi_of[i], nan);
    }
    const __m256 lo8 = reduce_rows(lo_of, min8), range = _mm256_sub_ps(reduce_rows(hi_of, max8), lo8);
    // Rows whose range overflows (lanes past n hold 0), or that hold a NaN: the first of either.
    const int over = _mm256_movemask_ps(_mm256_cmp_ps(range, _mm256_set1_ps(__builtin_inff()), _CMP_EQ_OQ));
    if (over || _mm256_movemask_ps(nan)) {
      int64_t bad = _mm256_movemask_ps(nan) ? first_nan_row(x + r0 * ldx, ldx, k, n) : n;
      if (over) bad = std::min<int64_t>(bad, __builtin_ctz(unsigned(over)));
      return r0 + bad;
    }
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 s = _mm256_div_ps(range, _mm256_set1_ps(255.0f));
    s = _mm256_blendv_ps(s, one, _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ));  // range below 255 * 2^-150
    __m256 z = _mm256_round_ps(_mm256_sub_ps(_mm256_set1_ps(-128.0f), _mm256_div_ps(lo8, s)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    z = _mm256_min_ps(_mm256_max_ps(z, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
    alignas(32) float s_of[kBlockRows], r_of[kBlockRows];
    alignas(32) int32_t zb_of[kBlockRows];
    _mm256_store_ps(s_of, s);
    _mm256_store_ps(r_of, _mm256_div_ps(one, s));
    const __m256i zb = _mm256_add_epi32(_mm256_cvtps_epi32(z), _mm256_set1_epi32(128));
    _mm256_store_si256(reinterpret_cast<__m256i*>(zb_of), zb);
    const int recip = _mm256_movemask_ps(_mm256_cmp_ps(s, _mm256_set1_ps(kMinRecipScale), _CMP_GE_OQ));
    for (int64_t i = 0; i < n; ++i) {
      const float* xr = x + (r0 + i) * ldx;
      uint8_t* ur = u + (r0 + i) * ldu;
      if (!(recip >> i & 1) || !code_row<true>(xr, k, ur, s_of[i], r_of[i], zb_of[i], flip))
        code_row<false>(xr, k, ur, s_of[i], r_of[i], zb_of[i], flip);
      scale[r0 + i] = s_of[i];
      zero[r0 + i] = zb_of[i];
    }
  }
  return rows;
}

}  // namespace

SJ_AVX2 int64_t quantize_rows_avx2(const float* x, int64_t ldx, int64_t k, int64_t rows, uint8_t* u, int64_t ldu,
                                   float* scale, int32_t* zero, uint8_t flip) {
  switch (k) {
    case 16: return quantize_rows_k<16>(x, ldx, k, rows, u, ldu, scale, zero, flip);
    case 32: return quantize_rows_k<32>(x, ldx, k, rows, u, ldu, scale, zero, flip);
    default: return quantize_rows_k<0>(x, ldx, k, rows, u, ldu, scale, zero, flip);
  }
}

}  // namespace shapejit::rt
#endif
