// The dim and op dispatch every limit loop shares, written once. Included only by the per-ISA
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

}  // namespace
}  // namespace shapejit::bench
