// EmbagSkeleton: see embag_skeleton.hpp. Everything here is control flow and order; every
// instruction is a back-end primitive.
#include "jit/embag_skeleton.hpp"

#include <algorithm>
#include <utility>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

EmbagSkeleton::EmbagSkeleton(const EmbagKey& key, CodeHolder& code, int64_t lanes)
    : KernelEmitter(code, key.name()), key_(key), lanes_(lanes) {}

void EmbagSkeleton::generate() {
  e_ = &attach_assembler();
  attach(*e_);
  check_isa();
  if (const auto why = embag_key_unsupported_reason(key_)) unsupported(*why);
  num_vecs_ = (key_.dim + lanes_ - 1) / lanes_;
  tail_ = key_.dim % lanes_;
  out_size_ = key_.index_out() == DType::kI32 ? 4 : 8;
  plan_registers();
  emit_prolog_frame();
  load_args();
  check("load_args");
  emit_bag_loop();
  emit_epilog();
  check("finish");
}

// Planning --------------------------------------------------------------------------------------

// max with ids: value + 32-bit ids per vector; the wide path: value + two 64-bit id halves.
int64_t EmbagSkeleton::plan_blocks(int64_t free_vecs) {
  const bool ids = tracks_ids();
  blocks_ = split_embag_blocks(num_vecs_, ids ? free_vecs / 2 : free_vecs);
  int64_t need = 0;
  for (const EmbagBlock& b : blocks_) need = std::max(need, b.num_vecs * (ids ? 2 : 1));
  if (has_wide_path()) {
    wide_blocks_ = split_embag_blocks(num_vecs_, free_vecs / 3);
    for (const EmbagBlock& b : wide_blocks_) need = std::max(need, b.num_vecs * 3);
  }
  pairs_ = embag_pairs_bags(key_, num_vecs_, free_vecs) && blocks_.size() == 1;
  if (pairs_) {  // the second bag's accumulators follow the first's
    pair_stride_ = num_vecs_;
    need = 2 * num_vecs_;
  }
  return need;
}

bool EmbagSkeleton::needs_block_end() const {
  for (const auto* plan : {&blocks_, &wide_blocks_})
    for (const EmbagBlock& b : *plan)
      if (b.repeat > 1) return true;
  return false;
}

// Hands the slots to the roles of one path: 1 (sum), 2 (max, 32-bit ids) or 3 (64-bit ids)
// registers per vector of columns.
void EmbagSkeleton::use_path(bool wide_ids) {
  wide_ids_ = wide_ids;
  const size_t per = !tracks_ids() ? 1 : wide_ids ? 3 : 2;
  acc_.clear(), ids_lo_.clear(), ids_hi_.clear();
  for (size_t j = 0; (j + 1) * per <= slots_.size(); ++j) {
    acc_.push_back(slots_[j * per]);
    if (per >= 2) ids_lo_.push_back(slots_[j * per + 1]);
    if (per == 3) ids_hi_.push_back(slots_[j * per + 2]);
  }
}

// Step: bag loop --------------------------------------------------------------------------------

// With prefetch the loop exists twice (see the class comment): the unclamped copy saves the
// clamp of the prefetch position (2 of ~13 instructions per index at D=32 on x86; +7 % GB/s
// there, +3 % at D=64).
//
// kPos enters every bag holding the bag's start, offsets[kBag]: loaded here for the first bag,
// then carried. A bag starts where the one before it ends, and every row loop stops with kPos at
// kEnd exactly (it steps by one from a start <= kEnd; offsets are non-decreasing), so the next
// start is already in kPos, counted rather than loaded: the row addresses never wait on an
// offsets load, as FBGEMM's index pointer walks on. Loading offsets[kBag] at each bag, after the
// previous bag's output stores, headed the bag's address chain (offset, index, row); taking kEnd
// (itself a load) still cost a third of that. Zen 5, kernel alone, 2048 bags x 4 at D = 32:
// 7.7-8.4 us reloaded, 6.8-6.9 from kEnd, 6.5-6.8 counted (FBGEMM's kernel 6.3-6.6); 256 x 32
// 5.4-5.7 -> 5.1-5.4 (FBGEMM 5.3-5.6).
void EmbagSkeleton::emit_bag_loop() {
  Label done = e_->newLabel();
  branch(EmbagCond::kGe, G::kBag, SJ_EMBAG_FIELD(bag_end), done);
  load_int(G::kPos, SJ_EMBAG_FIELD(offsets), G::kBag, key_.offset);  // kBag < bag_end: in range
  if (key_.prefetch > 0) {
    clamp_prefetch_ = false;
    clamped_loop_ = e_->newLabel();
    emit_bag_loop_copy(done);
    e_->bind(clamped_loop_);
    clamped_loop_ = Label();
  }
  clamp_prefetch_ = true;
  emit_bag_loop_copy(done);
  e_->bind(done);
  check("bag_loop");
}

