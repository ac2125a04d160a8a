// x86 primitives of the quantized GEMM forms (GemmQuant, docs/quantized-linear-semantics.md): the
// k step of each form (unpacking the panel's codes in registers, the integer or f32 products),
// how partial-sum sets combine, and the epilogue that turns the accumulators into the f32 value
// before the activation. The kernel body around them (panel loop, k loop, activation, scale,
// stores) is the GEMM skeleton's (jit/gemm_skeleton.hpp), so those are written once; the x86
// back end (jit/x86/gemm_emitter_quant.cpp) lends these primitives its registers.
//
// qd8-qc8w never feeds vpmaddubsw the biased input u: its u8 x s8 pair sums saturate at 16 bits
// (255 * 127 * 2 does not fit), and the contract's int32 accumulator is exact. Instead:
//   - by sign (AVX2, gemm_x86_sign_step; its input is the signed codes q, gemm_signed_input):
//     |q| <= 128 is a u8 and sign(q) * code stays in [-127, 127] (codes never reach -128), so
//     vpmaddubsw(|q|, vpsignb(code, q)) has pair sums <= 2 * 128 * 127 = 32512: exact; vpmaddwd
//     by ones adds the pairs into the column's dword. Two multiplies per 32 products where
//     widening takes four; acc = sum q * code, corrected with z = x_zero - 128. (vpsignb has no
//     512-bit form.)
//   - widening (AVX-512BW): each column's 4 codes sit in one dword of the panel; shifting
//     words left then arithmetically right sign-extends the even and the odd bytes to 16 bits
//     in place, the input's 4 bytes are split into words the same way, and vpmaddwd of the even
//     halves plus vpmaddwd of the odd halves gives the column's 4-term dot product in its own
//     dword lane: no lane shuffles and no extra accumulators;
//   - qd8-qc4w without VNNI: with codes in [-8, 7] a vpmaddubsw pair sum is at most
//     2 * 255 * 8 = 4080, so vpmaddubsw is exact there and does twice the work of vpmaddwd: the
//     nibbles are sign-extended to bytes, then vpmaddubsw, vpaddw, vpmaddwd by ones, vpaddd;
//   - `dot` (AVX-512 VNNI): vpdpbusd takes the biased u8 input and the s8 codes as they are.
//     int4 codes are used as 16 x code (the nibble moved to the top of its byte), and the sum is
//     shifted right by 4 at the end: exact, since |sum| <= 65536 * 255 * 8 < 2^27.
// Then acc = sum u * code, and acc - x_zero[r] * colsum[c] (the contract's correction), or by
// sign sum q * code - (x_zero[r] - 128) * colsum[c]: the same integer.
#pragma once

#include <asmjit/x86.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "jit/gemm_kernel.hpp"
#include "jit/x86/vec_traits.hpp"

namespace shapejit::jit {

/// Registers and addressing the kernel body lends to the quantized primitives.
struct X86QuantBody {
  std::function<asmjit::x86::Mem(int64_t row, int32_t disp)> x_row;  ///< row `row` of X, + disp bytes
  std::function<uint32_t(int64_t set, int64_t row, int64_t v)> acc;  ///< accumulator register ids
  std::vector<uint32_t> weights;  ///< gemm_x86_step_registers(...).weights vector registers
  std::vector<uint32_t> temps;    ///< at least gemm_x86_step_registers(...).temps
  asmjit::x86::Gp panel;          ///< the panel pointer (advanced by the k loop)
  asmjit::x86::Gp args;           ///< const GemmKernelArgs*
};

class X86GemmQuantOps {
 public:
  /// `key.quant` must not be kF32; throws shapejit::Error(kUnsupported) for a form or variant
  /// this ISA has no code for (`dot` needs AVX-512).
  X86GemmQuantOps(const GemmKey& key, asmjit::x86::Assembler& a);

