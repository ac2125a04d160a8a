// x86 linear-group microkernel generator: one emitter for AVX-512 (zmm, k-mask tails) and AVX2
// (ymm, vmaskmovps tails), parameterised by the vector width.
#pragma once

#include <asmjit/x86.h>

#include <cstdint>
#include <vector>

#include "jit/gemm_kernel.hpp"
#include "jit/kernel_emitter.hpp"
#include "jit/x86/vec_traits.hpp"

namespace shapejit::jit {

/// Emits the kernel for one GemmKey into a CodeHolder initialised for x86-64.
///
/// Shape of the code: a loop over panels; per panel, mr x nv accumulators (times `sets` when
/// the tile alone has too few independent FMA chains) start from the bias (or zero), the k
/// loop broadcasts one float of each X row and multiplies it into the panel row's nv vectors,
/// then the epilogue combines the sets, applies the activation (relu inline, the others
/// through SLEEF's vector functions with the tile spilled to an aligned stack area), scales and
/// stores. Steps: load_args, panel_loop (zero, k_loop, combine, activation, scale, store,
/// next_panel), finish, constants.
class X86GemmEmitter : private KernelEmitter {
 public:
  X86GemmEmitter(const GemmKey& key, asmjit::CodeHolder& code);
  /// Emits the whole kernel; throws shapejit::Error (kUnsupported / kInternalError).
  void generate();

 private:
  // Planning (no code emitted).
  void plan();
  void plan_registers();

  // The named steps, in emission order.
  void emit_load_args();
  void emit_panel_loop();
  void emit_row_pointers(const asmjit::x86::Mem& stride);
  void emit_zero();
  void emit_k_loop();
  void emit_k_step(int64_t step, int64_t set, int32_t a_disp, int32_t b_disp);
  void emit_combine_sets();
  void emit_activation();
  void emit_sleef_activation();
  void emit_scale();
  void emit_store();
  void emit_store_row_major();
  void emit_store_table();
  void emit_next_panel();
  void emit_finish();
  void emit_constants();

  // Small helpers.
  asmjit::x86::Vec vec(uint32_t id) const;
  uint32_t acc(int64_t set, int64_t row, int64_t v) const;
  asmjit::x86::Mem row_mem(int64_t row, int32_t disp) const;  // X or Y row through p0/p3/ld/ld3
  void store_vec(const asmjit::x86::Mem& dst, int64_t v, uint32_t src);
  void zero(uint32_t id);
  asmjit::x86::Mem constant(float value);                     // a broadcastable pool entry
  void op_const(uint32_t inst_id, uint32_t dst, uint32_t src, float value, uint32_t tmp);
  bool calls_sleef() const;

  GemmKey key_;
  X86VecTraits t_;
  int64_t lanes_, vbytes_, nv_, tail_, mr_;
  int64_t sets_ = 1;                      // accumulator sets the k steps rotate over
  int64_t unroll_ = 1, iterations_ = 0;   // k loop: iterations_ x unroll_ steps, then the rest
  int64_t row_bytes_ = 0;                 // bytes of one panel row
  int64_t b_consumed_ = 0;                // bytes b_ has advanced within the current panel
  int64_t spill_bytes_ = 0;               // aligned stack area for the SLEEF epilogue

  asmjit::x86::Assembler a_;
  RegPool gp_, vecs_, kregs_;
  // General-purpose registers by role. Across SLEEF calls only args_, b_, panels_, cur_ and
  // sp_save_ live; they are callee-saved whenever the key calls out.
  asmjit::x86::Gp args_, b_, panels_, cur_, sp_save_, p0_, p3_, ld_, ld3_, kcnt_;
  std::vector<asmjit::x86::Gp> tcol_;  // kTable: one column pointer per vector
  // Vector registers by role.
  std::vector<uint32_t> acc_;   // [set][row][vector]
  std::vector<uint32_t> bv_;    // one panel row
  std::vector<uint32_t> bc_;    // broadcast temporaries (rotated)
  asmjit::x86::KReg k_tail_;
  asmjit::Label pool_;
  std::vector<uint32_t> pool_bits_;  // constants, one float each
  asmjit::Label mask_table_;
};

/// Emits the x86 kernel for `key` (key.isa is kAvx512 or kAvx2) into `code`.
void emit_gemm_kernel_x86(const GemmKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
