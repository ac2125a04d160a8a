// IEEE binary16 and bfloat16 conversions, written out in integer arithmetic so they give the
// same bits on every host and compiler (no dependence on F16C, _Float16 or the rounding mode).
// Rounding is to nearest, ties to even (the spec's rnd16 and rndbf, quantized-tables-semantics.md),
// except f32_to_bf16_half_up, torch 2.x's FBGEMM rounding of bf16 sums (rule H6).
#pragma once

#include <cstdint>
#include <cstring>

namespace shapejit::ref {

inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// binary16 -> f32, exact (subnormals, infinities and NaN payloads kept).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | man << 13);  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | (exp + 112) << 23 | man << 13);
  if (man == 0) return f32_from_bits(sign);                                // +-0
  // Subnormal: man * 2^-24, exact in f32.
  const float magnitude = float(man) * 5.9604644775390625e-8f;
  return f32_from_bits(sign | f32_bits(magnitude));
}

/// f32 -> binary16, round to nearest even; overflow gives +-inf, NaN stays NaN (quiet).
inline uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // NaN
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                  // normal binary16 result
    const uint32_t mant_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xFFFu + mant_odd;       // RNE on the 13 dropped bits
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal or zero: the value in units of 2^-24, rounded to nearest even.
  const int exp = int(abs >> 23);
  if (exp < 102) return sign;  // below half of the smallest subnormal (2^-25): +-0
  const uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
  const int shift = 126 - exp;  // value = man * 2^(exp - 150); units of 2^-24 -> shift by 126 - exp
  const uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
  const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  return uint16_t(sign | r);
}

/// bfloat16 -> f32, exact.
inline float bf16_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

/// f32 -> bfloat16, round to nearest even; NaN becomes a quiet NaN of the same sign.
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/// f32 -> bfloat16 as FBGEMM's embedding kernels round (rule H6, rndbf_up): add 0x8000 to the bits
/// and keep the high half, so ties go away from zero. No NaN case: the NaNs a sum produces (a
/// widened bf16 NaN, quietened, or the default NaN) have zero low halves and come out unchanged.
inline uint16_t f32_to_bf16_half_up(float x) { return uint16_t((f32_bits(x) + 0x8000u) >> 16); }

/// The spec's rnd16 / rndbf as f32 -> f32: the value the rounded half holds.
inline float round_to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
inline float round_to_bf16_half_up(float x) { return bf16_to_f32(f32_to_bf16_half_up(x)); }

}  // namespace shapejit::ref
