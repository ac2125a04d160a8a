// The contract between the runtime and a generated linear-group (GEMM) microkernel: what it is
// specialised on (GemmKey), the packed-panel layout both sides agree on, and what it receives
// at run time (GemmKernelArgs).
//
// A kernel computes an mr x nc tile per panel, for `panels` consecutive panels of one part:
//   Y[r, c] = act(sum_k X[r, k] * P[k, c] + bias[c]) * scale
// where P is a panel of the packed weight ([k][nv * lanes] floats, then the bias row).
// Quantized kernels (GemmQuant, docs/quantized-linear-semantics.md) read weight codes and a
// per-column scale from the panel, and for qd8 the input as codes with a per-row scale and zero
// point; the layout of their panels is written below, next to gemm_panel_bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "jit/isa.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

/// How a kernel addresses its output.
enum class GemmStore : int {
  kRowMajor = 0,  ///< Y[r, c] at c_base + r * ldc + c * 4 (bytes)
  kTable = 1,     ///< Y[r, c] at c_base + row_off[r] + col_off[c / lanes] + (c % lanes) * 4
};

/// Floats per vector register (jit/isa.hpp: 16 for AVX-512, 8 for AVX2, 4 for NEON).
constexpr int64_t gemm_lanes(Isa isa) { return isa_traits(isa).lanes; }


/// The operands of a kernel (docs/quantized-linear-semantics.md).
enum class GemmQuant : int {
  kF32 = 0,      ///< f32 X, f32 panels
  kQd8Qc8w = 1,  ///< X as biased u8 codes (per row: scale, zero point); int8 weight codes per
                 ///< column with a per-column scale; the int32 dot product is exact
  kQd8Qc4w = 2,  ///< as kQd8Qc8w with int4 weight codes, two per byte
  kF32Qc8w = 3,  ///< f32 X; int8 weight codes converted to f32 in the kernel (weight-only)
  kF32Qc4w = 4,  ///< f32 X; int4 weight codes, two per byte (weight-only)
};

/// Largest K of a qd8 kernel: 65536 * 255 * 128 < 2^31 keeps its int32 accumulator exact (the
/// runtime's validation refuses longer qd8 parts with this constant; ref/ keeps its own).
inline constexpr int64_t kGemmQd8MaxK = 65536;

/// True for the forms whose input is quantized per row (an exact int32 accumulator).
constexpr bool gemm_quantized_input(GemmQuant q) { return q == GemmQuant::kQd8Qc8w || q == GemmQuant::kQd8Qc4w; }
/// True for the forms with int4 weight codes.
constexpr bool gemm_int4_weights(GemmQuant q) { return q == GemmQuant::kQd8Qc4w || q == GemmQuant::kF32Qc4w; }

/// x86 qd8-qc8w without VNNI on AVX2: the signed codes q enter vpmaddubsw as |q| (unsigned,
/// <= 128) times sign(q) * code (vpsignb, in [-127, 127]), exact in 16 bits
/// (jit/x86/gemm_quant_ops.hpp). AVX-512BW has no vpsignb: it widens to 16 bits instead.
constexpr bool gemm_x86_sign_step(Isa isa, GemmQuant quant, bool dot) {
  return isa == Isa::kAvx2 && quant == GemmQuant::kQd8Qc8w && !dot;
}

/// True for the qd8 kernels that read X as the signed codes q (int8) rather than u = q + 128:
/// the sign step, which needs q and |q| and never u (GemmKernelArgs::a).
constexpr bool gemm_signed_input(Isa isa, GemmQuant quant, bool dot) { return gemm_x86_sign_step(isa, quant, dot); }

