// The reference sums exact double products in ascending k, so its only roundings are the
// double additions (far below f32 precision) and the single f32 rounding of each epilogue step.
#include "ref/linear_group.hpp"

#include <cmath>

namespace shapejit::ref {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kF32Eps = 1.0 / 16777216.0;  // 2^-24, the unit roundoff of f32
constexpr double kF32Underflow = 0x1p-150;    // half the smallest f32 denormal: absolute rounding error

// Spacing of f32 values at |v| (the smallest denormal spacing below FLT_MIN).
double ulp(float v) {
  const float a = std::fabs(v);
  if (!(a >= 1.17549435e-38f)) return std::ldexp(1.0, -149);
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

// Pre-activation Y[row, col] before rounding: the double sum with bias, and sum |x w| + |b|.
template <bool kWantMagnitude>
double dot(const LinearPartView& p, int64_t row, int64_t col, double* magnitude) {
  const float* x = p.x + row * p.ldx;
  const float* w = p.w + col * p.ldw;
  double acc = 0.0, mag = 0.0;
  for (int64_t k = 0; k < p.k; ++k) {
    const double t = double(x[k]) * double(w[k]);  // exact: 24 + 24 bits fit in 53
    acc += t;
    if constexpr (kWantMagnitude) mag += std::fabs(t);
  }
  if (p.bias) {
    acc += double(p.bias[col]);
    if constexpr (kWantMagnitude) mag += std::fabs(double(p.bias[col]));
  }
  if constexpr (kWantMagnitude) *magnitude = mag;
  return acc;
}

// What an f32 evaluation of the activation may add: one ulp of its result, and for the
// transcendental ones a few ulps of the argument, since their intermediate values (z, 1 + erf)
// are of the argument's size. ATen 1.13's own f32 kernels measure up to 4.65 ulp(z) for gelu,
// 1.92 for gelu_tanh and 1.46 for silu (largest near |z| < 1, where gelu(z) ~ z / 2).
double activation_slack(shapejit_activation activation, float pre, float act) {
  const bool transcendental = activation != SHAPEJIT_ACTIVATION_NONE && activation != SHAPEJIT_ACTIVATION_RELU;
  return ulp(act) + (transcendental ? 8.0 * ulp(pre) : 0.0);
}

float epilogue(const LinearPartView& p, float pre) { return activate(p.activation, pre) * p.scale; }

}  // namespace

float activate(shapejit_activation activation, float pre) {
  const double z = pre;
  switch (activation) {
    case SHAPEJIT_ACTIVATION_NONE:
      return pre;
    case SHAPEJIT_ACTIVATION_RELU:
      return std::isnan(pre) ? pre : (pre > 0.0f ? pre : 0.0f);
    case SHAPEJIT_ACTIVATION_GELU:
      // 0.5 z (1 + erf(z / sqrt 2)) written with erfc, which keeps the far negative tail accurate.
      return float(0.5 * z * std::erfc(-z * kInvSqrt2));
    case SHAPEJIT_ACTIVATION_GELU_TANH: {
      // 0.5 z (1 + tanh(u)) == z / (1 + exp(-2u)), without the cancellation of 1 + tanh(u).
      const double u = kSqrt2OverPi * (z + 0.044715 * z * z * z);
      return float(z / (1.0 + std::exp(-2.0 * u)));
    }
    case SHAPEJIT_ACTIVATION_SILU:
      return float(z / (1.0 + std::exp(-z)));
  }
  return pre;  // unreachable for validated arguments
}

double activation_gain(shapejit_activation activation) {
  switch (activation) {
    case SHAPEJIT_ACTIVATION_NONE:
    case SHAPEJIT_ACTIVATION_RELU: return 1.0;
    case SHAPEJIT_ACTIVATION_GELU:       // max |Phi(z) + z phi(z)| = 1.1289 at z = sqrt 2
    case SHAPEJIT_ACTIVATION_GELU_TANH:  // its tanh approximation peaks just as high
      return 1.15;
    case SHAPEJIT_ACTIVATION_SILU: return 1.1;  // max |silu'| = 1.0998
  }
  return 1.15;
}

int64_t output_offset(const LinearPartView& p, int64_t row, int64_t col) {
  if (p.layout == SHAPEJIT_LAYOUT_ROW_MAJOR) return row * p.ldy + col;
  const int64_t dh = p.n / p.heads, h = col / dh, d = col % dh;
  const int64_t seq = p.m / p.batch;
  const bool seq_first = p.layout == SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST;
  const int64_t l = seq_first ? row / p.batch : row % seq;
  const int64_t b = seq_first ? row % p.batch : row / seq;
  return ((b * p.heads + h) * seq + l) * dh + d;
}

ElementRef reference_element(const LinearPartView& p, int64_t row, int64_t col) {
  double mag = 0.0;
  const float pre = float(dot<true>(p, row, col, &mag));
  const float act = activate(p.activation, pre);
  const float value = act * p.scale;
  // Below FLT_MIN an f32 rounding errs by up to 2^-150 absolutely, whatever the magnitudes, so
  // each of the k + 1 roundings (products or fused adds, and the bias) adds that much.
  double bound = 2.0 * double(p.k) * kF32Eps * mag + double(p.k + 1) * kF32Underflow + ulp(pre);
  if (p.activation != SHAPEJIT_ACTIVATION_NONE) bound = activation_gain(p.activation) * bound + activation_slack(p.activation, pre, act);
  // A zero scale makes every finite activated value exactly +-0, even where the bound before it
  // is infinite (0 * inf would make the bound NaN and reject the exact answer).
  if (p.scale != 1.0f) bound = (p.scale == 0.0f ? 0.0 : std::fabs(double(p.scale)) * bound) + ulp(value);
  return {value, bound};
}

bool accepted(float y, float ref, double bound) {
  if (std::isnan(ref)) return std::isnan(y);
  if (std::isinf(ref)) return y == ref;
  if (!std::isfinite(y)) return false;
  return std::fabs(double(y) - double(ref)) <= bound;
}

void linear_part(const LinearPartView& p) {
  for (int64_t row = 0; row < p.m; ++row)
    for (int64_t col = 0; col < p.n; ++col)
      p.y[output_offset(p, row, col)] = epilogue(p, float(dot<false>(p, row, col, nullptr)));
}

// The runtime resolves parts in one place too (rt::resolve_linear_part). This copy is kept on
// purpose: the reference is the independent oracle the runtime is tested against, and ref/ knows
// nothing of runtime/ (design.md), so a slip in the runtime's resolution cannot hide here.
LinearPartView resolve_part(const shapejit_linear_group_desc& desc, int64_t p, const shapejit_linear_group_io& io) {
  const shapejit_linear_part_desc& d = desc.parts[p];
  LinearPartView v;
  v.x = io.x;
  v.m = io.m;
  v.k = io.k;
  v.ldx = io.ldx;
  if (desc.form == SHAPEJIT_WEIGHTS_PACKED) {
    v.w = desc.weight + d.row_begin * desc.weight_stride;
    v.ldw = desc.weight_stride;
  } else {
    v.w = d.weight;
    v.ldw = d.weight_stride;
  }
  v.n = d.rows;
  v.bias = desc.bias ? desc.bias + d.row_begin : nullptr;
  v.activation = d.activation;
  v.scale = d.has_scale ? d.scale : 1.0f;
  v.layout = d.layout;
  v.heads = d.layout == SHAPEJIT_LAYOUT_ROW_MAJOR ? 1 : d.heads;
  v.batch = io.batch;
  v.y = io.y;
  v.ldy = io.ldy;
  return v;
}

void linear_group(const shapejit_linear_group_desc& desc, const shapejit_linear_group_io* io) {
  for (int64_t p = 0; p < desc.num_parts; ++p) linear_part(resolve_part(desc, p, io[p]));
}

}  // namespace shapejit::ref
