// The qd8 input rule (docs/quantized-linear-semantics.md, "Inputs of the qd8 forms") for blocks
// of rows on AVX2, with the bits of the scalar rule: the per-row parameters of up to eight rows
// at once in one vector, and each code from a reciprocal multiply whose rounding is checked
// against the division's (the division where the check cannot decide). Why that is exact is
// written at quantize_rows_avx2's definition.
#pragma once

#include <cstdint>

namespace shapejit::rt {

/// Quantizes rows [0, rows) of x (row r at x + r * ldx, k >= 1 floats) into u (row r at
/// u + r * ldu: k codes, each xor'ed with `flip`, then zeros up to the next multiple of 8 bytes),
/// scale[r] and zero[r] (biased: z + 128). Returns the first row holding a non-finite value or
/// whose max - min overflows (rows from that block on are not written), or `rows`. Needs a host
/// that runs AVX2 (jit::host_runs(jit::Isa::kAvx2)); x86-64 builds only.
int64_t quantize_rows_avx2(const float* x, int64_t ldx, int64_t k, int64_t rows, uint8_t* u, int64_t ldu,
                           float* scale, int32_t* zero, uint8_t flip);

}  // namespace shapejit::rt
