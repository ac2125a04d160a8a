// Reading one value of one table row, for every table dtype (quantized-tables-semantics.md, B1):
// f32, f16 and bf16 elements widened exactly to f32, and the codes, scale and bias of the
// rowwise-quantized rows. Shared by the reference and the generic kernel; the arithmetic that
// combines the values lives in each of them.
//
// Every load goes through memcpy, so no table address needs any alignment: a Q8 row keeps its
// f32 scale at byte D (any D), a Q4/Q2 row its f16 scale at byte ceil(D/2) / ceil(D/4).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ref/float16.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::ref {

// The reference's own copy of the dtype facts the engine reads from jit/dtype_traits.hpp, kept on
// purpose: the reference is the independent oracle the kernels and that table are tested against,
// so it must not share the table it checks.
inline bool is_quantized_table(int64_t t) { return t == SHAPEJIT_Q8 || t == SHAPEJIT_Q4 || t == SHAPEJIT_Q2; }
inline bool is_float_dtype(int64_t t) { return t == SHAPEJIT_F32 || t == SHAPEJIT_F16 || t == SHAPEJIT_BF16; }

/// Bits per code of a quantized table (8, 4 or 2).
inline int quantized_bits(int64_t t) { return t == SHAPEJIT_Q8 ? 8 : t == SHAPEJIT_Q4 ? 4 : 2; }

/// Bytes of one float element (f32: 4, f16/bf16: 2).
inline int64_t float_element_bytes(int64_t t) { return t == SHAPEJIT_F32 ? 4 : 2; }

/// Bytes a row's values occupy: dim elements of a float table, or the packed quantized row
/// (codes, then scale and bias). -1 for another dtype or dim < 0; the caller bounds dim so
/// that the product fits.
inline int64_t table_row_bytes(int64_t t, int64_t dim) {
  if (dim < 0) return -1;
  if (is_float_dtype(t)) return dim * float_element_bytes(t);
  switch (t) {
    case SHAPEJIT_Q8: return dim + 8;
    case SHAPEJIT_Q4: return (dim + 1) / 2 + 4;
    case SHAPEJIT_Q2: return (dim + 3) / 4 + 4;
  }
  return -1;
}

inline float load_f32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

/// Element j of a float-table row, widened exactly to f32.
template <int64_t kTable>
inline float float_element(const unsigned char* row, int64_t j) {
  if constexpr (kTable == SHAPEJIT_F32) return load_f32(row + 4 * j);
  else if constexpr (kTable == SHAPEJIT_F16) return f16_to_f32(load_u16(row + 2 * j));
  else return bf16_to_f32(load_u16(row + 2 * j));
}

/// A rowwise-quantized row: D codes of kBits bits, then its scale and bias widened to f32.
template <int kBits>
struct QuantizedRow {
  const unsigned char* codes;
  float scale, bias;

  /// Code j: byte j / (8 / kBits), bits from kBits * (j % (8 / kBits)) (low bits first).
  uint32_t code(int64_t j) const {
    if constexpr (kBits == 8) return codes[j];
    constexpr int kPerByte = 8 / kBits;
    const int shift = kBits * int(j % kPerByte);
    return (uint32_t(codes[j / kPerByte]) >> shift) & ((1u << kBits) - 1u);
  }
};

/// Decodes row `row` of a table of `dim` columns: Q8 stores f32 scale and bias at bytes D and
/// D + 4, Q4/Q2 store f16 ones right after the ceil(D * bits / 8) code bytes.
template <int kBits>
inline QuantizedRow<kBits> quantized_row(const unsigned char* row, int64_t dim) {
  if constexpr (kBits == 8) return {row, load_f32(row + dim), load_f32(row + dim + 4)};
  constexpr int64_t kPerByte = 8 / kBits;
  const unsigned char* trailer = row + (dim + kPerByte - 1) / kPerByte;
  return {row, f16_to_f32(load_u16(trailer)), f16_to_f32(load_u16(trailer + 2))};
}

/// One accumulation step of a quantized bag (rule B4, torch 2.13 / FBGEMM): the weighted bias is
/// added first, then the scaled code by a single-precision fma. `s` and `b` are f32(w * scale)
/// and f32(w * bias). The same step for every bit width, weighted or not.
inline float quantized_step(float acc, float s, float b, uint32_t q) {
  const float t = acc + b;
  return std::fmaf(s, static_cast<float>(q), t);
}

/// The dequantized value of a code, as the mean and max rules define it (beyond-ATen 2): the
/// step above from +0.0 with weight 1, i.e. fmaf(scale, q, 0 + bias).
inline float dequantized_value(float scale, float bias, uint32_t q) { return quantized_step(0.0f, scale, bias, q); }

/// Rounds an f32 result to the output dtype (f32: unchanged) and stores it as element i; bf16 by
/// f32_to_bf16_half_up when `half_up` (rule H6's sums and maxima on the FBGEMM path).
inline void store_float_output(void* out, int64_t out_dtype, int64_t i, float v, bool half_up = false) {
  if (out_dtype == SHAPEJIT_F32) {
    static_cast<float*>(out)[i] = v;
  } else {
    const uint16_t h = out_dtype == SHAPEJIT_F16 ? f32_to_f16(v) : half_up ? f32_to_bf16_half_up(v) : f32_to_bf16(v);
    static_cast<uint16_t*>(out)[i] = h;
  }
}

// `aten_loop`: the call follows the arithmetic of ATen's own loop, which torch runs with
// padding_idx and for a column-strided table or strided weights (ref::aten_loop_arithmetic),
// instead of torch 2.x's FBGEMM path.

/// Rule H6: a bf16 table on torch 2.x's FBGEMM path fuses weighted terms and rounds its sums to
/// bf16 by f32_to_bf16_half_up; in ATen's own loop it rounds products to f32, then adds, and
/// rounds sums to nearest even. Every other table, and the mean's quotient, round to nearest even.
inline bool bf16_fbgemm_path(int64_t table, bool aten_loop) { return table == SHAPEJIT_BF16 && !aten_loop; }

/// Whether a weighted sum over a float table fuses each term, acc = fmaf(w, x, acc), as torch
/// 2.x's FBGEMM kernel does, or rounds the product first, acc = f32(acc + f32(w * x)), as ATen's
/// own loop does (embedding-bag-semantics.md, "Weighted sums and ATen's two paths"). A product
/// of two f16 values is exact in f32, so both forms agree there and f16 counts as fused.
inline bool weighted_terms_fused(int64_t table, bool aten_loop) { return !aten_loop || table == SHAPEJIT_F16; }

/// Rounds a bf16 table's sum to bf16 as rule H6 says (as f32 -> f32).
inline float round_bf16_sum(bool fbgemm_path, float v) {
  return fbgemm_path ? round_to_bf16_half_up(v) : round_to_bf16(v);
}

/// The spec's output rounding as f32 -> f32 (rnd16 / rndbf; identity for f32).
inline float round_to_output(int64_t out_dtype, float v) {
  if (out_dtype == SHAPEJIT_F16) return round_to_f16(v);
  if (out_dtype == SHAPEJIT_BF16) return round_to_bf16(v);
  return v;
}

/// A per-sample weight of dtype t (f32, f16 or bf16) widened exactly to f32.
inline float load_weight(const void* psw, int64_t t, int64_t i) {
  const unsigned char* p = static_cast<const unsigned char*>(psw);
  if (t == SHAPEJIT_F32) return load_f32(p + 4 * i);
  const uint16_t h = load_u16(p + 2 * i);
  return t == SHAPEJIT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

}  // namespace shapejit::ref