// One copy of the loop over bags [bag, bag_end), entered with at least one bag left.
void EmbagSkeleton::emit_bag_loop_copy(const Label& done) {
  Label bag_top = e_->newLabel(), bag_done = e_->newLabel();
  if (has_wide_path()) wide_bag_ = e_->newLabel();
  e_->align(AlignMode::kCode, 16);
  e_->bind(bag_top);
  use_path(false);
  if (pairs_) {  // two bags when two are left; an odd last bag falls through to one
    Label single = e_->newLabel();
    gp_add(G::kRow, G::kBag, 1);
    branch(EmbagCond::kGe, G::kRow, SJ_EMBAG_FIELD(bag_end), single);
    emit_pair_body(blocks_.front());
    gp_add(G::kPos, G::kPos2, 0);  // the next bag starts where the pair's second stopped
    gp_add(G::kOut, G::kOut, 2 * out_row_bytes());
    gp_add(G::kBag, G::kBag, 2);
    branch(EmbagCond::kLt, G::kBag, SJ_EMBAG_FIELD(bag_end), bag_top);
    jump(done);
    e_->bind(single);
  }
  emit_bag_body(blocks_);
  e_->bind(bag_done);
  emit_bag_counts();  // kPos is the next bag's start (emit_bag_loop)
  gp_add(G::kOut, G::kOut, out_row_bytes());
  gp_add(G::kBag, G::kBag, 1);
  branch(EmbagCond::kLt, G::kBag, SJ_EMBAG_FIELD(bag_end), bag_top);
  if (!clamp_prefetch_ || has_wide_path()) jump(done);  // the clamped copy ends at `done`
  if (has_wide_path()) {  // the bag again from the start, with 64-bit id lanes
    e_->bind(wide_bag_);
    use_path(true);
    load_int(G::kPos, SJ_EMBAG_FIELD(offsets), G::kBag, key_.offset);
    emit_bag_body(wide_blocks_);
    jump(bag_done);
  }
}

void EmbagSkeleton::emit_bag_body(const std::vector<EmbagBlock>& blocks) {
  emit_bag_bounds();
  for (size_t b = 0; b < blocks.size(); ++b) emit_block_at(blocks[b], b == 0);
}

// dst = the end of bag kBag + ahead - 1: offsets[kBag + ahead] when that offset exists, else
// num_indices (the last bag). Clobbers kRow.
void EmbagSkeleton::emit_bag_end(G dst, int64_t ahead) {
  Label last = e_->newLabel(), have_end = e_->newLabel();
  gp_add(G::kRow, G::kBag, ahead);
  branch(EmbagCond::kGe, G::kRow, SJ_EMBAG_FIELD(num_offsets), last);
  load_int(dst, SJ_EMBAG_FIELD(offsets), G::kRow, key_.offset);
  jump(have_end);
  e_->bind(last);
  load_arg(dst, offsetof(EmbagKernelArgs, num_indices));
  e_->bind(have_end);
}

