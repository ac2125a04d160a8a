// x86 back end of the GEMM skeleton (jit/gemm_skeleton.hpp): one emitter for AVX-512 (zmm, k-mask
// tails) and AVX2 (ymm, vmaskmovps tails), parameterised by the vector width.
#pragma once

#include <asmjit/x86.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "jit/gemm_kernel.hpp"
#include "jit/gemm_skeleton.hpp"
#include "jit/x86/gemm_quant_ops.hpp"
#include "jit/x86/vec_traits.hpp"

namespace shapejit::jit {

/// The x86 primitives of the GEMM skeleton. The k step takes one k: the panel row's nv vectors
/// are loaded, then each X row's float is broadcast (or, AVX-512 with one vector, folded into
/// the FMA's memory operand) and multiplied in. A small tile gets several partial-sum sets so
/// both FMA pipes stay busy. X and Y rows 0..7 are addressed from two bases and two strides.
/// Activation calls follow the System V AMD64 ABI: the tile is spilled to a 64-byte aligned
/// stack area; across calls only args_, b_, panels_, cur_ and sp_save_ live, in callee-saved
/// registers. The quantized forms' k step, dequantization and bias come from X86GemmQuantOps
/// (jit/x86/gemm_quant_ops.hpp; gemm_emitter_quant.cpp lends it the registers).
class X86GemmEmitter final : public GemmSkeleton {
 public:
  X86GemmEmitter(const GemmKey& key, asmjit::CodeHolder& code);

 private:
  // Planning and frame (gemm_emitter.cpp).
  asmjit::BaseEmitter& attach_assembler() override { return a_; }
  void check_isa() const override;
  int64_t plan_sets() const override;
  int64_t k_step_width() const override { return gemm_k_group(key()); }
  // qd8: whole code groups (the rows are padded); int4 planes: the k past the last whole group
  // in one step; the other weight-only forms: single k (f32-qc4w's odd K ends with one k, the
  // low codes of the last byte row).
  int64_t k_rest_step_width(int64_t left) const override;
  int64_t k_loop_steps() const override { return sets() * ((4 + sets() - 1) / sets()); }
  void plan_registers() override;
  void emit_prolog_frame() override;
  void load_args() override;
  void finish() override;
  void emit_data() override;

  // Loops and the k step (gemm_emitter.cpp).
  int64_t panel_loop_alignment() const override { return 64; }
  void point_at_x_rows() override;
  void panel_loop_end(const asmjit::Label& top) override;
  void k_loop_begin(int64_t iterations) override;
  void k_loop_end(int64_t k, const asmjit::Label& top) override;
  void zero_vec(uint32_t vec) override;
  void load_bias(uint32_t dst, int64_t row, int64_t v, int64_t offset) override;
  void load_weight_row(int64_t b_off) override;
  void prefetch_weights(int64_t offset) override;
  GemmXOperand broadcast_x(const GemmKStep& s, int64_t row, int64_t kk) override;
  void fma(uint32_t acc, int64_t v, const GemmXOperand& x) override;

  // Quantized forms (gemm_emitter_quant.cpp).
  void check_quant_key() const;
  void quant_k_step(const GemmKStep& s) override;
  void prepare_quant_panel() override;
  void dequantize() override;
  void add_bias(uint32_t acc, int64_t v, int64_t offset) override;
  X86QuantBody quant_body() const;
  int64_t x_bytes_per_k() const { return gemm_quantized_input(key().quant) ? 1 : 4; }

  // Epilogue, activation calls and stores (gemm_emitter_epilogue.cpp).
  uint32_t free_vec(int which) const override { return which == 0 ? bv_[0] : bc_[1]; }
  void add_vec(uint32_t dst, uint32_t a, uint32_t b) override;
  void max_with_zero(uint32_t acc, uint32_t zero) override;
  void load_scale(uint32_t dst) override;
  void mul_scale(uint32_t acc, uint32_t scale) override;
  void spill_vec(int64_t slot, uint32_t src) override;
  void reload_vec(uint32_t dst, int64_t slot) override;
  void act_binary(ActOp::Kind kind, uint32_t dst, uint32_t a, uint32_t b) override;
  void act_const(ActOp::Kind kind, uint32_t dst, uint32_t a, float value) override;
  void act_neg(uint32_t dst, uint32_t a) override;
  void call_math(VectorMathFn fn) override;
  void prepare_tail_store() override;
  void point_at_output_rows() override;
  void store_row_major(uint32_t src, int64_t row, int64_t v) override;
  void load_table_columns() override;
  void load_table_row(int64_t row) override;
  void store_table(uint32_t src, int64_t v) override;
  void advance_panel(int64_t b_bytes, int64_t cur_bytes) override;

  // Small helpers.
  asmjit::x86::Vec vec(uint32_t id) const;
  asmjit::x86::Mem row_mem(int64_t row, int32_t disp) const;  // X or Y row through p0/p3/ld/ld3
  asmjit::x86::Mem arg(size_t offset) const;                  // a GemmKernelArgs field
  void point_rows(const asmjit::x86::Mem& stride);            // ld_, ld3_, p3_ from p0_
  void store_vec(const asmjit::x86::Mem& dst, int64_t v, uint32_t src);
  asmjit::x86::Mem constant(float value);                     // a broadcastable pool entry
  void op_const(uint32_t inst_id, uint32_t dst, uint32_t src, float value);
  asmjit::x86::Mem slot_mem(int64_t slot) const;

  X86VecTraits t_;
  int64_t vbytes_;
  int64_t spill_bytes_ = 0;  // aligned stack area for the activation calls

  asmjit::x86::Assembler a_;
  RegPool gp_, vecs_, kregs_;
  asmjit::x86::Gp args_, b_, panels_, cur_, sp_save_, p0_, p3_, ld_, ld3_, kcnt_;
  std::vector<asmjit::x86::Gp> tcol_;  // kTable: one column pointer per vector
  std::vector<uint32_t> bv_;           // one panel row
  std::vector<uint32_t> bc_;           // broadcast temporaries (rotated)
  asmjit::x86::KReg k_tail_;
  asmjit::Label pool_;
  std::vector<uint32_t> pool_bits_;    // constants, one float each
  asmjit::Label mask_table_;
  std::unique_ptr<X86GemmQuantOps> quant_;  // the quantized forms' primitives (null for f32)
};

/// Emits the x86 kernel for `key` (key.isa is kAvx512 or kAvx2) into `code`.
void emit_gemm_kernel_x86(const GemmKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
