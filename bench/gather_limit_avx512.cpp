// The AVX-512 limit loop: the simplest loop that gathers rows into zmm accumulators, with
// software prefetch. Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (this file only,
// see bench/CMakeLists.txt). It deliberately uses no standard-library templates or inline
// functions from shared headers, so no AVX-512 copy of a shared inline function can leak into
// the rest of the binary through the linker's choice among duplicate definitions.
#include "gather_limit.hpp"
#include "gather_limit_dispatch.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shapejit::bench {

#if defined(__x86_64__)
namespace {

// One bag range at compile-time width kDim: kDim / 16 accumulators live in zmm registers for
// the whole bag; every gathered row is kDim / 16 loads folded into the arithmetic, and the row
// `prefetch_distance` positions ahead gets kLines prefetches (unrolled: with a run-time count
// GCC 12 dropped the prefetches from this loop altogether).
template <int kDim, LimitOp kOp, int kLines>
void gather_bags(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  constexpr int kVecs = kDim / 16;
  const int64_t last = a.num_indices - 1;
  // A bag starts where the one before it ended (carried, as the kernels do: offsets[b] loaded
  // after the previous bag's stores headed each bag's address chain, and short bags ran 25 %
  // below FBGEMM's kernel).
  int64_t next_begin = bag_begin < bag_end ? a.offsets[bag_begin] : 0;
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    const int64_t begin = next_begin;
    const int64_t end = b + 1 < a.num_offsets ? a.offsets[b + 1] : a.num_indices;
    next_begin = end;
    __m512 acc[kVecs];
    // Every loop over v (and over cache lines) is unrolled so acc[] lives in registers.
#pragma GCC unroll 32
    for (int v = 0; v < kVecs; ++v)
      acc[v] = kOp == LimitOp::kMax ? _mm512_set1_ps(-__builtin_inff()) : _mm512_setzero_ps();
    for (int64_t i = begin; i < end; ++i) {
      // The prefetch follows the global index stream, so it runs ahead across bag boundaries.
      const int64_t ahead = i + a.prefetch_distance < last ? i + a.prefetch_distance : last;
      const char* next = reinterpret_cast<const char*>(a.table + a.indices[ahead] * a.row_stride);
#pragma GCC unroll 32
      for (int l = 0; l < kLines; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
      const float* row = a.table + a.indices[i] * a.row_stride;
      if constexpr (kOp == LimitOp::kWeightedSum) {
        const __m512 w = _mm512_set1_ps(a.per_sample_weights[i]);
#pragma GCC unroll 32
        for (int v = 0; v < kVecs; ++v)
          acc[v] = _mm512_fmadd_ps(w, _mm512_loadu_ps(row + 16 * v), acc[v]);
      } else if constexpr (kOp == LimitOp::kMax) {
        // The masked form with a full mask is the same vmaxps; the unmasked intrinsic trips a
        // false -Wmaybe-uninitialized in GCC 12's header.
#pragma GCC unroll 32
        for (int v = 0; v < kVecs; ++v)
          acc[v] = _mm512_mask_max_ps(acc[v], 0xFFFF, acc[v], _mm512_loadu_ps(row + 16 * v));
      } else {
#pragma GCC unroll 32
        for (int v = 0; v < kVecs; ++v)
          acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(row + 16 * v));
      }
    }
    if constexpr (kOp == LimitOp::kMean) {
      const __m512 count = _mm512_set1_ps(static_cast<float>(end > begin ? end - begin : 1));
#pragma GCC unroll 32
      for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_div_ps(acc[v], count);
    }
    if (kOp == LimitOp::kMax && end == begin) {
#pragma GCC unroll 32
      for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_setzero_ps();
    }
    float* out = a.output + b * a.dim;
#pragma GCC unroll 32
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(out + 16 * v, acc[v]);
  }
}

// The loop as run_limit_loop (gather_limit_dispatch.hpp) calls it.
// The lines per row are the whole row's, or the head rule's half or quarter of them
// (limit_prefetch_bytes; jit::embag_prefetch_head_bytes).
struct Loop {
  template <int kDim, LimitOp kOp>
  static void run(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
    constexpr int kWhole = kDim * 4 / 64, kHalf = (kWhole + 1) / 2, kQuarter = (kWhole + 3) / 4;
    const int64_t lines = (limit_prefetch_bytes(a, kDim * 4) + 63) / 64;
    if (lines == kHalf) gather_bags<kDim, kOp, kHalf>(a, bag_begin, bag_end);
    else if (lines == kQuarter) gather_bags<kDim, kOp, kQuarter>(a, bag_begin, bag_end);
    else gather_bags<kDim, kOp, kWhole>(a, bag_begin, bag_end);
  }
};

// A byte-row loop's accumulators (walk_byte_rows in gather_limit_dispatch.hpp): a row's whole
// 64-byte vectors into four accumulators, its last kRowBytes % 64 bytes by one dword-masked load
// (masked-off dwords are not read).
struct ByteAcc {
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  __m128i small = _mm_setzero_si128();

  template <int kRowBytes>
  void add_row(const uint8_t* row) {
    constexpr int kWhole = kRowBytes / 64, kTail = kRowBytes % 64;
    constexpr __mmask16 kTailMask = static_cast<__mmask16>((1u << (kTail / 4)) - 1);
#pragma GCC unroll 32
    for (int v = 0; v < kWhole; ++v) acc[v % 4] = _mm512_add_epi8(acc[v % 4], _mm512_loadu_si512(row + 64 * v));
    if constexpr (kTail != 0)
      acc[kWhole % 4] = _mm512_add_epi8(acc[kWhole % 4], _mm512_maskz_loadu_epi32(kTailMask, row + 64 * kWhole));
  }
  void add_weight(uint32_t bits) { small = _mm_add_epi8(small, _mm_cvtsi32_si128(static_cast<int>(bits))); }
  void store(uint8_t* out, int64_t bytes) const {
    const __m512i sum = _mm512_add_epi8(_mm512_add_epi8(acc[0], acc[1]), _mm512_add_epi8(acc[2], acc[3]));
    // Masked extracts with a full mask are the plain vextracti64x4; the unmasked intrinsics (and
    // the 512-to-256 cast, built on one) trip the false -Wmaybe-uninitialized in GCC 12's header
    // that vmaxps above does.
    const __m256i low = _mm512_mask_extracti64x4_epi64(_mm256_setzero_si256(), 0xFF, sum, 0);
    const __m256i high = _mm512_mask_extracti64x4_epi64(_mm256_setzero_si256(), 0xFF, sum, 1);
    const __m256i half = _mm256_add_epi8(low, high);
    const __m128i lanes =
        _mm_add_epi8(_mm_add_epi8(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1)), small);
    for (int64_t o = 0; o < bytes; o += 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + o), lanes);
  }
};

}  // namespace

bool limit_embedding_bag_avx512(const LimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_limit_loop<Loop>(args, bag_begin, bag_end);
}

bool limit_byte_rows_avx512(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_byte_limit_loop<ByteAcc>(args, bag_begin, bag_end);
}

#else  // not x86-64: no AVX-512 loop (limit_loop() never hands this one out there)

bool limit_embedding_bag_avx512(const LimitArgs&, int64_t, int64_t) { return false; }
bool limit_byte_rows_avx512(const ByteLimitArgs&, int64_t, int64_t) { return false; }

#endif

}  // namespace shapejit::bench