// In the unclamped copy: the bags ending at `end` move to the clamped copy when the prefetch of
// their last position would read past the last index. Clobbers kRow.
void EmbagSkeleton::emit_clamp_check(G end) {
  if (!clamped_loop_.isValid()) return;
  gp_add(G::kRow, end, key_.prefetch - 1);
  branch(EmbagCond::kGt, G::kRow, EmbagSrc::of(G::kLastPos), clamped_loop_);
}

void EmbagSkeleton::emit_bag_bounds() {
  emit_bag_end(G::kEnd, 1);
  emit_clamp_check(G::kEnd);
  if (counts_in_loop()) gp_zero(G::kCount);  // counted in the first block's row loop
}

// Step: column blocks -------------------------------------------------------------------------

void EmbagSkeleton::rebase(int64_t col) {
  gp_add(G::kWeight, G::kWeight, embag_col_bytes(key_.table, col) - embag_col_bytes(key_.table, base_col_));
  gp_add(G::kOut, G::kOut, embag_col_bytes(key_.out, col) - embag_col_bytes(key_.out, base_col_));
  base_col_ = col;
}

void EmbagSkeleton::emit_block_at(const EmbagBlock& blk, bool first_block) {
  if (blk.repeat > 1) return emit_block_loop(blk);
  const bool shift = rebase_static_blocks_ && blk.first_vec != 0;
  if (shift) rebase(blk.first_vec * lanes_);
  emit_block(blk, first_block);
  if (shift) rebase(0);
}

// Runs one block shape `repeat` times, moving kWeight and kOut right by a block each time.
void EmbagSkeleton::emit_block_loop(const EmbagBlock& blk) {
  const int64_t cols = blk.num_vecs * lanes_;
  const int64_t row_step = embag_col_bytes(key_.table, cols), out_step = embag_col_bytes(key_.out, cols);
  rebase(blk.first_vec * lanes_);
  gp_add(G::kBlockEnd, G::kOut, blk.repeat * out_step);
  Label loop = e_->newLabel();
  e_->align(AlignMode::kCode, 16);
  e_->bind(loop);
  in_block_loop_ = true;
  emit_block(blk, false);
  in_block_loop_ = false;
  gp_add(G::kWeight, G::kWeight, row_step);
  gp_add(G::kOut, G::kOut, out_step);
  branch(EmbagCond::kBelow, G::kOut, EmbagSrc::of(G::kBlockEnd), loop);
  // Back to column 0 from the column after the loop's last block.
  base_col_ = blk.first_vec * lanes_ + blk.repeat * cols;
  rebase(0);
}

// One column block of one bag: the row loop (two for max: the first counted row is copied, the
// others compared), then the store.
void EmbagSkeleton::emit_block(const EmbagBlock& blk, bool first_block) {
  // The first block finds the bag's start in kPos (emit_bag_loop); the others walk it again.
  if (!first_block) load_int(G::kPos, SJ_EMBAG_FIELD(offsets), G::kBag, key_.offset);
  // The bag's offset2bag entries in vector stores before its rows (a store per row measured
  // 4-6 % of mean and max at D = 32..64 on the Zen 5 host); acc(0) is zeroed below.
  if (first_block && writes_offset2bag()) emit_offset2bag_fill(acc(0));
  if (first_block && counts() && !counts_in_loop()) gp_sub(G::kCount, G::kEnd, G::kPos);
  // +0.0 starts the sums; for max, 0.0 and row id 0 are what an empty bag stores.
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    zero_vec(acc(j));
    if (!tracks_ids()) continue;
    zero_vec(ids_lo(j));
    if (id_regs_of(blk.first_vec + j) == 2) zero_vec(ids_hi(j));
  }
  if (key_.mode != Mode::kMax) emit_sum_rows(blk, first_block);
  else emit_max_rows(blk, first_block);
  emit_store(blk);
  check("block");
}

