// The prepack and unpack arithmetic of docs/quantized-tables-semantics.md (§5 "Prepack and unpack"),
// one binary32 operation per step in torch's order. Where torch's x86 build relies on
// implementation-defined behaviour (lrintf of NaN, long -> int, f16 of NaN) the behaviour is
// written out, so that every host packs the same bytes.
#include "ref/rowwise_quantize.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "ref/float16.hpp"

namespace shapejit::ref {
namespace {

// Round to the nearest integer, ties to even, in any rounding mode. Values of magnitude >= 2^23,
// infinities and NaN are returned as they are (they have no fraction). The sign of zero is kept.
float round_half_even(float v) {
  if (!(std::fabs(v) < 8388608.0f)) return v;
  const float t = static_cast<float>(static_cast<int32_t>(v));  // truncation, exact below 2^23
  const float frac = v - t;                                      // exact
  float r = t;
  if (frac > 0.5f || (frac == 0.5f && std::fmod(t, 2.0f) != 0.0f)) r = t + 1.0f;
  if (frac < -0.5f || (frac == -0.5f && std::fmod(t, 2.0f) != 0.0f)) r = t - 1.0f;
  return std::copysign(r, v);
}

int qmax_of(RowwiseBits bits) { return (1 << static_cast<int>(bits)) - 1; }

// The scale and its reciprocal for the window [xmin16, xmax], xmin16 already rounded to f16:
// range 0 takes scale 1; a scale that rounds to zero in f16 gets reciprocal 1. The packing then
// also stores scale 1 (`reset_zero_scale`); torch's search scores such a window with scale 0
// (every value dequantizes to xmin16), so the loss keeps it. With the default ratio the two never
// differ (such a window has no value 0.5 or more from its min), with ratio near 1 they can.
struct ScalePair {
  uint16_t scale_bits;
  float scale, inverse;
};

ScalePair nbit_scale(float xmin16, float xmax, RowwiseBits bits, bool reset_zero_scale) {
  const float range = xmax - xmin16;
  const float wanted = range == 0.0f ? 1.0f : range / static_cast<float>(qmax_of(bits));
  ScalePair s;
  s.scale_bits = f16_bits_as_torch(wanted);
  s.scale = f16_to_f32(s.scale_bits);
  s.inverse = s.scale == 0.0f ? 1.0f : 1.0f / s.scale;
  if (reset_zero_scale && (s.scale == 0.0f || std::isinf(s.inverse))) s = {0x3C00u /* f16 1.0 */, 1.0f, 1.0f};
  return s;
}

// sqrt of the sum of squared errors of quantizing x with the window [a, b], as the search scores
// it: codes rounded half to even in float and clamped to [0, qmax] (NaN to 0), not through lrintf.
float window_loss(const float* x, int64_t n, float a, float b, RowwiseBits bits) {
  const float a16 = f16_to_f32(f16_bits_as_torch(a));
  const ScalePair s = nbit_scale(a16, b, bits, /*reset_zero_scale=*/false);
  const float qmax = static_cast<float>(qmax_of(bits));
  float norm = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float r = round_half_even((x[i] - a16) * s.inverse);
    const float upper = (qmax < r) ? qmax : r;   // std::min(r, qmax): NaN stays
    const float q = (0.0f < upper) ? upper : 0.0f;  // std::max(0, .): NaN and -0 become +0
    const float deq = q * s.scale + a16;
    const float err = x[i] - deq;
    norm += err * err;
  }
  return std::sqrt(norm);
}

}  // namespace

int64_t lrintf_x86(float v) {
  if (!(std::fabs(v) < 9223372036854775808.0f)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(round_half_even(v));
}

uint16_t f16_bits_as_torch(float v) {
  if (std::isnan(v)) return static_cast<uint16_t>(((f32_bits(v) >> 16) & 0x8000u) | 0x7E00u);
  return f32_to_f16(v);
}

RowRange vector_min_max(const float* x, int64_t n) {
  if (n == 0) return {0.0f, 0.0f};
  constexpr int64_t kLanes = 8;
  float lo[kLanes], hi[kLanes];
  for (int64_t i = 0; i < kLanes; ++i) lo[i] = std::numeric_limits<float>::max(), hi[i] = -std::numeric_limits<float>::max();
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t c = 0; c < whole; c += kLanes)
    for (int64_t i = 0; i < kLanes; ++i) {
      const float v = x[c + i];
      lo[i] = lo[i] < v ? lo[i] : v;  // _mm256_min_ps: the second operand unless the first is less
      hi[i] = hi[i] > v ? hi[i] : v;
    }
  RowRange r{std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  auto take = [&r](float lo_v, float hi_v) {
    r.min = lo_v < r.min ? lo_v : r.min;  // std::min(r.min, v): v only when less
    r.max = r.max < hi_v ? hi_v : r.max;  // std::max(r.max, v): v only when greater
  };
  for (int64_t i = 0; i < kLanes; ++i) take(lo[i], hi[i]);
  for (int64_t c = whole; c < n; ++c) take(x[c], x[c]);
  return r;
}

RowRange first_min_max(const float* x, int64_t n) {
  if (n == 0) return {0.0f, 0.0f};
  RowRange r{x[0], x[0]};
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] < r.min) r.min = x[i];
    if (r.max < x[i]) r.max = x[i];
  }
  return r;
}

