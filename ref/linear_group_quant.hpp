// Scalar reference of the quantized linear-group forms: the executable form of
// docs/quantized-linear-semantics.md (weight and input quantization, the exact int32
// accumulator, the epilogue's rounding order, the bounds). No SIMD, no threads. Like
// ref/linear_group, it knows nothing of runtime/: the runtime's quantizers are separate code on
// purpose, so that the tests comparing the two can catch a slip in either.
#pragma once

#include <cstdint>

#include "ref/linear_group.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::ref {

/// True for the forms whose input is quantized per row (qd8).
bool quant_input(shapejit_linear_quant quant);
/// True for the int4 weight forms.
bool quant_int4(shapejit_linear_quant quant);
/// The weight codes' range of a quantized form: [-127, 127] (qc8w) or [-8, 7] (qc4w).
int quant_code_min(shapejit_linear_quant quant);
int quant_code_max(shapejit_linear_quant quant);
/// Largest K of the qd8 forms (the int32 accumulator stays exact).
inline constexpr int64_t kQd8MaxK = 65536;

/// Quantizes one weight row w[0, k) of a quantized form: *scale = max|w| / 127 (or / 7), codes
/// rounded half to even and clamped. Returns -1, or the index of the first non-finite weight (then
/// nothing is written).
int64_t quantize_weight_row(shapejit_linear_quant quant, const float* w, int64_t k, int8_t* codes, float* scale);

/// One input row quantized for the qd8 forms: q = clamp(rne(x / scale) + zero, -128, 127).
struct InputRowQuant {
  float scale = 1.0f;
  int32_t zero = 0;  ///< z in [-128, 127] (kernels receive z + 128)
};

/// Why quantize_input_row refused a row.
enum class InputRowError { kNone, kNonFinite, kRangeOverflow };

/// Quantizes x[0, k) into q[0, k) (int8) and returns its scale and zero point; on an error
/// (a non-finite value, or hi - lo overflowing) `error` says which and q is unspecified.
InputRowQuant quantize_input_row(const float* x, int64_t k, int8_t* q, InputRowError& error);

/// The exact accumulator sum_k (q[k] - zero) * codes[k] (int64: the caller checks it fits int32).
int64_t qd8_accumulator(const int8_t* q, int32_t zero, const int8_t* codes, int64_t k);

/// The qd8 pre-activation, f32(f32(f32(acc) * f32(x_scale * w_scale)) + bias), no fused
/// multiply-add (bias 0 when the part has none: adding +0 changes no value but -0).
float qd8_pre(int32_t acc, float x_scale, float w_scale, const float* bias);

/// The weight-only pre-activation from the float32 accumulator: f32(f32(acc * w_scale) + bias).
float weight_only_pre(float acc, float w_scale, const float* bias);

/// One quantized part resolved to plain views: as LinearPartView, with the weights as codes.
struct QuantPartView {
  LinearPartView f;  ///< x, m, k, ldx, n, bias, epilogue, layout, y (f.w and f.ldw unused)
  shapejit_linear_quant quant = SHAPEJIT_LINEAR_QD8_QC8W;
  const int8_t* codes = nullptr;  ///< [n, k], rows ldc apart, one code per byte
  int64_t ldc = 0;
  const float* wscale = nullptr;  ///< [n]
  // qd8: the input already quantized, in the kernels' form (u8 codes u = q + 128, rows ldu bytes
  // apart, biased zero points z + 128, scales). Null: the reference quantizes X itself.
  const uint8_t* xu = nullptr;
  int64_t ldu = 0;
  const float* x_scale = nullptr;
  const int32_t* x_zero = nullptr;
};

/// The pre-activation value of Y[row, col] by the rules (qd8: bitwise what every kernel
/// computes; weight-only: the double sum of x * code rounded to f32 once, then the epilogue).
/// qd8 with xu null: the row is quantized here (its error is not reported: validated inputs).
float quant_pre(const QuantPartView& part, int64_t row, int64_t col);

/// Computes one quantized part into part.f.y (arguments validated; for qd8 every row finite).
void quant_linear_part(const QuantPartView& part);

/// Reference value and acceptance bound of Y[row, col] for a kernel: qd8 with activation none or
/// relu has bound 0 (bitwise); gelu, gelu_tanh and silu get the f32 group's allowance for their
/// f32 evaluation; weight-only gets the f32 group's bound with the codes as weights plus the two
/// epilogue roundings; then the scale as in the f32 group.
ElementRef quant_reference_element(const QuantPartView& part, int64_t row, int64_t col);

/// The double-precision epilogue on the exact accumulator (qd8): d = acc * x_scale * w_scale
/// + bias in double, and the bound the three f32 roundings keep qd8_pre within:
/// 3.01 * 2^-24 |acc x_scale w_scale| + 2^-24 |d| + 3 * 2^-150.
struct DoubleEpilogue {
  double value;
  double bound;
};
DoubleEpilogue qd8_double_epilogue(int32_t acc, float x_scale, float w_scale, const float* bias);

/// The quantization error bound of Y[row, col] against the exact f32 product with the original
/// weights W ([n, k], rows ldw apart): e_x sum|W| + e_w sum|X| + K e_x e_w (e_x = half the row's
/// input step for qd8, else 0; e_w = half the channel's weight step), plus the f32 group's
/// rounding bound, through the activation's gain and the scale (docs/quantized-linear-semantics.md).
double quantization_bound(const QuantPartView& part, const float* w, int64_t ldw, int64_t row, int64_t col);

}  // namespace shapejit::ref
