// The dim and op dispatch every limit loop shares, and the byte-row loops' walk and row sizes,
// written once. Included only by the per-ISA files (gather_limit_avx512.cpp, _avx2.cpp,
// _neon.cpp), after their loop template. Everything here has internal linkage, so each file gets
// its own copy compiled for its ISA alone and the linker can never hand one ISA's instantiation
// to another's caller (gather_limit.hpp's rule).
#pragma once

#include <cstdint>

#include "gather_limit.hpp"

namespace shapejit::bench {
namespace {

// Loop::run<kDim, kOp>(args, bag_begin, bag_end) for the call's op.
template <class Loop, int kDim>
void run_limit_op(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  switch (a.op) {
    case LimitOp::kSum: Loop::template run<kDim, LimitOp::kSum>(a, bag_begin, bag_end); return;
    case LimitOp::kMean: Loop::template run<kDim, LimitOp::kMean>(a, bag_begin, bag_end); return;
    case LimitOp::kWeightedSum: Loop::template run<kDim, LimitOp::kWeightedSum>(a, bag_begin, bag_end); return;
    case LimitOp::kMax: Loop::template run<kDim, LimitOp::kMax>(a, bag_begin, bag_end); return;
  }
}

// The dims every limit loop is specialised for (limit_dim_supported); false for any other.
template <class Loop>
bool run_limit_loop(const LimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  switch (a.dim) {
    case 16: run_limit_op<Loop, 16>(a, bag_begin, bag_end); return true;
    case 32: run_limit_op<Loop, 32>(a, bag_begin, bag_end); return true;
    case 64: run_limit_op<Loop, 64>(a, bag_begin, bag_end); return true;
    case 128: run_limit_op<Loop, 128>(a, bag_begin, bag_end); return true;
    case 256: run_limit_op<Loop, 256>(a, bag_begin, bag_end); return true;
    case 512: run_limit_op<Loop, 512>(a, bag_begin, bag_end); return true;
    default: return false;
  }
}

// The byte-row loops' walk (ByteLimitArgs), written once: bag by bag, each index's row
// `prefetch_distance` positions ahead prefetched (one prefetch per 64 bytes from its start and one
// at its last byte: a row that does not start on a line ends one line further), then the row's
// bytes added by `Acc::add_row<kRowBytes>`, its weight's by `Acc::add_weight`; at the bag's end
// `Acc::store` writes the 16 lanes across the output row. Acc (one per ISA file) holds the vector
// accumulators, zeroed on construction; everything is inlined and unrolled at compile time.
template <int kRowBytes, class Acc>
void walk_byte_rows(const ByteLimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  static_assert(kRowBytes % 4 == 0, "rows of whole dwords");
  const int64_t last = a.num_indices - 1;
  const uint8_t* weights = static_cast<const uint8_t*>(a.per_sample_weights);
  for (int64_t b = bag_begin; b < bag_end; ++b) {
    const int64_t begin = a.offsets[b];
    const int64_t end = b + 1 < a.num_offsets ? a.offsets[b + 1] : a.num_indices;
    Acc acc;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t ahead = i + a.prefetch_distance < last ? i + a.prefetch_distance : last;
      const uint8_t* next = a.table + a.indices[ahead] * a.row_stride_bytes;
#pragma GCC unroll 32
      for (int off = 0; off < kRowBytes; off += 64) __builtin_prefetch(next + off, 0, 3);
      if constexpr (kRowBytes % 64 != 0) __builtin_prefetch(next + kRowBytes - 1, 0, 3);
      acc.template add_row<kRowBytes>(a.table + a.indices[i] * a.row_stride_bytes);
      if (weights) {
        uint32_t w = 0;  // 2 or 4 bytes, each a fixed-size copy (one load)
        if (a.weight_bytes == 4) __builtin_memcpy(&w, weights + i * 4, 4);
        else __builtin_memcpy(&w, weights + i * 2, 2);
        acc.add_weight(w);
      }
    }
    acc.store(a.output + b * a.output_bytes, a.output_bytes);
  }
}

// The row sizes the byte-row loops are specialised for (the loop over a row is unrolled, as the
// f32 loops' are for their dims): every dim of limit_dim_supported stored as 16-bit values (2 D
// bytes), 8-bit rowwise codes (D + 8: f32 scale and bias), 4-bit (D / 2 + 4: f16 scale and bias)
// and 2-bit (D / 4 + 4), each size once.
template <int... kRowBytes>
struct RowSizes {};
using ByteRowSizes = RowSizes<32, 64, 128, 256, 512, 1024,  // 16-bit
                              24, 40, 72, 136, 264, 520,    // 8-bit
                              12, 20, 36, 68, 132, 260,     // 4-bit: 2-bit's for D = 32..512 as well
                              8>;                           // 2-bit, D = 16

// walk_byte_rows<kRowBytes, Acc> for the call's row size; false (nothing run) for a size not in
// ByteRowSizes, an output row not of whole 16-byte lane sets or a weight not of 2 or 4 bytes.
template <class Acc, int... kRowBytes>
bool run_byte_rows(const ByteLimitArgs& a, int64_t bag_begin, int64_t bag_end, RowSizes<kRowBytes...>) {
  if (a.output_bytes % 16 != 0 || (a.weight_bytes != 2 && a.weight_bytes != 4)) return false;
  return ((a.row_bytes == kRowBytes ? (walk_byte_rows<kRowBytes, Acc>(a, bag_begin, bag_end), true) : false) || ...);
}
template <class Acc>
bool run_byte_limit_loop(const ByteLimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  return run_byte_rows<Acc>(a, bag_begin, bag_end, ByteRowSizes{});
}

}  // namespace
}  // namespace shapejit::bench