  /// The accumulators hold f32 during the k loop (weight-only forms), else int32.
  bool f32_accumulators() const { return !gemm_quantized_input(key_.quant); }

  /// qd8 forms: one k step into accumulator set `set` (x_disp / b_disp: the step's offsets
  /// from the row and panel pointers).
  void emit_qd8_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp);
  /// Weight-only forms other than int4 planes: converts the step's codes of vector v to f32 into
  /// body.weights[v] (`nibble` 0/1: the low / high code of each byte of an int4 row); the body
  /// then multiplies them by the broadcast inputs as in the f32 kernel.
  void emit_weight_only_codes(const X86QuantBody& body, int64_t v, int32_t b_disp, int nibble);
  /// Int4 planes (jit::gemm_int4_planes): the group's codes of vector v's columns (b_disp: the
  /// group's offset) into body.weights[nv + v]; then per k of the group, emit_int4_plane turns
  /// plane `plane` of them into f32 values in body.weights[v].
  void emit_int4_group_load(const X86QuantBody& body, int64_t v, int32_t b_disp);
  void emit_int4_plane(const X86QuantBody& body, int64_t v, int plane);

  /// dst = a + b for accumulators (vpaddd for int32, vaddps for f32).
  void emit_add_accumulators(uint32_t dst, uint32_t a, uint32_t b);

  /// After the k loop and the set combination (accumulators in set 0): f32 values from the
  /// accumulators. qd8: acc - x_zero[r] * colsum[c], converted to f32, times the rounded product
  /// x_scale[r] * wscale[c]; weight-only: acc * wscale[c]; every product rounded on its own (no
  /// FMA). `panel_disp` is the panel's start relative to body.panel; gp0 and gp1 are free
  /// general-purpose registers.
  void emit_dequantize(const X86QuantBody& body, int32_t panel_disp, const asmjit::x86::Gp& gp0,
                       const asmjit::x86::Gp& gp1);

  /// Int4 planes: keep the nibbles' 16-entry table in vector register `id` (loaded by
  /// load_held_constants), where the lookups otherwise read it from memory, one load per
  /// lookup (per 16 weights) beside the codes' one per 128.
  void hold_int4_table(uint32_t id) { int4_reg_ = id; }
  /// Loads the held table (nothing when none is held): at each panel's start, as an
  /// activation call of the previous panel may have clobbered it.
  void load_held_constants();

  /// The vector constants the code above referred to (call once, after the function's code).
  void emit_constants();

 private:
  asmjit::x86::Vec vec(uint32_t id) const;
  template <size_t N>
  std::array<asmjit::x86::Vec, N> row_temps(const X86QuantBody& body, int64_t row) const;
  asmjit::x86::Mem vector_constant(uint32_t dword);  // every dword of a vector equal to `dword`
  asmjit::x86::Mem int4_values();                    // AVX-512: lane n holds nibble n's code as f32
  void int4_lookup(const asmjit::x86::Vec& dst, const asmjit::x86::Vec& nibbles);  // dst = table[nibbles & 15]
  asmjit::x86::Mem weight_only_codes_mem(const X86QuantBody& body, int64_t v, int32_t b_disp) const;
  void load(uint32_t dst, const asmjit::x86::Mem& src);
  void sign_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp);
  void widen_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp);
  void dot_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp);
  void int4_byte_step(const X86QuantBody& body, int64_t set, int32_t x_disp, int32_t b_disp);

  GemmKey key_;
  X86VecTraits t_;
  asmjit::x86::Assembler& a_;
  int64_t nv_, mr_;
  bool sign_step_;  // gemm_x86_sign_step: qd8-qc8w products by sign, acc = sum q * code
  asmjit::Label pool_;
  std::vector<uint32_t> pool_dwords_;
  asmjit::Label int4_values_;
  uint32_t int4_reg_ = kNoRegister;  // hold_int4_table's register
  static constexpr uint32_t kNoRegister = ~0u;
};

}  // namespace shapejit::jit
