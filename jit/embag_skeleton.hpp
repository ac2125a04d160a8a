// The ISA-neutral skeleton of every embedding-bag kernel: the control flow (bag loop, bag
// bounds, offset2bag, column blocks, row loop, padding and pruning skips, counts, the max
// first-row copy and update order, stores) written once against a small set of primitives
// that each back end (jit/x86, jit/a64) supplies.
#pragma once

#include <asmjit/core.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/embag_plan.hpp"
#include "jit/kernel_emitter.hpp"

namespace shapejit::jit {

/// General-purpose registers by role. Back ends map each role they use to a physical register
/// (kId and kRow may share one: a back end that never needs the index as given after pruning).
enum class EmbagGp : uint8_t {
  kWeight,    ///< table base (shifted right inside column blocks)
  kStride,    ///< row stride in bytes
  kIndices,   ///< index array
  kPos,       ///< current index position; holds a bag's start as the bag begins (carried: emit_bag_loop)
  kEnd,       ///< end position of the current bag
  kId,        ///< the index as given at kPos (padding test, max ids)
  kRow,       ///< the table row of kId (mapping[id] when pruned)
  kScratch,   ///< free between steps
  kBag,       ///< current bag
  kOut,       ///< output row of the current bag (shifted right inside column blocks)
  kLastPos,   ///< num_indices - 1 (prefetch clamp)
  kPad,       ///< padding_idx
  kCount,     ///< positions counted in the bag (mean, max)
  kBlockEnd,  ///< end of a run-time column-block loop (compared with kOut)
  // Two bags in flight (pairs_bags()): the second bag's position and end, and the end of the
  // positions both bags run together (kPos + the shorter length).
  kPos2,
  kEnd2,
  kPairEnd,
  kNum
};

/// Branch conditions of EmbagSkeleton::branch (signed unless named unsigned).
enum class EmbagCond : uint8_t { kEq, kLt, kGe, kGt, kBelow /* unsigned < */ };

/// Right-hand operand of a compare or the base of an integer load/store: a role register, a
/// field of EmbagKernelArgs (by offset; a back end may keep some in registers), or an immediate.
struct EmbagSrc {
  enum class Kind : uint8_t { kReg, kArg, kImm };
  Kind kind = Kind::kImm;
  EmbagGp reg = EmbagGp::kNum;
  size_t arg = 0;
  int64_t imm = 0;

  static EmbagSrc of(EmbagGp r) { return {Kind::kReg, r, 0, 0}; }
  static EmbagSrc field(size_t offset) { return {Kind::kArg, EmbagGp::kNum, offset, 0}; }
  static EmbagSrc value(int64_t v) { return {Kind::kImm, EmbagGp::kNum, 0, v}; }
};

#define SJ_EMBAG_FIELD(name) ::shapejit::jit::EmbagSrc::field(offsetof(::shapejit::jit::EmbagKernelArgs, name))

/// The kernel skeleton. generate() emits, in this order: prologue, load_args, the bag loop
/// (per bag: bounds; per column block: row loop of row_head + accumulate | max first/update;
/// store), bag counts, epilogue.
///
/// Copies of the bag loop: with prefetch, a first copy reads the index `prefetch` positions
/// ahead without clamping it, for bags whose prefetches stay within the indices; the first bag
/// that would read past the last index continues, with every later bag, in a clamped copy
/// (offsets are non-decreasing). Max mode with int64 ids keeps row ids in 32-bit lanes (half
/// the blend work); a bag that meets an id >= 2^31 restarts on a second bag body with 64-bit
/// lanes, so ids of any size stay exact.
///
/// Two bags in flight (pairs_bags(), the rule is embag_pairs_bags): bags b and b + 1 are
/// adjacent in the indices and in the output, so while both have rows left, row j of each is
/// accumulated in the same iteration into its own accumulators (two independent add chains);
/// the longer bag's remaining rows then run alone, and both rows are stored (mean: both bags'
/// offset2bag entries first, each count from the pair's bounds at its store). An odd bag at the
/// end of the range runs the one-bag body. The second bag is emitted with the same primitives
/// under swapped roles (kPos/kPos2, kEnd/kEnd2), its own accumulators and an output
/// displacement of one row (use_side).
///
/// Back ends derive from it and implement the primitives below; the arithmetic order per column
/// (sum from +0.0 in index order, one FMA per weighted row, one division for mean, max by an
/// ordered `x > current` after copying the first row) is fixed here, so every ISA gives
/// bitwise equal results.
class EmbagSkeleton : protected KernelEmitter {
 public:
  /// Emits the whole kernel; throws shapejit::Error (kUnsupported / kInternalError).
  void generate();

