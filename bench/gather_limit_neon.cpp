// The NEON limit loop (AArch64): the simplest loop that gathers rows into q-register
// accumulators, with software prefetch. NEON is part of the AArch64 baseline, so this file needs
// no extra flags; on x86-64 it compiles to a stub.
//
// 32 q registers of 4 floats: the row is cut into column blocks of at most 16 accumulators
// (64 floats), leaving the other 16 registers for the loaded row and the weight; each block
// keeps its accumulators across the whole bag and walks the bag's indices once (they are in L1
// after the first block).
#include "gather_limit.hpp"
#include "gather_limit_dispatch.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace shapejit::bench {

#if defined(__aarch64__)
namespace {

// Columns [first_col, first_col + 4 * kBlock) of bags [bag_begin, bag_end).
template <int kBlock, LimitOp kOp>
void gather_block(const LimitArgs& a, int64_t bag_begin, int64_t bag_end, int64_t first_col) {
  constexpr int kLinesPerBlock = (kBlock * 16 + 63) / 64;
  const int64_t last = a.num_indices - 1;
  const float* table = a.table + first_col;
  // A bag starts where the one before it ended (carried, as gather_limit_avx512.cpp says why).
  int64_t next_begin = bag_begin < bag_end ? a.offsets[bag_begin] : 0;
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    const int64_t begin = next_begin;
    const int64_t end = b + 1 < a.num_offsets ? a.offsets[b + 1] : a.num_indices;
    next_begin = end;
    float32x4_t acc[kBlock];
    // Every loop over v (and over cache lines) is unrolled so acc[] lives in registers.
#pragma GCC unroll 16
    for (int v = 0; v < kBlock; ++v) acc[v] = vdupq_n_f32(kOp == LimitOp::kMax ? -__builtin_inff() : 0.0f);
    for (int64_t i = begin; i < end; ++i) {
      // The prefetch follows the global index stream, so it runs ahead across bag boundaries.
      const int64_t ahead = i + a.prefetch_distance < last ? i + a.prefetch_distance : last;
      const char* next = reinterpret_cast<const char*>(table + a.indices[ahead] * a.row_stride);
#pragma GCC unroll 16
      for (int l = 0; l < kLinesPerBlock; ++l) __builtin_prefetch(next + 64 * l, 0, 3);
      const float* row = table + a.indices[i] * a.row_stride;
      if constexpr (kOp == LimitOp::kWeightedSum) {
        const float32x4_t w = vdupq_n_f32(a.per_sample_weights[i]);
#pragma GCC unroll 16
        for (int v = 0; v < kBlock; ++v) acc[v] = vfmaq_f32(acc[v], w, vld1q_f32(row + 4 * v));
      } else if constexpr (kOp == LimitOp::kMax) {
#pragma GCC unroll 16
        for (int v = 0; v < kBlock; ++v) acc[v] = vmaxq_f32(acc[v], vld1q_f32(row + 4 * v));
      } else {
#pragma GCC unroll 16
        for (int v = 0; v < kBlock; ++v) acc[v] = vaddq_f32(acc[v], vld1q_f32(row + 4 * v));
      }
    }
    if constexpr (kOp == LimitOp::kMean) {
      const float32x4_t count = vdupq_n_f32(static_cast<float>(end > begin ? end - begin : 1));
#pragma GCC unroll 16
      for (int v = 0; v < kBlock; ++v) acc[v] = vdivq_f32(acc[v], count);
    }
    if (kOp == LimitOp::kMax && end == begin) {
#pragma GCC unroll 16
      for (int v = 0; v < kBlock; ++v) acc[v] = vdupq_n_f32(0.0f);
    }
    float* out = a.output + b * a.dim + first_col;
#pragma GCC unroll 16
    for (int v = 0; v < kBlock; ++v) vst1q_f32(out + 4 * v, acc[v]);
  }
}

template <int kDim, LimitOp kOp>
void gather_bags(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  constexpr int kVecs = kDim / 4;
  constexpr int kBlock = kVecs < 16 ? kVecs : 16;
  static_assert(kVecs % kBlock == 0, "the column blocks must tile the row");
  for (int64_t col = 0; col < kDim; col += 4 * kBlock)
    gather_block<kBlock, kOp>(a, bag_begin, bag_end, col);
}

// The loop as run_limit_loop (gather_limit_dispatch.hpp) calls it.
struct Loop {
  template <int kDim, LimitOp kOp>
  static void run(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
    gather_bags<kDim, kOp>(a, bag_begin, bag_end);
  }
};

// A byte-row loop's accumulators (walk_byte_rows in gather_limit_dispatch.hpp): a row's whole
// 16-byte vectors into four accumulators, its last kRowBytes % 16 bytes (a multiple of 4) by loads
// of 8 and 4 bytes into the lanes of their positions, so nothing past the row is read.
struct ByteAcc {
  uint8x16_t acc[4] = {vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0)};
  uint8x16_t small = vdupq_n_u8(0);

  template <int kRowBytes>
  void add_row(const uint8_t* row) {
    constexpr int kWhole = kRowBytes / 16, kTail = kRowBytes % 16;
#pragma GCC unroll 64
    for (int v = 0; v < kWhole; ++v) acc[v % 4] = vaddq_u8(acc[v % 4], vld1q_u8(row + 16 * v));
    const uint8_t* tail = row + 16 * kWhole;
    if constexpr (kTail & 8) small = vaddq_u8(small, vcombine_u8(vld1_u8(tail), vdup_n_u8(0)));
    if constexpr (kTail & 4) {
      uint32_t word = 0;
      __builtin_memcpy(&word, tail + (kTail & 8), 4);
      small = vaddq_u8(small, vreinterpretq_u8_u32(vsetq_lane_u32(word, vdupq_n_u32(0), (kTail & 8) ? 2 : 0)));
    }
  }
  void add_weight(uint32_t bits) { small = vaddq_u8(small, vreinterpretq_u8_u32(vsetq_lane_u32(bits, vdupq_n_u32(0), 0))); }
  void store(uint8_t* out, int64_t bytes) const {
    const uint8x16_t lanes = vaddq_u8(vaddq_u8(vaddq_u8(acc[0], acc[1]), vaddq_u8(acc[2], acc[3])), small);
    for (int64_t o = 0; o < bytes; o += 16) vst1q_u8(out + o, lanes);
  }
};

}  // namespace

bool limit_embedding_bag_neon(const LimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_limit_loop<Loop>(args, bag_begin, bag_end);
}

bool limit_byte_rows_neon(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end) {
  return run_byte_limit_loop<ByteAcc>(args, bag_begin, bag_end);
}

#else  // not AArch64: no NEON loop (limit_loop() never hands this one out there)

bool limit_embedding_bag_neon(const LimitArgs&, int64_t, int64_t) { return false; }
bool limit_byte_rows_neon(const ByteLimitArgs&, int64_t, int64_t) { return false; }

#endif

}  // namespace shapejit::bench
