// AArch64 (NEON) back end of the GEMM skeleton (jit/gemm_skeleton.hpp): 4-float vectors,
// by-element FMAs and SLEEF's advsimd functions for the activations.
#pragma once

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "jit/a64/gemm_quant_ops.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/gemm_skeleton.hpp"

namespace shapejit::jit {

/// The NEON primitives of the GEMM skeleton (on any host: other hosts cross-emit). The k step
/// takes four k at a time: one q load of each X row holds X[r, k..k+3], and
/// `fmla acc, w, x.s[lane]` multiplies lane kk into the panel row k+kk (no broadcasts); the last
/// K % 4 k load single floats. Stores are row-major with exact-width tails, or through the
/// offset tables. One set of accumulators (plan_sets() stays 1).
/// Quantized forms (GemmQuant): the k step, the code unpacking and the dequantize / bias steps
/// are A64GemmQuantOps primitives (gemm_quant_ops.hpp), with their own k step widths.
/// Registers: AAPCS64 as in the embedding-bag emitter; kernels that call SLEEF keep their loop
/// state in x19-x22 and save x30 (the frame does both).
class A64GemmEmitter final : public GemmSkeleton {
 public:
  A64GemmEmitter(const GemmKey& key, asmjit::CodeHolder& code);

 private:
  // Planning and frame (gemm_emitter.cpp).
  asmjit::BaseEmitter& attach_assembler() override { return a_; }
  void check_isa() const override;
  int64_t k_step_width() const override { return key().quant == GemmQuant::kF32 ? 4 : a64_quant_step_k(key()); }
  int64_t k_loop_steps() const override { return 1; }
  int64_t k_rest_step_width(int64_t left) const override {
    return key().quant == GemmQuant::kF32 ? 1 : a64_quant_rest_step_k(key(), left);
  }
  void plan_registers() override;
  void plan_quant_registers();
  void emit_prolog_frame() override;
  void load_args() override;
  void finish() override;

  // Loops and the k step (gemm_emitter.cpp).
  int64_t panel_loop_alignment() const override { return 16; }
  void point_at_x_rows() override;
  void panel_loop_end(const asmjit::Label& top) override;
  void k_loop_begin(int64_t iterations) override;
  void k_loop_end(int64_t k, const asmjit::Label& top) override;
  void zero_vec(uint32_t vec) override;
  void load_bias(uint32_t dst, int64_t row, int64_t v, int64_t offset) override;
  void load_x(const GemmKStep& s) override;
  void load_weight_row(int64_t b_off) override;
  void prefetch_weights(int64_t offset) override;
  GemmXOperand broadcast_x(const GemmKStep& s, int64_t row, int64_t kk) override;
  void fma(uint32_t acc, int64_t v, const GemmXOperand& x) override;
  void prepare_quant_panel() override { quant_->load_constant(); }
  void quant_k_step(const GemmKStep& s) override { quant_->step(s.k, s.width, s.in_loop); }

  // Epilogue, activation calls and stores (gemm_emitter_epilogue.cpp).
  uint32_t free_vec(int which) const override { return which == 0 ? bv_[0] : av_[0]; }
  void add_vec(uint32_t dst, uint32_t a, uint32_t b) override;
  void max_with_zero(uint32_t acc, uint32_t zero) override;
  void load_scale(uint32_t dst) override;
  void mul_scale(uint32_t acc, uint32_t scale) override;
  void dequantize() override { quant_->dequantize(b_consumed()); }
  void add_bias(uint32_t acc, int64_t v, int64_t) override { quant_->add_bias(acc, v); }
  void spill_vec(int64_t slot, uint32_t src) override;
  void reload_vec(uint32_t dst, int64_t slot) override;
  void act_binary(ActOp::Kind kind, uint32_t dst, uint32_t a, uint32_t b) override;
  void act_const(ActOp::Kind kind, uint32_t dst, uint32_t a, float value) override;
  void act_neg(uint32_t dst, uint32_t a) override;
  void call_math(VectorMathFn fn) override;
  void point_at_output_rows() override;
  void store_row_major(uint32_t src, int64_t row, int64_t v) override;
  void load_table_columns() override;
  void load_table_row(int64_t row) override;
  void store_table(uint32_t src, int64_t v) override;
  void advance_panel(int64_t b_bytes, int64_t cur_bytes) override;

  // Small helpers.
  void point_rows(const asmjit::a64::Gp& base, size_t stride_arg);  // rows_ from base + stride
  void add_imm(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& src, int64_t value);
  void load_arg(const asmjit::a64::Gp& dst, size_t offset);
  void load_constant(uint32_t vec_id, float value);
  void store_vec(uint32_t src, const asmjit::a64::Mem& dst, int64_t v);

  int64_t spill_bytes_ = 0;  // stack area for the activation calls

  asmjit::a64::Assembler a_;
  RegPool gp_, vecs_;
  // General-purpose registers by role; args_, b_, panels_ and cur_ live across SLEEF calls.
  asmjit::a64::Gp args_, b_, panels_, cur_, ld_, kcnt_, scratch_;
  std::vector<asmjit::a64::Gp> rows_;   // X (then Y) row pointers, one per row
  std::vector<asmjit::a64::Gp> tcol_;   // kTable: one column pointer per vector
  std::vector<uint32_t> bv_;   // one panel row
  std::vector<uint32_t> av_;   // per row: X[r, k..k+3] (or one float)
  std::unique_ptr<A64GemmQuantOps> quant_;  // quantized forms: their k step and epilogue steps
};

/// Emits the NEON kernel for `key` (key.isa == kNeon) into `code` (initialised for AArch64).
void emit_gemm_kernel_a64(const GemmKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