// Rows [kPos, kEnd) added in order (sum, mean).
void EmbagSkeleton::emit_sum_rows(const EmbagBlock& blk, bool first_block) {
  Label done = e_->newLabel();
  Label loop = e_->newLabel(), next = e_->newLabel();
  branch(EmbagCond::kGe, G::kPos, EmbagSrc::of(G::kEnd), done);
  e_->align(AlignMode::kCode, 16);
  e_->bind(loop);
  prefetch_late_ = prefetch_after_row_;
  emit_row_head(blk, first_block, next);
  emit_row_accumulate(blk);
  e_->bind(next);
  emit_late_prefetch(blk);
  prefetch_late_ = false;
  gp_add(G::kPos, G::kPos, 1);
  branch(EmbagCond::kLt, G::kPos, EmbagSrc::of(G::kEnd), loop);
  e_->bind(done);
}

void EmbagSkeleton::emit_max_rows(const EmbagBlock& blk, bool first_block) {
  Label done = e_->newLabel();
  branch(EmbagCond::kGe, G::kPos, EmbagSrc::of(G::kEnd), done);
  auto step = [&](const Label& loop) {
    gp_add(G::kPos, G::kPos, 1);
    branch(EmbagCond::kLt, G::kPos, EmbagSrc::of(G::kEnd), loop);
  };
  Label first_loop = e_->newLabel(), first_next = e_->newLabel();
  Label loop = e_->newLabel(), next = e_->newLabel();
  e_->bind(first_loop);
  emit_row_head(blk, first_block, first_next);
  emit_max_first(blk);
  jump(next);
  e_->bind(first_next);
  step(first_loop);
  jump(done);
  e_->align(AlignMode::kCode, 16);
  e_->bind(loop);
  emit_row_head(blk, first_block, next);
  emit_max_update(blk);
  e_->bind(next);
  step(loop);
  e_->bind(done);
}

// Step: two bags in flight ----------------------------------------------------------------------

// The pair's bag being emitted: its position and end roles, accumulators and output row.
void EmbagSkeleton::use_side(int64_t side) {
  if (side == side_) return;
  swap_roles(G::kPos, G::kPos2);
  swap_roles(G::kEnd, G::kEnd2);
  side_ = side;
}

// Bags kBag and kBag + 1 (both in range): kPos..kEnd and kPos2 = kEnd..kEnd2. The unclamped
// copy hands the pair to the clamped one when the second bag's prefetches would read past the
// last index (the first bag's end before it).
void EmbagSkeleton::emit_pair_bounds() {
  emit_bag_end(G::kEnd, 1);
  emit_bag_end(G::kEnd2, 2);
  emit_clamp_check(G::kEnd2);
  gp_add(G::kPos2, G::kEnd, 0);  // kPos holds the first bag's start (emit_bag_loop)
  // kPairEnd = kPos + min(L0, L1) = min(kEnd, kEnd2 - L0), with L0 = kEnd - kPos.
  gp_sub(G::kPairEnd, G::kEnd, G::kPos);
  gp_sub(G::kPairEnd, G::kEnd2, G::kPairEnd);
  gp_min(G::kPairEnd, G::kEnd);
}

// The joint loop (row j of each bag per iteration, first bag first), the longer bag's rest
// (the other's loop is skipped at its entry), then both stores. Mean first writes both bags'
// offset2bag entries (bag kBag + side).
void EmbagSkeleton::emit_pair_body(const EmbagBlock& blk) {
  emit_pair_bounds();
  if (writes_offset2bag()) {
    emit_offset2bag_fill(acc(0));
    use_side(1);
    gp_add(G::kBag, G::kBag, 1);
    emit_offset2bag_fill(acc(0));
    gp_add(G::kBag, G::kBag, -1);
    use_side(0);
  }
  for (int64_t side : {0, 1}) {
    use_side(side);
    for (int64_t j = 0; j < blk.num_vecs; ++j) zero_vec(acc(j));
  }
  use_side(0);
  Label joint = e_->newLabel(), joint_done = e_->newLabel();
  branch(EmbagCond::kGe, G::kPos, EmbagSrc::of(G::kPairEnd), joint_done);
  e_->align(AlignMode::kCode, 16);
  e_->bind(joint);
  prefetch_late_ = prefetch_after_row_;
  for (int64_t side : {0, 1}) {
    use_side(side);
    Label next = e_->newLabel();  // no skips in pair keys (no padding, no pruning)
    emit_row_head(blk, true, next);
    emit_row_accumulate(blk);
    e_->bind(next);
    emit_late_prefetch(blk);
  }
  prefetch_late_ = false;
  use_side(0);
  gp_add(G::kPos, G::kPos, 1);
  gp_add(G::kPos2, G::kPos2, 1);
  branch(EmbagCond::kLt, G::kPos, EmbagSrc::of(G::kPairEnd), joint);
  e_->bind(joint_done);
  emit_sum_rows(blk, true);
  use_side(1);
  emit_sum_rows(blk, true);
  emit_pair_count(1);
  emit_store(blk);
  use_side(0);
  emit_pair_count(0);
  emit_store(blk);
  check("pair");
}

