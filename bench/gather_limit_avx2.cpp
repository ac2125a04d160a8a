// The AVX2 limit loop: the simplest loop that gathers rows into ymm accumulators, with software
// prefetch. Compiled with -mavx2 -mfma (this file only, see bench/CMakeLists.txt); like the
// AVX-512 file it uses no inline code from shared headers, so none of it can leak into callers
// that run on hosts without AVX2.
//
// AVX2 has 16 ymm registers, too few for a whole row past D = 128, so the row is cut into
// column blocks: each block keeps its accumulators in registers across the whole bag, and the
// bag's indices are walked once per block (they are in L1 after the first block). A block is at
// most 16 registers for sum, mean and max (the row operand folds into vaddps/vmaxps) and 8 for
// the weighted sum (its weight takes a register, and 8 divides every D here).
#include "gather_limit.hpp"
#include "gather_limit_dispatch.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shapejit::bench {

#if defined(__x86_64__)
namespace {

// Columns [first_col, first_col + kBlock * 8) of bag b, whose indices are [begin, end).
template <int kBlock, LimitOp kOp>
void gather_block(const LimitArgs& a, int64_t b, int64_t begin, int64_t end, int64_t first_col) {
  const int64_t prefetch_lines = (limit_prefetch_bytes(a, kBlock * 32) + 63) / 64;
  const int64_t last = a.num_indices - 1;
  const float* table = a.table + first_col;
  __m256 acc[kBlock];
  // Every loop over v (and over cache lines) is unrolled so acc[] lives in registers.
#pragma GCC unroll 16
  for (int v = 0; v < kBlock; ++v)
    acc[v] = kOp == LimitOp::kMax ? _mm256_set1_ps(-__builtin_inff()) : _mm256_setzero_ps();
  for (int64_t i = begin; i < end; ++i) {
    // The prefetch follows the global index stream, so it runs ahead across bag boundaries;
    // it fetches this block's lines only (the other blocks fetch theirs on their pass), or
    // their head (limit_prefetch_bytes).
    const int64_t ahead = i + a.prefetch_distance < last ? i + a.prefetch_distance : last;
    const char* next = reinterpret_cast<const char*>(table + a.indices[ahead] * a.row_stride);
    for (int64_t l = 0; l < prefetch_lines; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
    const float* row = table + a.indices[i] * a.row_stride;
    if constexpr (kOp == LimitOp::kWeightedSum) {
      const __m256 w = _mm256_broadcast_ss(a.per_sample_weights + i);
#pragma GCC unroll 16
      for (int v = 0; v < kBlock; ++v)
        acc[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * v), acc[v]);
    } else if constexpr (kOp == LimitOp::kMax) {
#pragma GCC unroll 16
      for (int v = 0; v < kBlock; ++v) acc[v] = _mm256_max_ps(acc[v], _mm256_loadu_ps(row + 8 * v));
    } else {
#pragma GCC unroll 16
      for (int v = 0; v < kBlock; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_loadu_ps(row + 8 * v));
    }
  }
  if constexpr (kOp == LimitOp::kMean) {
    const __m256 count = _mm256_set1_ps(static_cast<float>(end > begin ? end - begin : 1));
#pragma GCC unroll 16
    for (int v = 0; v < kBlock; ++v) acc[v] = _mm256_div_ps(acc[v], count);
  }
  if (kOp == LimitOp::kMax && end == begin) {
#pragma GCC unroll 16
    for (int v = 0; v < kBlock; ++v) acc[v] = _mm256_setzero_ps();
  }
  float* out = a.output + b * a.dim + first_col;
#pragma GCC unroll 16
  for (int v = 0; v < kBlock; ++v) _mm256_storeu_ps(out + 8 * v, acc[v]);
}

// Bag by bag, each bag's column blocks in turn, so a block after the first finds the bag's rows
// (and indices) in L1. (Walking every bag per block, the loop re-read each row from L3: on the
// Zen 5 host D=256 and 512 sum took 113 and 231 us where this order takes 97 and 196.)
template <int kDim, LimitOp kOp>
void gather_bags(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  constexpr int kVecs = kDim / 8;
  constexpr int kMaxBlock = kOp == LimitOp::kWeightedSum ? 8 : 16;
  constexpr int kBlock = kVecs < kMaxBlock ? kVecs : kMaxBlock;
  static_assert(kVecs % kBlock == 0, "the column blocks must tile the row");
  // A bag starts where the one before it ended (carried, as gather_limit_avx512.cpp says why).
  int64_t next_begin = bag_begin < bag_end ? a.offsets[bag_begin] : 0;
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    const int64_t begin = next_begin;
    const int64_t end = b + 1 < a.num_offsets ? a.offsets[b + 1] : a.num_indices;
    next_begin = end;
    for (int64_t col = 0; col < kDim; col += 8 * kBlock) gather_block<kBlock, kOp>(a, b, begin, end, col);
  }
}

