// AArch64 (NEON) embedding-bag code generator: the same named steps as jit/x86's emitter, with
// 128-bit vectors (4 floats), exact-width tail loads and stores, and AAPCS64 register rules.
#pragma once

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <cstdint>
#include <vector>

#include "jit/a64/prefetch.hpp"
#include "jit/embag_kernel.hpp"
#include "jit/embag_plan.hpp"
#include "jit/kernel_emitter.hpp"

namespace shapejit::jit {

/// Emits the NEON kernel for one EmbagKey into a CodeHolder initialised for AArch64 (on any
/// host: jitdump cross-emits it on x86-64).
///
/// Shape of the code: a loop over bags; per bag, the columns are split into blocks whose
/// accumulators fit the register file, and per block a loop over the bag's index positions
/// accumulates rows held in registers, then stores the block. Steps: load_args, bag_loop,
/// block (row_head, row_accumulate | max_first + max_update), store, bag_counts, finish.
///
/// Differences from x86 that shape the code: loads take no memory operand in arithmetic, so a
/// row's vectors go through two load registers (paired with ldp); addresses have no
/// base+index*scale+disp, so each row's address is formed once (madd) and the vectors are
/// immediate offsets from it; max keeps row ids in lanes as wide as max_indices' elements
/// (two 2 x 64-bit registers per 4 floats for int64 ids), blended with `bit` under fcmgt masks.
/// Registers: v0-v7 and v16-v31 first; v8-v15 and x19-x28 only when a kernel needs more, and
/// then the frame saves them (AAPCS64 callee-saved: d8-d15, x19-x28).
class A64EmbagEmitter : private KernelEmitter {
 public:
  A64EmbagEmitter(const EmbagKey& key, asmjit::CodeHolder& code);
  /// Emits the whole kernel; throws shapejit::Error (kUnsupported / kInternalError).
  void generate();

  static constexpr int64_t kLanes = 4;   ///< floats per vector register
  static constexpr int64_t kBytes = 16;  ///< bytes per vector register

 private:
  using Block = EmbagBlock;  // columns [first_vec*4, ...); see embag_plan.hpp

  // Planning (no code emitted).
  void check_key() const;
  void plan_registers();
  int64_t regs_per_vec() const;           // slots one vector of columns needs (1, 2 or 3)
  int64_t vec_cols(int64_t v) const;      // columns covered by vector v (4, or the tail)
  int64_t id_regs_of(int64_t v) const;    // max mode: id registers for vector v

  // The named steps, in emission order.
  void emit_load_args();
  void emit_bag_loop();
  void emit_bag_bounds();
  void emit_block_at(const Block& blk, bool first_block);
  void emit_block_loop(const Block& blk);
  void emit_block(const Block& blk, bool first_block);
  void emit_row_head(const Block& blk, bool first_block, const asmjit::Label& skip);
  void emit_prefetch(const Block& blk);
  void emit_row_accumulate(const Block& blk);
  void emit_max_first(const Block& blk);      // embag_emitter_max.cpp
  void emit_max_update(const Block& blk);
  void emit_store(const Block& blk);          // embag_emitter_store.cpp
  void emit_store_max_indices(const Block& blk);
  void emit_bag_counts();
  void emit_finish();

  // Small helpers.
  int32_t vec_offset(int64_t v) const;  // bytes from weight_/out_ (shifted by blocks) to vector v
  void load_index(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& base, const asmjit::a64::Gp& pos,
                  DType type);
  void store_int(const asmjit::a64::Gp& value, const asmjit::a64::Gp& base, const asmjit::a64::Gp& pos);
  void add_imm(const asmjit::a64::Gp& dst, const asmjit::a64::Gp& src, int64_t value);
  void load_arg(const asmjit::a64::Gp& dst, size_t offset);
  void load_cols(uint32_t dst, const asmjit::a64::Gp& base, int64_t offset, int64_t cols);
  void store_cols(uint32_t src, const asmjit::a64::Gp& base, int64_t offset, int64_t bytes,
                  const asmjit::a64::Gp& lane_addr);
  void prefetch(const asmjit::a64::Gp& base, int64_t offset);
  void zero(uint32_t vec_id);
  bool is_tail(int64_t v) const { return v == num_vecs_ - 1 && tail_ != 0; }
  bool writes_offset2bag() const { return key_.mode != Mode::kSum || key_.padding; }
  bool counts() const { return key_.mode != Mode::kSum; }
  bool wide_ids() const { return out_size_ == 8; }

  EmbagKey key_;
  asmjit::a64::Assembler a_;
  int64_t num_vecs_ = 0, tail_ = 0;  // vectors per row; columns in the last one (0 = full)
  int64_t out_size_ = 8;             // bytes of one integer output element (and of a max id lane)
  std::vector<Block> blocks_;
  int64_t base_vec_ = 0;             // vector that weight_ and out_ point at (shifted blocks)

  RegPool gp_, vecs_;
  // General-purpose registers by role (see plan_registers for which exist in which key).
  asmjit::a64::Gp args_, weight_, stride_, indices_, offsets_, pos_, end_, row_, rowp_, scratch_,
      bag_, bag_end_, out_, last_pos_, pad_, psw_, count_, o2b_, block_end_;
  // Vector registers by role: acc_ holds sums or max values, one per vector of the block;
  // ids_lo_/ids_hi_ the max row ids (hi only with 64-bit ids, for columns 2-3).
  std::vector<uint32_t> acc_, ids_lo_, ids_hi_;
  uint32_t load0_ = 0, load1_ = 0;  // row vectors on their way to the accumulators
  uint32_t bcast_ = 0;   // per-sample weight (lane 0), mean divisor, max row id broadcast
  uint32_t mask_ = 0;    // max: fcmgt result
  uint32_t widen_ = 0;   // max, 64-bit ids: half of mask_ widened to 2 x 64-bit lanes
};

/// Emits the NEON kernel for `key` (key.isa == kNeon) into `code` (initialised for AArch64).
void emit_embag_kernel_a64(const EmbagKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