OptimizedRange optimized_range(const float* x, int64_t n, int64_t nbins, float ratio, RowwiseBits bits) {
  const RowRange full = first_min_max(x, n);
  OptimizedRange out{true, full, false, 0.0f, 0.0f};
  const float step = (full.max - full.min) / static_cast<float>(nbins);
  // torch 2.13 keeps min_bins as a float, f32(f32(nbins) * (1 - ratio)) computed in double (1.13
  // truncated it to an int: nbins 60, ratio 0.2 gave 47 where 2.13 has 48).
  const float min_bins =
      static_cast<float>(static_cast<double>(static_cast<float>(nbins)) * (1.0 - static_cast<double>(ratio)));
  const float threshold = min_bins * step;
  float cur_min = full.min, cur_max = full.max;
  float cur_loss = window_loss(x, n, cur_min, cur_max, bits);
  float best_loss = cur_loss;
  while (cur_min + threshold < cur_max) {
    const float loss_up = window_loss(x, n, cur_min + step, cur_max, bits);     // min moved up
    const float loss_down = window_loss(x, n, cur_min, cur_max - step, bits);   // max moved down
    if (cur_loss < loss_up && cur_loss < loss_down && cur_loss < best_loss) {
      best_loss = cur_loss;
      out.range = {cur_min, cur_max};
    }
    // A move that leaves its end where it was repeats the same iteration forever in torch.
    if (loss_up < loss_down) {
      const float next = cur_min + step;
      if (next == cur_min) return {false, out.range, true, cur_min, step};
      cur_min = next;
      cur_loss = loss_up;
    } else {
      const float next = cur_max - step;
      if (next == cur_max) return {false, out.range, false, cur_max, step};
      cur_max = next;
      cur_loss = loss_down;
    }
  }
  return out;
}

void pack_row_8bit(const float* x, int64_t dim, uint8_t* out) {
  const RowRange r = vector_min_max(x, dim);  // torch 2.13 packs through FBGEMM's AVX2 routine
  const float range = r.max - r.min;
  const float scale = range / 255.0f;
  const float inverse = 255.0f / (range + 1e-8f);
  for (int64_t j = 0; j < dim; ++j)  // the low byte of the long, no clamp
    out[j] = static_cast<uint8_t>(static_cast<uint64_t>(lrintf_x86((x[j] - r.min) * inverse)));
  std::memcpy(out + dim, &scale, 4);
  std::memcpy(out + dim + 4, &r.min, 4);
}

void pack_row_nbit(const float* x, int64_t dim, RowwiseBits bits, RowRange r, uint8_t* out) {
  const uint16_t bias_bits = f16_bits_as_torch(r.min);
  const float xmin16 = f16_to_f32(bias_bits);
  const ScalePair s = nbit_scale(xmin16, r.max, bits, /*reset_zero_scale=*/true);
  const int qmax = qmax_of(bits), width = static_cast<int>(bits);
  const int64_t per = codes_per_byte(bits), code_bytes = dim / per;
  std::memset(out, 0, static_cast<size_t>(code_bytes));
  for (int64_t j = 0; j < dim; ++j) {
    // lrintf's long, then its low 32 bits as torch's std::min<int> reads it, then the clamp.
    const int64_t wide = lrintf_x86((x[j] - xmin16) * s.inverse);
    int32_t q = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(wide)));
    q = q < 0 ? 0 : (q > qmax ? qmax : q);
    out[j / per] = static_cast<uint8_t>(out[j / per] | (q << (width * (j % per))));
  }
  std::memcpy(out + code_bytes, &s.scale_bits, 2);
  std::memcpy(out + code_bytes + 2, &bias_bits, 2);
}

void unpack_row(const uint8_t* row, int64_t dim, RowwiseBits bits, float* out) {
  if (bits == RowwiseBits::k8) {
    float scale, bias;
    std::memcpy(&scale, row + dim, 4);
    std::memcpy(&bias, row + dim + 4, 4);
    // FBGEMM's dequantize is one fma (torch 2.13; 1.13 multiplied, then added).
    for (int64_t j = 0; j < dim; ++j) out[j] = std::fmaf(static_cast<float>(row[j]), scale, bias);
    return;
  }
  const int64_t per = codes_per_byte(bits), code_bytes = (dim + per - 1) / per;
  const int width = static_cast<int>(bits), mask = (1 << width) - 1;
  uint16_t scale_bits, bias_bits;
  std::memcpy(&scale_bits, row + code_bytes, 2);
  std::memcpy(&bias_bits, row + code_bytes + 2, 2);
  const float scale = f16_to_f32(scale_bits), bias = f16_to_f32(bias_bits);
  for (int64_t j = 0; j < dim; ++j) {
    const int q = (row[j / per] >> (width * (j % per))) & mask;
    out[j] = std::fmaf(scale, static_cast<float>(q), bias);  // an f16 scale times a code is exact: = mul + add
  }
}

}  // namespace shapejit::ref
