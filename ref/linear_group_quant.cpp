// Every step is written as the semantics document states it, one float32 rounding at a time;
// the exact parts (codes, zero points, accumulators) are integers.
#include "ref/linear_group_quant.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace shapejit::ref {
namespace {

constexpr double kF32Eps = 1.0 / 16777216.0;  // 2^-24
constexpr double kF32Underflow = 0x1p-150;

double ulp(double v) {
  const double a = std::fabs(v);
  if (!(a >= 1.17549435e-38)) return std::ldexp(1.0, -149);
  if (!std::isfinite(a)) return 0.0;
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

// Round half to even (the default rounding mode, which the library never changes).
float rne(float v) { return std::nearbyint(v); }

int32_t clamp_int(float v, int lo, int hi) { return int32_t(std::clamp(v, float(lo), float(hi))); }

bool transcendental(shapejit_activation a) { return a != SHAPEJIT_ACTIVATION_NONE && a != SHAPEJIT_ACTIVATION_RELU; }

// The epilogue after pre (activation in double rounded once, then the scale), and the
// allowance a kernel's f32 activation and scale add to an error `bound` in pre.
ElementRef finish(const LinearPartView& f, float pre, double bound) {
  const float act = activate(f.activation, pre);
  const float value = act * f.scale;
  if (f.activation != SHAPEJIT_ACTIVATION_NONE) {
    bound *= activation_gain(f.activation);
    if (transcendental(f.activation) || bound > 0) bound += ulp(act);
    if (transcendental(f.activation)) bound += 8.0 * ulp(pre);
  }
  if (f.scale != 1.0f && bound > 0) bound = (f.scale == 0.0f ? 0.0 : std::fabs(double(f.scale)) * bound) + ulp(value);
  return {value, bound};
}

// Row `row` of a qd8 part's input: codes q (int8) and its parameters, from the prequantized
// kernel form when the view has it, else quantized here into `own`.
const int8_t* qd8_row(const QuantPartView& p, int64_t row, std::vector<int8_t>& own, InputRowQuant& rq) {
  own.resize(size_t(p.f.k));
  if (p.xu) {
    const uint8_t* u = p.xu + row * p.ldu;
    for (int64_t k = 0; k < p.f.k; ++k) own[size_t(k)] = int8_t(int(u[k]) - 128);
    rq.scale = p.x_scale[row];
    rq.zero = p.x_zero[row] - 128;
    return own.data();
  }
  InputRowError error = InputRowError::kNone;
  rq = quantize_input_row(p.f.x + row * p.f.ldx, p.f.k, own.data(), error);
  return own.data();
}

int32_t qd8_acc(const QuantPartView& p, const int8_t* q, int32_t zero, int64_t col) {
  return int32_t(qd8_accumulator(q, zero, p.codes + col * p.ldc, p.f.k));
}

// Weight-only: the exact-as-possible double sum of x * code, and sum |x * code|.
double weight_only_dot(const QuantPartView& p, int64_t row, int64_t col, double* magnitude) {
  const float* x = p.f.x + row * p.f.ldx;
  const int8_t* c = p.codes + col * p.ldc;
  double acc = 0.0, mag = 0.0;
  for (int64_t k = 0; k < p.f.k; ++k) {
    const double t = double(x[k]) * double(c[k]);
    acc += t;
    mag += std::fabs(t);
  }
  if (magnitude) *magnitude = mag;
  return acc;
}

}  // namespace

bool quant_input(shapejit_linear_quant q) { return q == SHAPEJIT_LINEAR_QD8_QC8W || q == SHAPEJIT_LINEAR_QD8_QC4W; }
bool quant_int4(shapejit_linear_quant q) { return q == SHAPEJIT_LINEAR_QD8_QC4W || q == SHAPEJIT_LINEAR_F32_QC4W; }
int quant_code_min(shapejit_linear_quant q) { return quant_int4(q) ? -8 : -127; }
int quant_code_max(shapejit_linear_quant q) { return quant_int4(q) ? 7 : 127; }

int64_t quantize_weight_row(shapejit_linear_quant quant, const float* w, int64_t k, int8_t* codes, float* scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    if (!std::isfinite(w[i])) return i;
    amax = std::max(amax, std::fabs(w[i]));
  }
  const float s = amax / float(quant_int4(quant) ? 7 : 127);
  *scale = s;
  for (int64_t i = 0; i < k; ++i)
    codes[i] = s == 0.0f ? int8_t(0) : int8_t(clamp_int(rne(w[i] / s), quant_code_min(quant), quant_code_max(quant)));
  return -1;
}

InputRowQuant quantize_input_row(const float* x, int64_t k, int8_t* q, InputRowError& error) {
  error = InputRowError::kNone;
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    if (!std::isfinite(x[i])) {
      error = InputRowError::kNonFinite;
      return {};
    }
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const float range = hi - lo;
  if (!std::isfinite(range)) {
    error = InputRowError::kRangeOverflow;
    return {};
  }
  InputRowQuant r;
  r.scale = range / 255.0f;
  if (r.scale == 0.0f) r.scale = 1.0f;  // a row of zeros (or a range below 255 * 2^-150)
  r.zero = clamp_int(rne(-128.0f - lo / r.scale), -128, 127);
  for (int64_t i = 0; i < k; ++i) q[i] = int8_t(clamp_int(rne(x[i] / r.scale) + float(r.zero), -128, 127));
  return r;
}