/// x86: the vector registers one k step of a kernel holds besides its accumulators.
struct GemmStepRegisters {
  int weights;  ///< the panel row's weights: nv, or 2 nv when each vector is unpacked into two
                ///< halves (int8 pairs widened to 16 bits; the two nibbles of int4 codes)
  int temps;    ///< input broadcasts and products
};
/// The x86 rule, per form: f32 and weight-only (codes converted to f32 in place): nv weights
/// and two broadcasts; qd8-qc8w by sign (gemm_x86_sign_step): nv weights, q, |q| and one
/// product; qd8-qc8w widened to 16 bits (vpmaddwd): 2 nv weight halves, the input's two word
/// halves and one product; qd8-qc4w without `dot` (vpmaddubsw, exact for int4): 2 nv nibble
/// vectors, two input broadcasts and two products; qd8 with vpdpbusd (`dot`): nv weights (2 nv
/// for int4: the two nibbles) and two input broadcasts.
GemmStepRegisters gemm_x86_step_registers(Isa isa, int nv, GemmQuant quant, bool dot);

/// Accumulator registers a kernel of `nv` vectors per panel may use on `isa` for `quant` (and
/// `dot`): x86: what gemm_x86_step_registers leaves, at most 24; NEON: what the nv weights
/// leave, one X register per row besides (the same for every form until the NEON quantized
/// emitter states its own). The one register budget of gemm_max_mr and the emitters'
/// partial-sum sets.
int gemm_accumulator_budget(Isa isa, int nv, GemmQuant quant = GemmQuant::kF32, bool dot = false);

/// Largest row count a kernel of `nv` vectors per panel may have on `isa` for `quant` (and
/// `dot`): mr * nv accumulators within gemm_accumulator_budget (NEON: one X register per row
/// besides); at most 8 rows.
int gemm_max_mr(Isa isa, int nv, GemmQuant quant = GemmQuant::kF32, bool dot = false);

struct GemmKey;
/// The k_split a kernel of `key` (its k_split ignored) gets when its part's weights stream from
/// DRAM: the ISA's gemm_stream_split, fewer when the accumulators of that many partial sums
/// would not fit the form's budget, 1 (no split) when fewer than two fit or K is too short for
/// the spans to be worth it.
int gemm_stream_split(const GemmKey& key);

/// Everything generated code is specialised on.
struct GemmKey {
  Isa isa = Isa::kAvx512;
  int mr = 8;           ///< rows of X computed per call (1..gemm_max_mr)
  int nc = 48;          ///< valid columns per panel; the panel holds nv() = ceil(nc / lanes) vectors
  int64_t k = 1;        ///< reduction length K >= 1
  bool bias = false;    ///< the panel carries a bias row, added before the activation
  Activation act = Activation::kNone;
  bool scale = false;   ///< multiply by GemmKernelArgs::scale after the activation
  GemmStore store = GemmStore::kRowMajor;
  int prefetch = 0;     ///< software prefetch of the weight stream, bytes ahead (0 = none)
  GemmQuant quant = GemmQuant::kF32;
  bool dot = false;     ///< qd8 forms: use the ISA's 4-way int8 dot product (AVX-512 VNNI
                        ///< vpdpbusd, NEON sdot); false: widen to 16 bits (vpmaddwd, smlal)
  int k_split = 1;      ///< > 1: K in k_split contiguous spans, each its own partial sum, read
                        ///< side by side (that many weight streams: a single stream does not
                        ///< reach DRAM bandwidth; streamed decode parts); 1: the partial-sum
                        ///< sets rotate over consecutive k steps

  int64_t lanes() const { return gemm_lanes(isa); }
  /// Vectors per panel row.
  int nv() const { return int((nc + lanes() - 1) / lanes()); }
  /// Valid lanes of the last vector (0 = full).
  int tail() const { return int(nc % lanes()); }
  bool operator==(const GemmKey&) const = default;
  /// Canonical name, e.g. `gemm.avx512.8x48.k768.bias.gelu.scale.tab.pf512.ks4` (quantized forms
  /// add `.qd8qc8w`, `.qd8qc4w`, `.f32qc8w` or `.f32qc4w` after the k, and `.dot` at the end).
  std::string name() const;
};

/// Inverse of GemmKey::name(); nullopt when the text is not a canonical name.
std::optional<GemmKey> parse_gemm_key(std::string_view name);

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const noexcept;
};

/// Floats of one panel row (nv vectors, zero-padded past nc): W, the panel's column count.
inline int64_t gemm_panel_width(const GemmKey& key) { return key.nv() * key.lanes(); }