 protected:
  using Label = asmjit::Label;
  using G = EmbagGp;

  EmbagSkeleton(const EmbagKey& key, asmjit::CodeHolder& code, int64_t lanes);
  virtual ~EmbagSkeleton() = default;

  // --- Queries the back ends share ------------------------------------------------------------
  const EmbagKey& key() const { return key_; }
  int64_t lanes() const { return lanes_; }
  int64_t num_vecs() const { return num_vecs_; }
  int64_t tail() const { return tail_; }          ///< columns in the last vector (0 = full)
  int64_t out_size() const { return out_size_; }  ///< bytes of an integer output element
  bool is_tail(int64_t v) const { return v == num_vecs_ - 1 && tail_ != 0; }
  int64_t vec_cols(int64_t v) const { return is_tail(v) ? tail_ : lanes_; }
  /// Max keeps each column's winning row id (for max_indices).
  bool tracks_ids() const { return key_.mode == Mode::kMax && key_.index_outputs; }
  /// The bag's count is needed: mean divides by it; max only stores it (bag_size).
  bool counts() const { return key_.mode == Mode::kMean || tracks_ids(); }
  bool counts_in_loop() const { return counts() && (key_.padding || key_.pruned); }
  bool writes_offset2bag() const { return key_.index_outputs && (key_.mode != Mode::kSum || key_.padding); }
  /// Max with int64 ids: the restart path with 64-bit id lanes exists.
  bool has_wide_path() const { return tracks_ids() && out_size_ == 8 && key_.index == DType::kI64; }
  bool wide_ids() const { return wide_ids_; }  ///< the path being emitted keeps 64-bit id lanes
  /// Max: id registers of vector v on the current path (2 when 64-bit lanes need two halves).
  int64_t id_regs_of(int64_t v) const { return wide_ids_ && vec_cols(v) > lanes_ / 2 ? 2 : 1; }
  /// Bytes from kWeight (shifted inside blocks) to column `col` of the row, and from kOut to
  /// output column `col`.
  int64_t row_disp(int64_t col) const { return embag_col_bytes(key_.table, col) - embag_col_bytes(key_.table, base_col_); }
  int64_t out_disp(int64_t col) const {
    return embag_col_bytes(key_.out, col) - embag_col_bytes(key_.out, base_col_) + side_ * out_row_bytes();
  }
  /// Bytes from one output row to the next (the key's row stride, else dense rows).
  int64_t out_row_bytes() const { return embag_col_bytes(key_.out, key_.out_stride != 0 ? key_.out_stride : key_.dim); }
  /// Bytes an output row's stride adds to its values (0 for dense rows): max_indices stays dense.
  int64_t out_row_gap_bytes() const { return out_row_bytes() - embag_col_bytes(key_.out, key_.dim); }
  int64_t base_col() const { return base_col_; }
  /// The block being emitted runs in a run-time block loop: kWeight then moves right by a
  /// block per iteration, so only the block's own columns are at a fixed row_disp; anything
  /// else of the row (a quantized row's trailer) must be addressed from the unshifted base.
  bool in_block_loop() const { return in_block_loop_; }

  /// Vector registers of the path being emitted: per vector j of a block, the accumulator (sum)
  /// or running max, and (max) the row ids (hi only with 64-bit lanes: the upper columns).
  /// With two bags in flight, acc(j) is the accumulator of the bag being emitted (use_side).
  uint32_t acc(int64_t j) const { return acc_[size_t(j + side_ * pair_stride_)]; }
  uint32_t ids_lo(int64_t j) const { return ids_lo_.at(size_t(j)); }
  uint32_t ids_hi(int64_t j) const { return ids_hi_.at(size_t(j)); }

