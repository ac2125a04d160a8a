// The qd8 forms' input quantization for one run (docs/quantized-linear-semantics.md): every
// distinct input of the run (same pointer, m, k and ldx) quantized once, per row, into a buffer
// the engine owns (per calling thread, reused from run to run), in the kernels' form: u8 codes
// u = q + 128 padded with zeros to a multiple of 8 bytes (or, for kernels that read them signed,
// jit::gemm_signed_input, the int8 codes q, then zeros), per-row scales and biased zero points.
// It runs after the run is validated and before any output is written, so a non-finite input is
// an error that leaves every output untouched. The scalar reference (ref/linear_group_quant)
// keeps its own copy of the rule, the oracle the tests hold this one to.
#pragma once

#include <cstdint>
#include <span>

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// One part's quantized input rows for a run (null pointers when the part has no rows).
struct QuantizedInput {
  const uint8_t* u = nullptr;      ///< row r at u + r * ldu: k codes q + 128 (signed: q), then zeros
  bool signed_codes = false;       ///< the rows hold q as int8 rather than q + 128
  int64_t ldu = 0;                 ///< bytes between rows: k rounded up to a multiple of 8
  const float* scale = nullptr;    ///< per row
  const int32_t* zero = nullptr;   ///< per row, biased: z + 128
};

/// Row stride of the quantized rows of an input of width k (gemm_padded_k of every qd8 form).
constexpr int64_t quantized_row_bytes(int64_t k) { return (k + 7) / 8 * 8; }

/// Quantizes every distinct input of a validated run and returns one entry per part
/// (pointing into the calling thread's buffer, valid until its next call), the codes signed
/// when `signed_codes` (the run's kernels read q: PackedGroup::signed_input). Throws
/// Error(kInvalidArgument) naming io[p].x, the row and the rule for a non-finite input row (the
/// first such row of the first such input), kOutOfMemory when the buffer cannot grow.
std::span<const QuantizedInput> quantize_run_inputs(std::span<const shapejit_linear_group_io> io,
                                                    bool signed_codes = false);

/// The rule for one row (exposed for the tests): x[0, k) to u (k codes + 128, then zeros up to
/// quantized_row_bytes(k)), its scale and biased zero point. Returns false, writing only u, when
/// the row holds a non-finite value or its max - min overflows.
bool quantize_input_row(const float* x, int64_t k, uint8_t* u, float* scale, int32_t* zero);

}  // namespace shapejit::rt