/// AVX-512 f32-qc4w panels hold each column's codes as dword planes of 8 k (the layouts
/// below): one load gives 16 columns x 8 k, and vpermps, which reads bits 0-3 of each index
/// lane, looks up a plane after a shift, with no widening step (the byte-row layout of the
/// other ISAs spent a vpmovzxbd, on the same ports as vpermps, per 32 codes).
inline bool gemm_int4_planes(const GemmKey& key) { return key.quant == GemmQuant::kF32Qc4w && key.isa == Isa::kAvx512; }

/// K rounded up to what one step of the kernel's k loop consumes: 4 for kQd8Qc8w (a 4-byte
/// group per column, as vpdpbusd and sdot take it), 8 for kQd8Qc4w and for int4 planes, 2 for
/// the other kF32Qc4w kernels, else 1. Codes past k are zero in the panels, so the padded steps
/// add nothing.
inline int64_t gemm_k_group(const GemmKey& key) {
  switch (key.quant) {
    case GemmQuant::kQd8Qc8w: return 4;
    case GemmQuant::kQd8Qc4w: return 8;
    case GemmQuant::kF32Qc4w: return gemm_int4_planes(key) ? 8 : 2;
    default: return 1;
  }
}
inline int64_t gemm_padded_k(const GemmKey& key) {
  const int64_t g = gemm_k_group(key);
  return (key.k + g - 1) / g * g;
}

/// x86 AVX2 qd8 kernels whose k loop's int32 sum (of q * code by sign, u * code otherwise) is at
/// most 2^24 in magnitude, so exact in f32: kp <= 1032 for int8 codes by sign, kp <= 8224 for
/// int4 codes. Their epilogue subtracts x_zero * colsum in f32 with one FMA rather than with an
/// int32 vpmulld, which rounds the same exact accumulator the same way (jit/x86/gemm_quant_ops.cpp).
inline bool gemm_x86_exact_f32_correction(const GemmKey& key) {
  if (key.isa != Isa::kAvx2 || !gemm_quantized_input(key.quant) || key.dot) return false;
  const int64_t input_max = gemm_signed_input(key.isa, key.quant, key.dot) ? 128 : 255;
  const int64_t code_max = gemm_int4_weights(key.quant) ? 8 : 127;
  return gemm_padded_k(key) * input_max * code_max <= (int64_t(1) << 24);
}

// Panel layouts, W = gemm_panel_width(key), kp = gemm_padded_k(key); columns past nc and rows
// past k hold zero codes, zero sums, zero scales and zero bias.
//   kF32     k rows of W floats (row kk = W[c, kk] for each column c), then the bias row.
//   kQd8Qc8w codes: for each group g < kp/4, for each column c, the 4 bytes W[c, 4g .. 4g+3];
//            then int32 colsum[W] (sum over kk < k of the column's codes), f32 wscale[W],
//            and f32 bias[W] when key.bias.
//   kQd8Qc4w codes: for each group g < kp/8, for each column c, 4 bytes; byte j holds code
//            W[c, 8g+j] in its low nibble and W[c, 8g+4+j] in its high nibble (two's
//            complement nibbles); then colsum, wscale, bias as kQd8Qc8w.
//   kF32Qc8w codes: k rows of W bytes (row kk: the code of W[c, kk] for each column c); then
//            f32 wscale[W] and f32 bias[W] when key.bias.
//   kF32Qc4w codes: kp/2 rows of W bytes; byte (j, c) holds W[c, 2j] in its low nibble and
//            W[c, 2j+1] in its high nibble; then wscale and bias as kF32Qc8w. With int4 planes
//            (gemm_int4_planes) instead: for each group g < kp/8, for each column c, a
//            little-endian dword whose bits 4t .. 4t+3 hold W[c, 8g+t] (the same bytes).
// The parts follow each other without padding; the panel is rounded up to 64 bytes.

