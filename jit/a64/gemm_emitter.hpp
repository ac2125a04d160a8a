// AArch64 (NEON) linear-group microkernel generator: the contract of jit/gemm_kernel.hpp with
// 4-float vectors, by-element FMAs and SLEEF's advsimd functions for the activations.
#pragma once

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cstdint>
#include <vector>

#include "jit/a64/prefetch.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/kernel_emitter.hpp"

namespace shapejit::jit {

/// Emits the NEON kernel for one GemmKey into a CodeHolder initialised for AArch64 (on any host).
///
/// Shape of the code: a loop over panels; per panel, mr x nv accumulators start from the bias
/// (or zero); the k loop takes four k at a time: one q load of each X row holds X[r, k..k+3],
/// and `fmla acc, w, x.s[lane]` multiplies lane kk into the panel row k+kk (no broadcasts);
/// the last K % 4 k load single floats. The epilogue applies the activation (relu as fmax, the
/// others through SLEEF with the tile spilled to the stack), scales and stores (row-major with
/// exact-width tails, or through the offset tables). Steps: load_args, panel_loop (init,
/// k_loop, activation, scale, store, next_panel), finish.
/// Registers: AAPCS64 as in the embedding-bag emitter; kernels that call SLEEF keep their loop
/// state in x19-x22 and save x30 (the frame does both).
class A64GemmEmitter : private KernelEmitter {
 public:
  A64GemmEmitter(const GemmKey& key, asmjit::CodeHolder& code);
  /// Emits the whole kernel; throws shapejit::Error (kUnsupported / kInternalError).
  void generate();

 private:
  // Planning (no code emitted).
  void plan();
  void plan_registers();

  // The named steps, in emission order.
  void emit_load_args();
  void emit_panel_loop();
  void emit_row_pointers(const asmjit::a64::Gp& base, size_t stride_arg);
  void emit_init();
  void emit_k_loop();
  void emit_k_group(int64_t a_off, int64_t b_off, bool post_increment);
  void emit_k_single(int64_t a_off, int64_t b_off);
  void emit_panel_row(int64_t b_off);
  void emit_activation();
  void emit_sleef_activation();
  void emit_scale();
  void emit_store();
  void emit_store_row_major();
  void emit_store_table();
  void emit_next_panel();
  void emit_finish();

  // Small helpers.
  uint32_t acc(int64_t row, int64_t v) const { return acc_[size_t(row * nv_ + v)]; }
  void add_imm(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& src, int64_t value);
  void load_arg(const asmjit::a64::Gp& dst, size_t offset);
  void load_constant(uint32_t vec_id, float value);
  void store_vec(uint32_t src, const asmjit::a64::Mem& dst, int64_t v);
  void prefetch(int64_t offset);
  bool calls_sleef() const;

  GemmKey key_;
  int64_t nv_, tail_, mr_;
  int64_t row_bytes_ = 0;    // bytes of one panel row
  int64_t b_consumed_ = 0;   // bytes b_ has advanced within the current panel
  int64_t spill_bytes_ = 0;  // stack area for the SLEEF epilogue
  bool loop_k_ = false;      // the k groups run in a loop (else fully unrolled)
  int64_t groups_ = 0, rest_ = 0;

  asmjit::a64::Assembler a_;
  RegPool gp_, vecs_;
  // General-purpose registers by role; args_, b_, panels_ and cur_ live across SLEEF calls.
  asmjit::a64::Gp args_, b_, panels_, cur_, ld_, kcnt_, scratch_;
  std::vector<asmjit::a64::Gp> rows_;   // X (then Y) row pointers, one per row
  std::vector<asmjit::a64::Gp> tcol_;   // kTable: one column pointer per vector
  // Vector registers by role.
  std::vector<uint32_t> acc_;  // [row][vector]
  std::vector<uint32_t> bv_;   // one panel row
  std::vector<uint32_t> av_;   // per row: X[r, k..k+3] (or one float)
};

/// Emits the NEON kernel for `key` (key.isa == kNeon) into `code` (initialised for AArch64).
void emit_gemm_kernel_a64(const GemmKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