int64_t qd8_accumulator(const int8_t* q, int32_t zero, const int8_t* codes, int64_t k) {
  int64_t acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += (int64_t(q[i]) - zero) * int64_t(codes[i]);
  return acc;
}

float qd8_pre(int32_t acc, float x_scale, float w_scale, const float* bias) {
  const volatile float s = x_scale * w_scale;  // volatile: each product rounded alone, never fused
  const volatile float prod = float(acc) * s;
  return bias ? prod + *bias : prod;
}

float weight_only_pre(float acc, float w_scale, const float* bias) {
  const volatile float prod = acc * w_scale;
  return bias ? prod + *bias : prod;
}

float quant_pre(const QuantPartView& p, int64_t row, int64_t col) {
  const float* bias = p.f.bias ? p.f.bias + col : nullptr;
  if (quant_input(p.quant)) {
    std::vector<int8_t> own;
    InputRowQuant rq;
    const int8_t* q = qd8_row(p, row, own, rq);
    return qd8_pre(qd8_acc(p, q, rq.zero, col), rq.scale, p.wscale[col], bias);
  }
  return weight_only_pre(float(weight_only_dot(p, row, col, nullptr)), p.wscale[col], bias);
}

void quant_linear_part(const QuantPartView& p) {
  std::vector<int8_t> own;
  for (int64_t row = 0; row < p.f.m; ++row) {
    InputRowQuant rq;
    const int8_t* q = quant_input(p.quant) ? qd8_row(p, row, own, rq) : nullptr;
    for (int64_t col = 0; col < p.f.n; ++col) {
      const float* bias = p.f.bias ? p.f.bias + col : nullptr;
      const float pre = q ? qd8_pre(qd8_acc(p, q, rq.zero, col), rq.scale, p.wscale[col], bias)
                          : weight_only_pre(float(weight_only_dot(p, row, col, nullptr)), p.wscale[col], bias);
      p.f.y[output_offset(p.f, row, col)] = activate(p.f.activation, pre) * p.f.scale;
    }
  }
}

ElementRef quant_reference_element(const QuantPartView& p, int64_t row, int64_t col) {
  if (quant_input(p.quant)) return finish(p.f, quant_pre(p, row, col), 0.0);
  double mag = 0.0;
  const float acc = float(weight_only_dot(p, row, col, &mag));
  const float pre = weight_only_pre(acc, p.wscale[col], p.f.bias ? p.f.bias + col : nullptr);
  // A kernel's f32 sum errs by the f32 group's bound (with the codes as weights) from the
  // exact sum; the reference's rounded sum by half an ulp of it. Both pass through the scale,
  // then the kernel's two epilogue roundings and the reference's differ by an ulp each.
  const double s = std::fabs(double(p.wscale[col]));
  const double acc_err = 2.0 * double(p.f.k) * kF32Eps * mag + double(p.f.k + 1) * kF32Underflow + ulp(acc);
  const double bound = s * acc_err + ulp(double(acc) * s) + ulp(pre);
  return finish(p.f, pre, bound);
}

DoubleEpilogue qd8_double_epilogue(int32_t acc, float x_scale, float w_scale, const float* bias) {
  const double prod = double(acc) * double(x_scale) * double(w_scale);
  const double d = bias ? prod + double(*bias) : prod;
  return {d, 3.01 * kF32Eps * std::fabs(prod) + kF32Eps * std::fabs(d) + 3.0 * kF32Underflow};
}

double quantization_bound(const QuantPartView& p, const float* w, int64_t ldw, int64_t row, int64_t col) {
  const float* x = p.f.x + row * p.f.ldx;
  const float* wr = w + col * ldw;
  double e_x = 0.0;
  if (quant_input(p.quant)) {
    std::vector<int8_t> own;
    InputRowQuant rq;
    qd8_row(p, row, own, rq);
    e_x = 0.5 * double(rq.scale);
  }
  const double e_w = 0.5 * double(p.wscale[col]);
  double sum_w = 0.0, sum_x = 0.0, mag = 0.0;
  for (int64_t k = 0; k < p.f.k; ++k) {
    sum_w += std::fabs(double(wr[k]));
    sum_x += std::fabs(double(x[k]));
    mag += std::fabs(double(x[k]) * double(wr[k]));
  }
  const double b = p.f.bias ? std::fabs(double(p.f.bias[col])) : 0.0;
  // The quantization terms, a 2^-10 margin for the f32 roundings inside the scales and codes,
  // and the f32 group's rounding bound of the dot product and the epilogue (over magnitudes
  // grown by the quantization error).
  const double quant = (e_x * sum_w + e_w * sum_x + double(p.f.k) * e_x * e_w) * (1.0 + 0x1p-10);
  const double rounding = 2.0 * double(p.f.k + 2) * kF32Eps * (mag + quant + b) + double(p.f.k + 3) * kF32Underflow;
  double bound = quant + rounding;
  bound *= activation_gain(p.f.activation);
  if (transcendental(p.f.activation)) bound += 8.0 * ulp(double(quant_pre(p, row, col))) + ulp(1e-30);
  return std::fabs(double(p.f.scale)) * bound * (1.0 + 0x1p-20) + 0x1p-140;
}

}  // namespace shapejit::ref