  /// Planning step for back ends: splits the row into blocks given `free_vecs` vector registers
  /// for accumulators and ids; returns how many of them the widest block needs (take exactly
  /// that many, in order, and pass them to set_slots). It decides pairs_bags() too: the back
  /// end then maps kPos2, kEnd2 and kPairEnd.
  int64_t plan_blocks(int64_t free_vecs);
  void set_slots(std::vector<uint32_t> slots) { slots_ = std::move(slots); }
  /// A run-time block loop exists (the back end then provides kBlockEnd).
  bool needs_block_end() const;
  /// Two bags in flight (see the class comment).
  bool pairs_bags() const { return pairs_; }
  const std::vector<EmbagBlock>& blocks() const { return blocks_; }

  asmjit::BaseEmitter& emitter() { return *e_; }

  // --- Primitives: planning and frame ---------------------------------------------------------
  virtual asmjit::BaseEmitter& attach_assembler() = 0;   ///< the back end's assembler
  virtual void check_isa() const = 0;                    ///< key ISA vs CodeHolder arch
  virtual void plan_registers() = 0;                     ///< roles, then plan_blocks/set_slots
  virtual void emit_prolog_frame() = 0;                  ///< emit_prolog with the back end's pools
  virtual void load_args() = 0;                          ///< role registers from EmbagKernelArgs

  // --- Primitives: integer work and branches ----------------------------------------------------
  virtual void gp_add(G dst, G src, int64_t imm) = 0;    ///< dst = src + imm
  virtual void gp_sub(G dst, G a, G b) = 0;              ///< dst = a - b
  virtual void gp_zero(G dst) = 0;
  /// From here on role `a` names the register of role `b` and the other way round (the second
  /// bag of a pair is emitted with kPos/kEnd swapped with kPos2/kEnd2).
  virtual void swap_roles(G a, G b) = 0;
  virtual void gp_min(G dst, G limit) = 0;               ///< dst = min(dst, limit), signed
  virtual void load_arg(G dst, size_t offset) = 0;       ///< dst = *(int64*)(args + offset)
  /// dst = base[pos] for an element of `type` (i32 sign-extended); `base` is a role or a field.
  virtual void load_int(G dst, EmbagSrc base, G pos, DType type) = 0;
  /// base[pos] = value as an integer output element (out_size() bytes).
  virtual void store_int(EmbagSrc base, G pos, G value) = 0;
  virtual void branch(EmbagCond cond, G a, EmbagSrc b, const Label& target) = 0;
  virtual void jump(const Label& target) = 0;
  /// Branch when kId does not fit a 32-bit id lane (unsigned id > 2^31 - 1).
  virtual void branch_if_wide_id(const Label& target) = 0;

  // --- Primitives: rows, prefetch, pruning ------------------------------------------------------
  /// offset2bag entries one vector register holds (emit_offset2bag_fill).
  virtual int64_t offset2bag_lanes() const = 0;
  virtual void broadcast_bag(uint32_t vec) = 0;          ///< kBag in every offset2bag lane of vec
  /// offset2bag[pos, pos + offset2bag_lanes()) = the lanes of vec (broadcast_bag).
  virtual void store_bag_vector(uint32_t vec, G pos) = 0;
  virtual void store_offset2bag_at(G pos) = 0;           ///< offset2bag[pos] = kBag
  /// kScratch = indices[pos + prefetch] (the position is known to be in range).
  virtual void load_index_ahead() = 0;
  /// dst = mapping[id] (int32, sign-extended); `tmp` is a role free at this point.
  virtual void map_row(G dst, G id, G tmp) = 0;
  /// Prefetches bytes [begin, begin + len) of row kScratch (relative to kWeight); clobbers kScratch.
  virtual void prefetch_row(int64_t begin, int64_t len) = 0;
  virtual void form_row_address() = 0;                   ///< kRow -> the row's address form
  virtual void zero_vec(uint32_t vec) = 0;

  // --- Primitives: max mode ---------------------------------------------------------------------
  // Row ids (tracks_ids() only):
  virtual void broadcast_row_id() = 0;                   ///< the id of kPos, in id lanes
  virtual void copy_row_id(int64_t j, int64_t v) = 0;    ///< ids of vector j := the broadcast id
  virtual uint32_t max_input() const = 0;                ///< where max_update's row vector is loaded
  /// Lanes of vector j where max_input() > current (ordered) take it, and the broadcast id when
  /// tracks_ids().
  virtual void max_blend(int64_t j, int64_t v) = 0;
  /// Stores the block's ids to max_indices (64-bit outputs from 32-bit lanes zero-extended).
  virtual void store_max_ids(const EmbagBlock& blk) = 0;

