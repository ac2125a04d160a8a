// Per-sample weights of f16 widened to f32 once per call, before the kernels run.
//
// A kernel that reads f16 weights converts each row's weight in its row loop: on x86 a word
// broadcast and a conversion, three shuffle- and FMA-port operations per row, where an f32 weight
// is a broadcast from memory that only the load ports see. The plan widens the call's weights
// into its own storage instead (exact: every f16 value is an f32), and the kernels read those
// (jit::kernel_dtype_rule lets every table's kernel take f32 weights). Intel AVX-512 host, f16
// 4096 x 128 weighted sum, 3 A/B alternations: 31.6-32.2 -> 30.5-30.8 us. bf16 weights stay
// in the kernels: their conversion is a broadcast and a shift, and widening them measured
// 1.5 % slower.
#pragma once

#include <cstdint>

#include "shapejit/shapejit.hpp"

namespace shapejit::rt {

/// The dtype the kernels read a call's per-sample weights in: f32 for f16 weights on x86-64
/// builds, else the caller's `psw`.
DType kernel_weight_dtype(DType psw);

/// dst[i] = the f32 value of the f16 src[i], i < n: F16C's conversion where the host has it, the
/// instruction the x86 kernels converted weights with, so a NaN's bits come out as they did.
void widen_f16_weights(const void* src, int64_t n, float* dst);

}  // namespace shapejit::rt
