// The quantized forms' primitives of the AArch64 (NEON) GEMM kernels (GemmQuant,
// jit/gemm_kernel.hpp): the k step over a panel of weight codes, the unpacking of the codes in
// registers, and the steps from the accumulators to the pre-activation values. The GEMM
// skeleton (jit/gemm_skeleton.hpp) runs them through the NEON back end (gemm_emitter.hpp),
// which owns the frame and hands them their registers; panel loop, k loop, activation, scale
// and stores are the skeleton's.
#pragma once

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jit/gemm_kernel.hpp"

namespace shapejit::jit {

/// The registers the quantized primitives work in, taken by the kernel body from its pools.
struct A64QuantRegs {
  asmjit::a64::Gp args;     ///< GemmKernelArgs*
  asmjit::a64::Gp b;        ///< the panel pointer (the k loop advances it)
  asmjit::a64::Gp scratch;  ///< free between instructions (large immediates, addresses)
  asmjit::a64::Gp gp1, gp2;  ///< free for the primitives (loop counter, trailer and argument pointers)
  std::vector<asmjit::a64::Gp> rows;  ///< X row pointers, set before the k loop (post-incremented by it)
  std::vector<uint32_t> acc;          ///< [row][vector] accumulators, int32 (qd8) or f32 lanes
  std::vector<uint32_t> x;            ///< one per row: its X values (ids below 16: smlal by .h element)
  std::vector<uint32_t> temps;        ///< at least a64_quant_temps(key) weight and epilogue temporaries
  uint32_t constant = 0;              ///< qd8: 0x80 bytes (dot) or the tbl transposition (widening);
                                      ///< f32-qc4w: the packed int4 row being unpacked
};

/// Vector temporaries the primitives of `key` need besides the accumulators, the X registers
/// and `constant`.
int a64_quant_temps(const GemmKey& key);

/// k of one full step of the k loop: 16 codes (.dot: 4 sdot lanes), 8 codes (widening: 8
/// halves), 4 floats (f32-qc*).
int64_t a64_quant_step_k(const GemmKey& key);
/// k of a step after the full ones, `left` k (qd8: a multiple of 4) still to go: 8 or 4 codes
/// (whole groups), 2 or 1 floats.
int64_t a64_quant_rest_step_k(const GemmKey& key, int64_t left);

/// Emits the quantized primitives of one key into an assembler. Arithmetic, per form:
///   qd8 .dot: X bytes flipped to s8 (u ^ 0x80 = q), `sdot` by element per 4-k group, then
///             acc -= (x_zero - 128) * colsum: sum q*code - z*colsum, the contract's acc;
///   qd8 widening: X as u16 (uxtl), codes transposed to 4 columns per k (tbl) and widened to s16,
///             `smlal`/`smlal2` by element: sum u*code, then acc -= x_zero * colsum;
///   int4 codes: two's-complement nibbles sign-extended in registers (shl 4 + sshr 4; sshr 4);
///   qd8 epilogue: f32(acc) * f32(x_scale[r] * wscale[c]), then + bias, each rounded (fmul, fadd);
///   f32-qc*: codes widened to f32 (sxtl, scvtf), `fmla` by element with X in ascending k from
///             zero, then acc * wscale (fmul), + bias (fadd).
/// All int32 arithmetic wraps, so any intermediate overflow cancels: the contract bounds the
/// final accumulator (K <= 65536) and it is exact.
class A64GemmQuantOps {
 public:
  /// Throws shapejit::Error(kUnsupported) naming the rule when `key` is not a quantized form
  /// these primitives emit (`name` prefixes the message).
  A64GemmQuantOps(const GemmKey& key, asmjit::a64::Assembler& a, A64QuantRegs regs, std::string name);

  /// X bytes per k (qd8: 1, f32 forms: 4).
  int64_t x_bytes_per_k() const;
  /// Bytes of the panel's codes before k `k` (k a multiple of the form's group; even for f32-qc4w).
  int64_t weight_offset(int64_t k) const;
  /// One k step: `width` k from `k0` (relative to where the X rows and regs.b point), reading
  /// width * x_bytes_per_k() = 4, 8 or 16 bytes per row (qd8: whole 4- or 8-code groups); with
  /// `post` (the skeleton's run-time loop) the X loads advance the row pointers past the step.
  void step(int64_t k0, int64_t width, bool post);

  /// The constant register (0x80 bytes or the tbl indices; nothing for f32-qc*), per panel: the
  /// SLEEF activation of the previous panel clobbers it.
  void load_constant();
  /// Accumulators -> f32: qd8 f32(acc) * f32(x_scale * wscale), weight-only acc * wscale;
  /// `b_consumed`: bytes regs.b has advanced within the panel.
  void dequantize(int64_t b_consumed);
  /// acc += bias vector v of the panel (after dequantize(), whose trailer pointer it uses).
  void add_bias(uint32_t acc_id, int64_t v);

 private:
  void load_x(int64_t x_bytes, int64_t a_off, bool post);
  void dot_group_c8(int64_t b_off, uint32_t lane);
  void dot_group_c4(int64_t b_off, uint32_t lane);
  void widen_group_c8(int64_t b_off, uint32_t hlane);
  void widen_group_c4(int64_t b_off);
  void f32_row_c8(int64_t b_off, uint32_t lane);
  void f32_row_c4(int64_t b_off, int64_t lo, int64_t hi);
  void codes_to_f32(uint32_t lane);  // temps[0] holds one row's s8 codes: convert, fmla
  void dequantize_qd8();
  void dequantize_weight_only();

  // Helpers.
  uint32_t acc(int64_t row, int64_t v) const { return r_.acc[size_t(row * nv_ + v)]; }
  void load_vec(const asmjit::a64::Vec& dst, int64_t bytes, const asmjit::a64::Gp& base, int64_t off);
  void add_imm(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& src, int64_t value);
  void prefetch_span(int64_t b_off, int64_t bytes);
  void prefetch(int64_t offset);

  GemmKey key_;
  asmjit::a64::Assembler& a_;
  A64QuantRegs r_;
  std::string name_;
  int64_t nv_, mr_, width_;
  int64_t consumed_ = 0;        // bytes regs.b has advanced within the panel (dequantize)
  int64_t trailer_ = 0;        // panel offset regs.gp2 points at after dequantize()
  uint32_t bias_loaded_ = 0;   // bias vectors already in temps[v] (bit v)
};

}  // namespace shapejit::jit
