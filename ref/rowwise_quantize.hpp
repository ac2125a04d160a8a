// Rowwise quantization of one table row, bit for bit as torch 1.13's
// embedding_bag_{byte,4bit,2bit}_prepack and _unpack compute it (docs/quantized-tables-semantics.md,
// §5 "Prepack and unpack"). Scalar and unvalidated: runtime/embag/rowwise.cpp checks every argument first.
// Every float operation here is one IEEE binary32 operation; the build passes -ffp-contract=off,
// so no a*b+c is fused (torch's CPU build does not fuse these either).
#pragma once

#include <cstdint>

namespace shapejit::ref {

/// Bits per code of a quantized format: 8, 4 or 2.
enum class RowwiseBits : int { k8 = 8, k4 = 4, k2 = 2 };

/// Codes per byte: 1, 2 or 4.
inline int64_t codes_per_byte(RowwiseBits bits) { return 8 / static_cast<int>(bits); }

/// Bytes of one packed row of `dim` values: the code bytes, then 8 (f32 scale and bias) for
/// 8-bit or 4 (f16 scale and bias) for 4/2-bit. The caller guarantees no overflow.
inline int64_t rowwise_row_bytes(RowwiseBits bits, int64_t dim) {
  const int64_t per = codes_per_byte(bits);
  return (dim + per - 1) / per + (bits == RowwiseBits::k8 ? 8 : 4);
}

/// The row's [min, max] a packing starts from.
struct RowRange {
  float min, max;
};

/// The first minimum and first maximum of x[0, n) as std::min_element / std::max_element pick
/// them (strict `<` scans, so a NaN is chosen only when it is x[0]). An empty row gives [0, 0].
RowRange first_min_max(const float* x, int64_t n);
/// The row's minimum and maximum as torch 2.13's plain prepack (FBGEMM's AVX2 quantize) finds
/// them: 8 lanes from FLT_MAX / -FLT_MAX taking columns i, i + 8, ... of the whole vectors by
/// `lane < x ? lane : x` (max: `lane > x ? lane : x`), then std::min / std::max over the lanes
/// and the remaining columns. Differs from first_min_max only on signed zeros and NaN. n = 0
/// gives {0, 0} (shapejit's choice for D = 0).
RowRange vector_min_max(const float* x, int64_t n);

/// What torch's choose_qparams_optimized search gives for one row, or why it has no answer.
struct OptimizedRange {
  bool terminates;  ///< false: torch 1.13 would loop forever on this row
  RowRange range;   ///< the chosen [min, max] when terminates
  // When !terminates: the end the search tried to move, its value, and the step that left it
  // unchanged (for the error message).
  bool stuck_end_is_min;
  float stuck_value, step;
};

/// torch.choose_qparams_optimized(row, n, nbins, ratio, bits) for a 4/2-bit row: a greedy search
/// that narrows [min, max] one step at a time and keeps the window of lowest quantization loss.
/// Needs 1 <= nbins <= INT32_MAX and 0 <= ratio <= 1 (checked by the caller).
OptimizedRange optimized_range(const float* x, int64_t n, int64_t nbins, float ratio, RowwiseBits bits);

/// Packs x[0, dim) into an 8-bit row (dim + 8 bytes at out).
void pack_row_8bit(const float* x, int64_t dim, uint8_t* out);

/// Packs x[0, dim) into a 4/2-bit row (rowwise_row_bytes bytes at out) from the range `r`
/// (first_min_max or optimized_range). dim is a multiple of codes_per_byte(bits).
void pack_row_nbit(const float* x, int64_t dim, RowwiseBits bits, RowRange r, uint8_t* out);

/// Dequantizes one packed row to out[0, dim): f32(f32(code * scale) + bias).
void unpack_row(const uint8_t* row, int64_t dim, RowwiseBits bits, float* out);

/// lrintf as torch's x86-64 build executes it (cvtss2si): round half to even, and INT64_MIN for
/// NaN and for |v| >= 2^63, on every host and in every rounding mode.
int64_t lrintf_x86(float v);

/// f32 -> f16 bits as c10::Half stores them: round to nearest even, overflow to +-inf, and every
/// NaN becomes the sign with 0x7E00 (no payload), unlike ref/float16.hpp which keeps payload bits.
uint16_t f16_bits_as_torch(float v);

}  // namespace shapejit::ref
