// x86 embedding-bag code generator: one emitter for AVX-512 (zmm, k-mask tails) and AVX2
// (ymm, exact-width 16/8/4-byte tail moves), parameterised by the vector width.
#pragma once

#include <asmjit/x86.h>

#include <cstdint>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/embag_plan.hpp"
#include "jit/kernel_emitter.hpp"

namespace shapejit::jit {

/// What differs between the two x86 vector widths; the few instructions that differ
/// beyond this branch on `avx512`.
struct X86VecTraits {
  bool avx512;        ///< zmm + k masks, else ymm + exact-width tail moves
  int64_t lanes;      ///< floats per vector (16 or 8)
  int64_t bytes;      ///< bytes per vector (64 or 32)
  uint32_t num_regs;  ///< vector registers (32 or 16)

  /// Traits of `isa` (kAvx512 or kAvx2).
  static X86VecTraits of(Isa isa);
};

/// Emits the kernel for one EmbagKey into a CodeHolder initialised for x86-64.
///
/// Shape of the code: a loop over bags; per bag, the columns are split into blocks whose
/// accumulators fit the register file, and per block a loop over the bag's index positions
/// accumulates rows held in registers, then stores the block. Steps: load_args, bag_loop,
/// block (row_head, row_accumulate | max_first + max_update), store, bag_counts, finish.
/// With prefetch the bag loop exists twice: bags whose prefetches stay within the indices run
/// a copy that reads the index `prefetch` positions ahead without clamping it; the first bag
/// that would read past the last index continues, with every later bag, in a clamped copy.
///
/// Max mode keeps row ids in 32-bit lanes (half the blend work of 64-bit ones). With int64
/// indices a bag that meets a row id >= 2^31 restarts on a second copy of the bag body that
/// keeps 64-bit lanes, so ids of any size stay exact.
class X86EmbagEmitter : private KernelEmitter {
 public:
  X86EmbagEmitter(const EmbagKey& key, asmjit::CodeHolder& code);
  /// Emits the whole kernel; throws shapejit::Error (kUnsupported / kInternalError).
  void generate();

 private:
  using Block = EmbagBlock;  // columns [first_vec*lanes, ...); see embag_plan.hpp

  // Planning (no code emitted).
  void check_key() const;
  void plan_registers();
  void assign_slots(bool wide_ids);          // acc_/idx_* for the path about to be emitted
  int64_t vec_cols(int64_t v) const;          // columns covered by vector v (lanes, or the tail)
  int64_t index_regs_of(int64_t v) const;     // max mode: id registers for vector v
  bool has_wide_path() const;

  // The named steps, in emission order.
  void emit_load_args();
  void emit_bag_loop();
  void emit_bag_loop_copy(const asmjit::Label& done);
  void emit_bag_body(const std::vector<Block>& blocks);
  void emit_bag_bounds();
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
  asmjit::x86::Vec vec(uint32_t id) const;
  asmjit::x86::Mem row_mem(int64_t v) const;  // vector v of the current row
  int32_t vec_offset(int64_t v) const;         // bytes from weight_/out_ to vector v
  void load_index(const asmjit::x86::Gp& dst, const asmjit::x86::Gp& base,
                  const asmjit::x86::Gp& pos, DType type);
  void store_int(const asmjit::x86::Mem& dst, const asmjit::x86::Gp& value);
  void broadcast_row_id();
  void zero(uint32_t vec_id);
  void load_tail_avx2(const asmjit::x86::Vec& dst, const asmjit::x86::Mem& src,
                      const asmjit::x86::Xmm& spare);
  void store_tail_avx2(const asmjit::x86::Mem& dst, const asmjit::x86::Vec& src, int64_t count,
                       int64_t elem_bytes, const asmjit::x86::Xmm& spare);
  void store_ids64(const asmjit::x86::Mem& dst, const asmjit::x86::Vec& ids, int64_t n, int64_t half);
  bool is_tail(int64_t v) const { return v == num_vecs_ - 1 && tail_ != 0; }
  bool writes_offset2bag() const { return key_.mode != Mode::kSum || key_.padding; }
  bool counts() const { return key_.mode != Mode::kSum; }

  EmbagKey key_;
  X86VecTraits t_;
  asmjit::x86::Assembler a_;
  int64_t num_vecs_ = 0, tail_ = 0;  // vectors per row; columns in the last one (0 = full)
  int64_t out_size_ = 8;             // bytes of one integer output element
  std::vector<Block> blocks_;        // the main path
  std::vector<Block> wide_blocks_;   // max with 64-bit id lanes (only when has_wide_path())
  bool wide_ids_ = false;            // the path being emitted keeps 64-bit id lanes
  int64_t base_vec_ = 0;             // vector that weight_ and out_ point at (block loops)
  asmjit::Label wide_bag_;           // entry of the 64-bit-id bag body
  bool clamp_prefetch_ = true;       // the bag loop being emitted may prefetch past the last index
  asmjit::Label clamped_loop_;       // the clamped copy of the bag loop (invalid: no fast copy)

  RegPool gp_, vecs_, kregs_;
  // General-purpose registers by role (see plan_registers for which exist in which key).
  asmjit::x86::Gp args_, weight_, stride_, indices_, pos_, end_, row_, scratch_, last_pos_,
      pad_, psw_, count_, o2b_, bag_, out_, block_end_;
  // Vector registers by role. slots_ are handed to acc_/idx_lo_/idx_hi_ per path.
  std::vector<uint32_t> slots_;
  std::vector<uint32_t> acc_;                // sum/mean accumulators or max values, per vector
  std::vector<uint32_t> idx_lo_, idx_hi_;    // max: row ids (hi only for 64-bit lanes)
  uint32_t bcast_ = 0;   // weight / mean divisor / row id broadcast
  uint32_t xtmp_ = 0;    // loaded row vector (max; AVX2 tails); widened ids at store time
  uint32_t xtmp2_ = 0;   // AVX2 sum tails wider than 4: the upper part
  uint32_t vcmp_ = 0;    // AVX2 max compare result; spare at load and store time
  uint32_t widen_ = 0;   // AVX2 max, 64-bit lanes: compare mask widened to 64-bit lanes
  asmjit::x86::KReg k_tail_, k_cmp_, k_hi_;
};

/// Emits the x86 kernel for `key` (key.isa is kAvx512 or kAvx2) into `code`.
void emit_embag_kernel_x86(const EmbagKey& key, asmjit::CodeHolder& code);

}  // namespace shapejit::jit