/// Bytes of the codes (or, for kF32, the k float rows) at the start of a panel.
inline int64_t gemm_panel_code_bytes(const GemmKey& key) {
  const int64_t w = gemm_panel_width(key);
  switch (key.quant) {
    case GemmQuant::kF32: return key.k * w * 4;
    case GemmQuant::kQd8Qc8w: return gemm_padded_k(key) * w;
    case GemmQuant::kQd8Qc4w: return gemm_padded_k(key) * w / 2;
    case GemmQuant::kF32Qc8w: return key.k * w;
    case GemmQuant::kF32Qc4w: return gemm_padded_k(key) * w / 2;
  }
  return 0;
}

/// Byte offsets inside a panel of the per-column vectors that follow the codes (-1 = absent).
struct GemmPanelOffsets {
  int64_t colsum = -1;  ///< int32[W], qd8 forms
  int64_t wscale = -1;  ///< f32[W], quantized forms
  int64_t bias = -1;    ///< f32[W], when key.bias
  int64_t end = 0;      ///< bytes used, before the rounding to 64
};
inline GemmPanelOffsets gemm_panel_offsets(const GemmKey& key) {
  const int64_t row = gemm_panel_width(key) * 4;
  GemmPanelOffsets o;
  int64_t at = gemm_panel_code_bytes(key);
  if (gemm_quantized_input(key.quant)) o.colsum = at, at += row;
  if (key.quant != GemmQuant::kF32) o.wscale = at, at += row;
  if (key.bias) o.bias = at, at += row;
  o.end = at;
  return o;
}

/// Bytes of one packed panel (gemm_panel_offsets().end rounded up to 64 bytes, so every panel
/// starts on a cache line). Packing and the emitters both use this, so consecutive panels are
/// exactly this far apart.
inline int64_t gemm_panel_bytes(const GemmKey& key) { return (gemm_panel_offsets(key).end + 63) / 64 * 64; }

/// Run-time arguments of one kernel call: rows [row0, row0 + mr) of X against `panels`
/// consecutive panels.
struct GemmKernelArgs {
  const float* a;          ///< X[row0, 0]
  int64_t lda;             ///< bytes between rows of X
  const float* b;          ///< the first panel (64-byte aligned)
  int64_t panels;          ///< panels to compute, >= 1 (consecutive, gemm_panel_bytes apart)
  float* c;                ///< kRowMajor: Y[row0, col0]; kTable: the output's base
  int64_t ldc;             ///< kRowMajor: bytes between rows of Y
  const int64_t* row_off;  ///< kTable: byte offsets of rows row0 .. row0 + mr - 1
  const int64_t* col_off;  ///< kTable: byte offsets of the column vectors, the first panel's first
  float scale;             ///< read when key.scale
  // Appended for the qd8 forms (ignored by the others): per row r of the block,
  //   acc[r, c] = sum over kk < kp of u[r, kk] * code[c, kk]  -  x_zero[r] * colsum[c]
  // (exact in int32), with `a` pointing at u8 codes u = q + 128 (each row readable to kp bytes,
  // `lda` bytes apart; gemm_signed_input kernels: at the int8 codes q = u - 128 instead, any
  // byte past k with a zero code) and x_zero[r] = z[r] + 128, the row's zero point biased;
  // then y = float(acc) * (x_scale[r] * wscale[c]) + bias[c], each product and the sum rounded
  // to f32 on its own (no fused multiply-add), then the activation and the scale.
  const float* x_scale;    ///< per-row scales of rows row0 .. row0 + mr - 1
  const int32_t* x_zero;   ///< their biased zero points
};
static_assert(std::is_standard_layout_v<GemmKernelArgs>);

/// Every field zero, defined in another file (gemm_key.cpp) so that callers copy it: GCC
/// compiled `GemmKernelArgs args{}` to `rep stosq`, whose start-up cost on Intel was 15 % of a
/// tiny linear group's call (six zeroed structs a call); copying this blank takes a few
/// vector moves.
extern const GemmKernelArgs kBlankGemmArgs;

/// Signature of every generated GEMM kernel.
using GemmKernelFn = void (*)(const GemmKernelArgs*);

}  // namespace shapejit::jit