  // --- Primitives: table dtype (one place per back end) -----------------------------------------
  virtual void row_setup() = 0;                          ///< once per row after form_row_address
  /// Accumulates columns [first_col, first_col + cols) of the row into acc(0..) of the block.
  virtual void accumulate(const EmbagBlock& blk) = 0;
  /// Loads columns [first_col, first_col + cols) (cols <= lanes) of the row as f32 into `dst`.
  virtual void load_value(uint32_t dst, int64_t first_col, int64_t cols) = 0;
  virtual void mean_divisor() = 0;                       ///< once per block, from kCount
  virtual void mean_finish(uint32_t acc) = 0;            ///< acc /= divisor
  /// Stores `cols` columns of f32 `src` at output column `first_col`, converted to key.out.
  virtual void store_output(uint32_t src, int64_t first_col, int64_t cols) = 0;

 private:
  // The steps, in emission order.
  void emit_bag_loop();
  void emit_bag_loop_copy(const Label& done);
  void emit_bag_body(const std::vector<EmbagBlock>& blocks);
  void emit_bag_bounds();
  void emit_bag_end(G dst, int64_t ahead);
  void emit_clamp_check(G end);
  void emit_block_at(const EmbagBlock& blk, bool first_block);
  void emit_block_loop(const EmbagBlock& blk);
  void emit_block(const EmbagBlock& blk, bool first_block);
  void emit_sum_rows(const EmbagBlock& blk, bool first_block);
  void emit_max_rows(const EmbagBlock& blk, bool first_block);
  void emit_pair_body(const EmbagBlock& blk);
  void emit_pair_bounds();
  void use_side(int64_t side);  // 0: the bag at kBag, 1: the pair's second bag
  void emit_row_head(const EmbagBlock& blk, bool first_block, const Label& skip);
  void emit_prefetch(const EmbagBlock& blk);
  void emit_late_prefetch(const EmbagBlock& blk);
  void emit_row_accumulate(const EmbagBlock& blk);
  void emit_max_first(const EmbagBlock& blk);
  void emit_max_update(const EmbagBlock& blk);
  void emit_store(const EmbagBlock& blk);
  void emit_bag_counts(G bag = G::kBag);
  void emit_pair_count(int64_t side);
  void emit_offset2bag_fill(uint32_t tmp);
  void use_path(bool wide_ids);
  void rebase(int64_t col);  // moves kWeight and kOut to column `col`

  EmbagKey key_;
  int64_t lanes_;
  int64_t num_vecs_ = 0, tail_ = 0, out_size_ = 8;
  asmjit::BaseEmitter* e_ = nullptr;
  std::vector<EmbagBlock> blocks_;       // the main path
  std::vector<EmbagBlock> wide_blocks_;  // max with 64-bit id lanes (only when has_wide_path())
  std::vector<uint32_t> slots_, acc_, ids_lo_, ids_hi_;
  bool wide_ids_ = false;
  bool pairs_ = false;              // two bags in flight
  int64_t side_ = 0;                // the pair's bag being emitted
  int64_t pair_stride_ = 0;         // accumulators of the second bag start at acc_[this]
  int64_t base_col_ = 0;            // column that kWeight and kOut point at
  bool clamp_prefetch_ = true;      // the bag loop being emitted clamps prefetch positions
  bool in_block_loop_ = false;      // emit_block_loop is emitting its block
  bool prefetch_late_ = false;      // the row loop being emitted prefetches after the row
  Label clamped_loop_;              // the clamped copy (invalid: this is that copy)
  Label wide_bag_;                  // entry of the 64-bit-id bag body

 protected:
  /// Back ends that address a row by small immediates only (a64) rebase kWeight/kOut for every
  /// block right of column 0; x86's 32-bit displacements reach any block.
  bool rebase_static_blocks_ = false;
  /// Sum rows (weighted, mean, pairs) issue a row's prefetches after its loads, at the loop's
  /// tail, instead of before them. Set by back ends where that measured faster: AVX2 on the EPYC host,
  /// kernel alone on L3-resident tables, +3-10 % GB/s at D = 64..256 with the other core idle,
  /// equal within noise with it busy (the row's demand loads no longer queue behind the
  /// prefetches of a row `prefetch` positions ahead). Max rows keep the head.
  bool prefetch_after_row_ = false;
};

}  // namespace shapejit::jit
