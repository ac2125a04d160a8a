// Scalar reference of a linear group: the executable form of split-gemm-semantics.md, and the
// acceptance bound every kernel (and ATen, in the oracle) is measured with. No SIMD, no threads.
#pragma once

#include <cstdint>

#include "shapejit/shapejit.h"

namespace shapejit::ref {

/// One part resolved to plain views; every stride is explicit (never 0).
struct LinearPartView {
  const float* x = nullptr;  ///< X [m, k], rows ldx apart
  int64_t m = 0, k = 0, ldx = 0;
  const float* w = nullptr;  ///< W [n, k], rows ldw apart (a row range of a packed weight, or its own)
  int64_t n = 0, ldw = 0;
  const float* bias = nullptr;  ///< nullptr, or n values (a slice of a packed bias)
  shapejit_activation activation = SHAPEJIT_ACTIVATION_NONE;
  float scale = 1.0f;
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t heads = 1;  ///< head-split: H, with n = H * Dh
  int64_t batch = 0;  ///< head-split: Nb, with m = Nb * L
  float* y = nullptr;
  int64_t ldy = 0;  ///< row-major: rows ldy apart
};

/// The reference value of one element and how far a kernel result may be from it.
struct ElementRef {
  float value;
  double bound;
};

/// act(pre) computed in double from the rounded f32 pre-activation, rounded to f32 once.
float activate(shapejit_activation activation, float pre);

/// Largest |act'(z)| over all z: how much an error before the activation can grow through it.
double activation_gain(shapejit_activation activation);

/// Element offset of Y[row, col] in the part's output (row-major or head-split).
int64_t output_offset(const LinearPartView& part, int64_t row, int64_t col);

/// Reference value and acceptance bound of Y[row, col]: the bound of split-gemm-semantics.md,
/// 2 K 2^-24 (sum_k |x w| + |b|) + ulp(pre), carried through the activation (times its gain,
/// plus one ulp of the result, plus 8 ulp(pre) for gelu, gelu_tanh and silu, whose f32
/// evaluation errs relative to its argument) and the scale (times |scale|, plus one ulp).
ElementRef reference_element(const LinearPartView& part, int64_t row, int64_t col);

/// True when y is accepted against ref: NaN exactly where ref is NaN, infinities equal, and
/// finite values within bound.
bool accepted(float y, float ref, double bound);

/// Computes one part into part.y (arguments already validated).
void linear_part(const LinearPartView& part);

/// Resolves part p of a validated group description and its run arguments to a view: the
/// packed form's weight rows and the packed bias slice start at the part's row_begin.
LinearPartView resolve_part(const shapejit_linear_group_desc& desc, int64_t p,
                            const shapejit_linear_group_io& io);

/// Computes every part of a validated group (io holds desc.num_parts entries).
void linear_group(const shapejit_linear_group_desc& desc, const shapejit_linear_group_io* io);

}  // namespace shapejit::ref
