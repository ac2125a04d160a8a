// x86 back end of the embedding-bag skeleton (jit/embag_skeleton.hpp): one emitter for AVX-512
// (zmm, k-mask tails) and AVX2 (ymm, exact-width 16/8/4-byte tail moves), parameterised by the
// vector width.
#pragma once

#include <asmjit/x86.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/embag_skeleton.hpp"
#include "jit/x86/embag_table_ops.hpp"
#include "jit/x86/vec_traits.hpp"

namespace shapejit::jit {

/// The x86 primitives of the skeleton. Rows are addressed as weight + row * stride + disp, with
/// kRow multiplied by the stride in place (x86 has base + index + disp32 operands, so no
/// column block needs rebasing); max ids are broadcast straight from the index array.
class X86EmbagEmitter final : public EmbagSkeleton {
 public:
  X86EmbagEmitter(const EmbagKey& key, asmjit::CodeHolder& code);

 private:
  // Planning and frame.
  asmjit::BaseEmitter& attach_assembler() override { return a_; }
  void check_isa() const override;
  void plan_registers() override;
  void emit_prolog_frame() override;
  void load_args() override;

  // Integer work and branches.
  void gp_add(G dst, G src, int64_t imm) override;
  void gp_sub(G dst, G a, G b) override;
  void gp_zero(G dst) override;
  void swap_roles(G a, G b) override { std::swap(gp_id_[size_t(a)], gp_id_[size_t(b)]); }
  void gp_min(G dst, G limit) override;
  void load_arg(G dst, size_t offset) override;
  void load_int(G dst, EmbagSrc base, G pos, DType type) override;
  void store_int(EmbagSrc base, G pos, G value) override;
  void branch(EmbagCond cond, G a, EmbagSrc b, const Label& target) override;
  void jump(const Label& target) override;
  void branch_if_wide_id(const Label& target) override;

  // Rows, prefetch, pruning.
  int64_t offset2bag_lanes() const override { return t_.bytes / out_size(); }
  void broadcast_bag(uint32_t vec) override;
  void store_bag_vector(uint32_t vec, G pos) override;
  void store_offset2bag_at(G pos) override { store_int_at(o2b_, pos, G::kBag); }
  void load_index_ahead() override;
  void map_row(G dst, G id, G tmp) override;
  void prefetch_row(int64_t begin, int64_t len) override;
  void form_row_address() override;
  void zero_vec(uint32_t vec) override;

  // Max mode (embag_emitter_max.cpp).
  void broadcast_row_id() override;
  void copy_row_id(int64_t j, int64_t v) override;
  uint32_t max_input() const override { return xtmp_; }
  void max_blend(int64_t j, int64_t v) override;
  void store_max_ids(const EmbagBlock& blk) override;  // embag_emitter_store.cpp

  // Table dtype (embag_emitter_table.cpp): everything that depends on key.table, key.out, key.psw.
  // f32 tables are emitted inline (memory operands); the other dtypes through ops_.
  void plan_table_scratch();
  bool rounded_products() const;
  void row_setup() override;
  void accumulate(const EmbagBlock& blk) override;
  void load_value(uint32_t dst, int64_t first_col, int64_t cols) override;
  void mean_divisor() override;
  void mean_finish(uint32_t acc) override;
  uint32_t divisor_owner() const;         // borrow_divisor_: the accumulator holding the divisor
  asmjit::x86::Mem parked_sum() const;    // ... and where its own sum waits meanwhile
  void store_output(uint32_t src, int64_t first_col, int64_t cols) override;
  /// Column groups (X86TableOps::group_vecs; not on the 64-bit id path): vector j of `blk`
  /// starts a group of the following group_vecs() vectors.
  bool group_head(const EmbagBlock& blk, int64_t j) const;
  /// Vector v of the main path's plan: its place in its group, or -1 outside groups; `j`
  /// (optional) gets its index in its block.
  int64_t group_member(int64_t v, int64_t* j = nullptr) const;
  /// The registers of the group starting at vector j: accumulators or (ids) ids_lo.
  std::vector<uint32_t> group_regs(int64_t j, bool ids) const;

  // Helpers.
  asmjit::x86::Gp gp(G role) const { return asmjit::x86::gpq(gp_id_[size_t(role)]); }
  asmjit::x86::Vec vec(uint32_t id) const;
  asmjit::x86::Mem row_mem(int64_t col) const;  // column `col` of the current row
  asmjit::x86::Mem arg_mem(size_t offset) const;
  asmjit::x86::Gp base_reg(EmbagSrc base);      // a field base goes through kScratch
  void store_int_at(const asmjit::x86::Gp& base, G pos, G value);
  void load_tail_avx2(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& src, int64_t count,
                      const asmjit::x86::Xmm& spare);
  void store_tail_avx2(const asmjit::x86::Mem& dst, const asmjit::x86::Vec& src, int64_t count,
                       int64_t elem_bytes, const asmjit::x86::Xmm& spare);
  void store_ids64(const asmjit::x86::Mem& dst, const asmjit::x86::Vec& ids, int64_t n, int64_t half);

  X86VecTraits t_;
  asmjit::x86::Assembler a_;
  std::optional<X86TableOps> ops_;  // every table dtype but f32
  EmbagBlock group_blk_{};          // column groups: the block whose accumulators are stored next
  RegPool gp_, vecs_, kregs_;
  uint32_t gp_id_[size_t(G::kNum)] = {};
  // Registers of the back end only.
  asmjit::x86::Gp args_, psw_, o2b_, mapping_;
  uint32_t bcast_ = 0;   // weight (f32 tables) / mean divisor / row id broadcast
  bool borrow_divisor_ = false;  // f32 mean without bcast_: the divisor borrows an accumulator
  uint32_t xtmp_ = 0;    // loaded row vector (max; AVX2 tails); widened ids at store time
  uint32_t xtmp2_ = 0;   // AVX2 sum tails wider than 4: the upper part
  uint32_t vcmp_ = 0;    // AVX2 max compare result; spare at load and store time
  uint32_t widen_ = 0;   // AVX2 max, 64-bit lanes: compare mask widened to 64-bit lanes
  asmjit::x86::KReg k_tail_, k_cmp_, k_hi_;
};

/// Emits the x86 kernel for `key` (key.isa is kAvx512 or kAvx2) into `code`.
void emit_embag_kernel_x86(const EmbagKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
