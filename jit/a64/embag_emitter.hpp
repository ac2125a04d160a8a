// AArch64 (NEON) back end of the embedding-bag skeleton (jit/embag_skeleton.hpp): 128-bit
// vectors (4 floats), exact-width tail loads and stores, and AAPCS64 register rules.
#pragma once

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "jit/a64/embag_table_ops.hpp"
#include "jit/a64/prefetch.hpp"
#include "jit/embag_kernel.hpp"
#include "jit/embag_skeleton.hpp"

namespace shapejit::jit {

/// The NEON primitives of the skeleton, emitted into a CodeHolder initialised for AArch64 (on
/// any host: jitdump cross-emits it on x86-64).
///
/// Differences from x86 that shape the code: loads take no memory operand in arithmetic, so a
/// row's vectors go through two load registers (paired with ldp); addresses have no
/// base+index*scale+disp, so each row's address is formed once (madd into rowp_) and the
/// vectors are immediate offsets from it, and blocks right of column 0 rebase kWeight/kOut to
/// keep those offsets small; max ids are dup'ed from kId and blended with `bit` under fcmgt
/// masks. Registers: v0-v7 and v16-v31 first; v8-v15 and x19-x28 only when a kernel needs more,
/// and then the frame saves them (AAPCS64 callee-saved: d8-d15, x19-x28).
class A64EmbagEmitter final : public EmbagSkeleton {
 public:
  A64EmbagEmitter(const EmbagKey& key, asmjit::CodeHolder& code);

  static constexpr int64_t kLanes = 4;   ///< floats per vector register
  static constexpr int64_t kBytes = 16;  ///< bytes per vector register

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
  int64_t offset2bag_lanes() const override { return 16 / out_size(); }
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
  uint32_t max_input() const override { return load0_; }
  void max_blend(int64_t j, int64_t v) override;
  void store_max_ids(const EmbagBlock& blk) override;

  // Table dtype (embag_emitter_table.cpp): everything that depends on key.table, key.out, key.psw.
  // f32 tables keep their own ldp/fadd code; the other dtypes go through ops_.
  void plan_table_scratch();
  void emit_table_constants();
  bool f32_table() const { return key().table == DType::kF32; }
  int64_t group_vecs() const;                       // vectors one grouped load covers
  const EmbagBlock& block_at(int64_t first_vec) const;  // the block starting there
  uint32_t max_x(int64_t j) const;                  // where max_blend finds vector j's row value
  void row_setup() override;
  void accumulate(const EmbagBlock& blk) override;
  void load_value(uint32_t dst, int64_t first_col, int64_t cols) override;
  void mean_divisor() override;
  void mean_finish(uint32_t acc) override;
  void store_output(uint32_t src, int64_t first_col, int64_t cols) override;

  // Helpers (embag_emitter_store.cpp for the vector moves).
  asmjit::a64::Gp gp(G role) const { return asmjit::a64::x(gp_id_[size_t(role)]); }
  asmjit::a64::Gp arg_reg(size_t offset) const;  // a field kept in a register, or invalid
  asmjit::a64::Gp base_reg(EmbagSrc base);       // a field not kept goes through kScratch
  void load_field(const asmjit::a64::Gp& dst, size_t offset);
  void add_imm(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& src, int64_t value);
  void store_int_at(const asmjit::a64::Gp& base, G pos, G value);
  void load_cols(uint32_t dst, const asmjit::a64::Gp& base, int64_t offset, int64_t cols);
  void store_cols(uint32_t src, const asmjit::a64::Gp& base, int64_t offset, int64_t bytes,
                  const asmjit::a64::Gp& lane_addr);
  void prefetch(const asmjit::a64::Gp& base, int64_t offset);

  asmjit::a64::Assembler a_;
  RegPool gp_, vecs_;
  uint32_t gp_id_[size_t(G::kNum)] = {};
  // Registers of the back end only: fields kept in registers, the row address.
  asmjit::a64::Gp args_, offsets_, bag_end_, rowp_, psw_, o2b_, mapping_, ahead_;
  asmjit::a64::Gp table_;  // quantized tables: the unshifted table base (trailers in block loops)
  uint32_t load0_ = 0, load1_ = 0;  // row vectors on their way to the accumulators (max: load0_)
  uint32_t bcast_ = 0;   // per-sample weight (lane 0), mean divisor, max row id broadcast
  uint32_t mask_ = 0;    // max: fcmgt result
  uint32_t widen_ = 0;   // max, 64-bit ids: half of mask_ widened to 2 x 64-bit lanes
  // Non-f32 tables: the dtype operations; max loads a group of vectors at once into stage_
  // (stage_[0] is load0_), and wide_blocks_ mirrors the skeleton's 64-bit-id block plan.
  std::optional<A64TableOps> ops_;
  std::vector<uint32_t> stage_;
  std::vector<EmbagBlock> wide_blocks_;
};

/// Emits the NEON kernel for `key` (key.isa == kNeon) into `code` (initialised for AArch64).
void emit_embag_kernel_a64(const EmbagKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