// Mean: kCount = the length of the pair's bag kBag + side (pair keys skip no position), its
// bag_size and max_indices entries written, before emit_store divides by it. Under side 1 kEnd
// is the second bag's end and kEnd2 the first's, where the second starts; the first starts at
// offsets[kBag]. Clobbers kRow.
void EmbagSkeleton::emit_pair_count(int64_t side) {
  if (!counts()) return;
  if (side == 1) {
    gp_sub(G::kCount, G::kEnd, G::kEnd2);
  } else {
    load_int(G::kCount, SJ_EMBAG_FIELD(offsets), G::kBag, key_.offset);
    gp_sub(G::kCount, G::kEnd, G::kCount);
  }
  gp_add(G::kRow, G::kBag, side);
  emit_bag_counts(G::kRow);
}

// Step: the head of one position -------------------------------------------------------------

// Prefetch, the index, the padding skip (on the index as given), the wide-id restart, the
// pruning skip, the count. Only the first block writes offset2bag (emit_block) and counts, and
// meets every id of the bag before any other block runs (it is never inside a block loop, so
// kWeight and kOut are unshifted when it restarts the bag).
void EmbagSkeleton::emit_row_head(const EmbagBlock& blk, bool first_block, const Label& skip) {
  if (key_.prefetch > 0 && !prefetch_late_) emit_prefetch(blk);
  load_int(G::kId, EmbagSrc::of(G::kIndices), G::kPos, key_.index);
  if (key_.padding) branch(EmbagCond::kEq, G::kId, EmbagSrc::of(G::kPad), skip);
  if (first_block && has_wide_path() && !wide_ids_) branch_if_wide_id(wide_bag_);
  if (key_.pruned) {
    map_row(G::kRow, G::kId, G::kScratch);
    branch(EmbagCond::kEq, G::kRow, EmbagSrc::value(-1), skip);
  }
  if (first_block && counts_in_loop()) gp_add(G::kCount, G::kCount, 1);
}

// Prefetches this block's bytes of the row `prefetch` positions ahead. The index array is never
// read past its end: the clamped copy clamps the position to the last index; the other runs only
// bags whose positions + prefetch stay within it (emit_bag_bounds). The last block also covers
// a quantized row's trailer (scale and bias). A key with prefetch_head prefetches only the head
// of the block (f32 rows; embag_key_unsupported_reason refuses it elsewhere).
void EmbagSkeleton::emit_prefetch(const EmbagBlock& blk) {
  if (clamp_prefetch_) {
    gp_add(G::kScratch, G::kPos, key_.prefetch);
    gp_min(G::kScratch, G::kLastPos);
    load_int(G::kScratch, EmbagSrc::of(G::kIndices), G::kScratch, key_.index);
  } else {
    load_index_ahead();
  }
  if (key_.pruned) map_row(G::kScratch, G::kScratch, G::kRow);  // kRow is free before the index
  const int64_t first = blk.first_vec * lanes_;
  const int64_t end = std::min(key_.dim, (blk.first_vec + blk.num_vecs) * lanes_);
  int64_t len = embag_col_bytes(key_.table, end) - embag_col_bytes(key_.table, first);
  if (end == key_.dim) len += embag_row_trailer_bytes(key_.table);
  if (key_.prefetch_head) len = embag_prefetch_head_bytes(embag_col_bytes(key_.table, key_.dim), len);
  prefetch_row(row_disp(first), len);
}

