// Per-channel weight quantization of the quantized linear groups (docs/quantized-linear-
// semantics.md): used when a group is built from f32 weights and by the public
// quantize_linear_weights. The scalar reference (ref/linear_group_quant) has its own copy, the
// oracle the tests hold this one to.
#pragma once

#include <cstdint>

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Quantizes rows [0, rows) of w (rows ldw floats apart, every value finite: validated) by the
/// rules of `quant` (a quantized form) into codes [rows, k] (dense) and scales [rows].
void quantize_weight_rows(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k, int64_t ldw,
                          int8_t* codes, float* scales);

}  // namespace shapejit::rt
