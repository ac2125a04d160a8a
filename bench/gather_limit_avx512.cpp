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
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    const int64_t begin = a.offsets[b];
    const int64_t end = b + 1 < a.num_offsets ? a.offsets[b + 1] : a.num_indices;
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

}  // namespace

bool limit_embedding_bag_avx512(const LimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_limit_loop<Loop>(args, bag_begin, bag_end);
}

#else  // not x86-64: no AVX-512 loop (limit_loop() never hands this one out there)

bool limit_embedding_bag_avx512(const LimitArgs&, int64_t, int64_t) { return false; }

#endif

}  // namespace shapejit::bench