// The prefetch of a row loop that issues it after the row's loads (prefetch_after_row_): at the
// loop's tail, which skipped positions reach too, so every position still prefetches.
void EmbagSkeleton::emit_late_prefetch(const EmbagBlock& blk) {
  if (key_.prefetch > 0 && prefetch_late_) emit_prefetch(blk);
}

// Step: the row's columns ---------------------------------------------------------------------

void EmbagSkeleton::emit_row_accumulate(const EmbagBlock& blk) {
  form_row_address();
  row_setup();
  accumulate(blk);
}

// The first counted row of the bag is copied as is (keeps -0.0 and NaN), with its id when the
// kernel tracks ids.
void EmbagSkeleton::emit_max_first(const EmbagBlock& blk) {
  if (tracks_ids()) broadcast_row_id();
  form_row_address();
  row_setup();
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    load_value(acc(j), v * lanes_, vec_cols(v));
    if (tracks_ids()) copy_row_id(j, v);
  }
}

// Later rows: lanes where x > current (ordered: a NaN never wins, ties keep the earliest) take
// x, and the row id when the kernel tracks ids.
void EmbagSkeleton::emit_max_update(const EmbagBlock& blk) {
  if (tracks_ids()) broadcast_row_id();
  form_row_address();
  row_setup();
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    load_value(max_input(), v * lanes_, vec_cols(v));
    max_blend(j, v);
  }
}

// Step: stores ---------------------------------------------------------------------------------

void EmbagSkeleton::emit_store(const EmbagBlock& blk) {
  const bool mean = key_.mode == Mode::kMean;
  if (mean) mean_divisor();
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    if (mean) mean_finish(acc(j));
    store_output(acc(j), v * lanes_, vec_cols(v));
  }
  if (tracks_ids()) store_max_ids(blk);
}

// offset2bag[p] = kBag for every position p in [kPos, kEnd) (padding and pruned positions
// included): whole registers of the bag id while a register's worth is left, then one register
// ending at kEnd that overlaps entries already written (it stays within the bag); a bag shorter
// than a register entry by entry. Clobbers kScratch, kRow and vector `tmp`.
void EmbagSkeleton::emit_offset2bag_fill(uint32_t tmp) {
  const int64_t n = offset2bag_lanes();
  const G p = G::kScratch, last = G::kRow;  // last: where the last whole register starts
  Label vectors = e_->newLabel(), single = e_->newLabel(), one = e_->newLabel(), done = e_->newLabel();
  broadcast_bag(tmp);
  gp_add(p, G::kPos, 0);
  gp_add(last, G::kEnd, -n);
  branch(EmbagCond::kGt, p, EmbagSrc::of(last), single);
  e_->bind(vectors);
  store_bag_vector(tmp, p);
  gp_add(p, p, n);
  branch(EmbagCond::kGe, last, EmbagSrc::of(p), vectors);
  branch(EmbagCond::kGe, p, EmbagSrc::of(G::kEnd), done);
  store_bag_vector(tmp, last);
  jump(done);
  e_->bind(single);  // fewer than n positions, maybe none
  branch(EmbagCond::kGe, p, EmbagSrc::of(G::kEnd), done);
  e_->bind(one);
  store_offset2bag_at(p);
  gp_add(p, p, 1);
  branch(EmbagCond::kLt, p, EmbagSrc::of(G::kEnd), one);
  e_->bind(done);
}

// bag_size[bag] (mean, max) and max_indices[bag] (mean) hold the count.
void EmbagSkeleton::emit_bag_counts(G bag) {
  if (!counts() || !key_.index_outputs) return;
  store_int(SJ_EMBAG_FIELD(bag_size), bag, G::kCount);
  if (key_.mode == Mode::kMean) store_int(SJ_EMBAG_FIELD(max_indices), bag, G::kCount);
}

}  // namespace shapejit::jit