// The loop as run_limit_loop (gather_limit_dispatch.hpp) calls it.
struct Loop {
  template <int kDim, LimitOp kOp>
  static void run(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
    gather_bags<kDim, kOp>(a, bag_begin, bag_end);
  }
};

// A byte-row loop's accumulators (walk_byte_rows in gather_limit_dispatch.hpp): a row's whole
// 32-byte vectors into four accumulators, its last kRowBytes % 32 bytes (a multiple of 4) by loads
// of 16, 8 and 4 bytes into the lanes of their positions, so nothing past the row is read (a
// dword-masked vpmaskmovd load took 1.35x the time at 40-byte rows on the Zen 1 host, measured
// in a version of this loop with run-time trip counts).
struct ByteAcc {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  __m128i small = _mm_setzero_si128();

  template <int kRowBytes>
  void add_row(const uint8_t* row) {
    constexpr int kWhole = kRowBytes / 32, kTail = kRowBytes % 32;
#pragma GCC unroll 32
    for (int v = 0; v < kWhole; ++v)
      acc[v % 4] = _mm256_add_epi8(acc[v % 4], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * v)));
    const uint8_t* tail = row + 32 * kWhole;
    if constexpr (kTail & 16) {
      small = _mm_add_epi8(small, _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail)));
      tail += 16;
    }
    if constexpr (kTail & 8) small = _mm_add_epi8(small, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tail)));
    if constexpr (kTail & 4) {
      int32_t word = 0;
      __builtin_memcpy(&word, tail + (kTail & 8), 4);
      small = _mm_add_epi8(small, _mm_insert_epi32(_mm_setzero_si128(), word, (kTail & 8) ? 2 : 0));
    }
  }
  void add_weight(uint32_t bits) { small = _mm_add_epi8(small, _mm_cvtsi32_si128(static_cast<int>(bits))); }
  void store(uint8_t* out, int64_t bytes) const {
    const __m256i sum = _mm256_add_epi8(_mm256_add_epi8(acc[0], acc[1]), _mm256_add_epi8(acc[2], acc[3]));
    const __m128i lanes =
        _mm_add_epi8(_mm_add_epi8(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1)), small);
    for (int64_t o = 0; o < bytes; o += 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + o), lanes);
  }
};

}  // namespace

bool limit_embedding_bag_avx2(const LimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_limit_loop<Loop>(args, bag_begin, bag_end);
}

bool limit_byte_rows_avx2(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_byte_limit_loop<ByteAcc>(args, bag_begin, bag_end);
}

#else  // not x86-64: no AVX2 loop (limit_loop() never hands this one out there)

bool limit_embedding_bag_avx2(const LimitArgs&, int64_t, int64_t) { return false; }
bool limit_byte_rows_avx2(const ByteLimitArgs&, int64_t, int64_t) { return false; }

#endif

}  // namespace shapejit::bench
