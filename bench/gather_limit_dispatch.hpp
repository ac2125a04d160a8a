// The dim and op dispatch every limit loop shares, and the byte-row loops' size rule, written once. Included only by the per-ISA
// files (gather_limit_avx512.cpp, _avx2.cpp, _neon.cpp), after their loop template. Everything
// here has internal linkage, so each file gets its own copy compiled for its ISA alone and the
// linker can never hand one ISA's instantiation to another's caller (gather_limit.hpp's rule).
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

// Loop::run<kRowBytes>(args, bag_begin, bag_end) for the call's row size; false (nothing run)
// for a size not in ByteRowSizes, an output row not of whole 16-byte lane sets or a weight not
// of 2 or 4 bytes.
template <class Loop, int... kRowBytes>
bool run_byte_rows(const ByteLimitArgs& a, int64_t bag_begin, int64_t bag_end, RowSizes<kRowBytes...>) {
  if (a.output_bytes % 16 != 0 || (a.weight_bytes != 2 && a.weight_bytes != 4)) return false;
  return ((a.row_bytes == kRowBytes ? (Loop::template run<kRowBytes>(a, bag_begin, bag_end), true) : false) || ...);
}
template <class Loop>
bool run_byte_limit_loop(const ByteLimitArgs& a, int64_t bag_begin, int64_t bag_end) {
  return run_byte_rows<Loop>(a, bag_begin, bag_end, ByteRowSizes{});
}

}  // namespace
}  // namespace shapejit::bench
