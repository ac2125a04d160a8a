// A64EmbagEmitter: see embag_emitter.hpp for the shape of the generated code. The arithmetic
// order per column is exactly the reference's (ref/embedding_bag.cpp), so results are bitwise
// equal: sum adds rows in index order from +0.0 (fadd acc, acc, x), weighted uses one fused
// multiply-add per row (fmla acc, x, w[0] == fmaf(w, x, acc)), mean divides once, max copies
// the first row and replaces only on an ordered `x > current` (fcmgt + bit).
#include "jit/a64/embag_emitter.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "jit/a64/reg_order.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

a64::Vec vq(uint32_t id) { return a64::v(id); }  // the whole 128-bit register (q form)

}  // namespace

A64EmbagEmitter::A64EmbagEmitter(const EmbagKey& key, CodeHolder& code)
    : KernelEmitter(code, key.name()),
      key_(key),
      a_(&code),
      gp_(RegGroup::kGp, a64_gp_order(/*with_link_register=*/false)),
      vecs_(RegGroup::kVec, a64_vec_order()) {
  attach(a_);
}

void A64EmbagEmitter::generate() {
  check_key();
  num_vecs_ = (key_.dim + kLanes - 1) / kLanes;
  tail_ = key_.dim % kLanes;
  out_size_ = key_.index_out() == DType::kI32 ? 4 : 8;
  plan_registers();
  emit_prolog(args_, {&gp_, &vecs_}, FrameOptions{});
  emit_load_args();
  emit_bag_loop();
  emit_finish();
}

// Planning --------------------------------------------------------------------------------------

int64_t A64EmbagEmitter::vec_cols(int64_t v) const { return is_tail(v) ? tail_ : kLanes; }

int64_t A64EmbagEmitter::regs_per_vec() const {
  if (key_.mode != Mode::kMax) return 1;
  return wide_ids() ? 3 : 2;  // value + ids (4 x 32-bit, or 2 + 2 x 64-bit)
}

int64_t A64EmbagEmitter::id_regs_of(int64_t v) const {
  return wide_ids() && vec_cols(v) > 2 ? 2 : 1;
}

void A64EmbagEmitter::check_key() const {
  if (key_.isa != Isa::kNeon) unsupported("not the NEON ISA");
  if (code().arch() != Arch::kAArch64) unsupported("the CodeHolder is not initialised for AArch64");
  if (const auto why = embag_key_unsupported_reason(key_)) unsupported(*why);
}

void A64EmbagEmitter::plan_registers() {
  const bool max = key_.mode == Mode::kMax;
  auto gpx = [&] { return a64::x(gp_.take()); };
  args_ = a64::x(gp_.take(0));  // the incoming argument stays where AAPCS64 puts it
  weight_ = gpx(), stride_ = gpx(), indices_ = gpx(), offsets_ = gpx(), pos_ = gpx(), end_ = gpx();
  row_ = gpx(), rowp_ = gpx(), scratch_ = gpx(), bag_ = gpx(), bag_end_ = gpx(), out_ = gpx();
  if (key_.prefetch > 0) last_pos_ = gpx();
  if (key_.padding) pad_ = gpx();
  if (key_.weighted) psw_ = gpx();
  if (counts()) count_ = gpx();
  if (writes_offset2bag()) o2b_ = gpx();

  // Vector roles first; the accumulators and ids take what the widest block needs of the rest,
  // so narrow kernels never touch the callee-saved v8-v15.
  load0_ = vecs_.take();
  if (!max) load1_ = vecs_.take();
  if (max || key_.weighted || key_.mode == Mode::kMean) bcast_ = vecs_.take();
  if (max) mask_ = vecs_.take();
  if (max && wide_ids()) widen_ = vecs_.take();
  const int64_t per = regs_per_vec();
  blocks_ = split_embag_blocks(num_vecs_, int64_t(vecs_.available()) / per);
  int64_t widest = 0;
  for (const Block& b : blocks_) {
    widest = std::max(widest, b.num_vecs);
    if (b.repeat > 1 && !block_end_.isValid()) block_end_ = gpx();
  }
  for (int64_t j = 0; j < widest; ++j) {
    acc_.push_back(vecs_.take());
    if (per >= 2) ids_lo_.push_back(vecs_.take());
    if (per == 3) ids_hi_.push_back(vecs_.take());
  }
}

// Helpers ---------------------------------------------------------------------------------------

int32_t A64EmbagEmitter::vec_offset(int64_t v) const {
  return static_cast<int32_t>((v - base_vec_) * kBytes);
}

void A64EmbagEmitter::load_arg(const a64::Gp& dst, size_t offset) {
  a_.ldr(dst, a64::ptr(args_, static_cast<int32_t>(offset)));
}

#define SJ_ARG(field) offsetof(EmbagKernelArgs, field)

void A64EmbagEmitter::load_index(const a64::Gp& dst, const a64::Gp& base, const a64::Gp& pos, DType type) {
  if (type == DType::kI32) a_.ldrsw(dst, a64::ptr(base, pos, a64::lsl(2)));
  else a_.ldr(dst, a64::ptr(base, pos, a64::lsl(3)));
}

// base[pos] = value, as an element of the integer outputs' type.
void A64EmbagEmitter::store_int(const a64::Gp& value, const a64::Gp& base, const a64::Gp& pos) {
  if (out_size_ == 4) a_.str(a64::w(value.id()), a64::ptr(base, pos, a64::lsl(2)));
  else a_.str(value, a64::ptr(base, pos, a64::lsl(3)));
}

// dst = src + value for any value: a 12-bit immediate when it fits, else through scratch_.
void A64EmbagEmitter::add_imm(const a64::Gp& dst, const a64::Gp& src, int64_t value) {
  const uint64_t magnitude = value < 0 ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  if (magnitude < 4096) {
    if (value >= 0) a_.add(dst, src, Imm(magnitude));
    else a_.sub(dst, src, Imm(magnitude));
    return;
  }
  if (src.id() == scratch_.id())  // (dst may be scratch_: src is read before dst is written)
    throw Error(Status::kInternalError, kernel_name() + ": add_imm needs scratch for a large step");
  a_.mov(scratch_, Imm(magnitude));
  if (value >= 0) a_.add(dst, src, scratch_);
  else a_.sub(dst, src, scratch_);
}

// `cols` floats (1..4) from base + offset into vector `dst`, never reading past them.
void A64EmbagEmitter::load_cols(uint32_t dst, const a64::Gp& base, int64_t offset, int64_t cols) {
  const int32_t off = static_cast<int32_t>(offset);
  switch (cols) {
    case 4: a_.ldr(vq(dst), a64::ptr(base, off)); return;
    case 1: a_.ldr(a64::s(dst), a64::ptr(base, off)); return;  // clears lanes 1-3
    case 2: a_.ldr(a64::d(dst), a64::ptr(base, off)); return;  // clears lanes 2-3
    default:
      a_.ldr(a64::d(dst), a64::ptr(base, off));
      add_imm(scratch_, base, offset + 8);  // lane loads take no offset
      a_.ld1(vq(dst).s(2), a64::ptr(scratch_));
  }
}

// The first `bytes` (4, 8, 12 or 16) of vector `src` to base + offset.
void A64EmbagEmitter::store_cols(uint32_t src, const a64::Gp& base, int64_t offset, int64_t bytes,
                                 const a64::Gp& lane_addr) {
  const int32_t off = static_cast<int32_t>(offset);
  switch (bytes) {
    case 16: a_.str(vq(src), a64::ptr(base, off)); return;
    case 4: a_.str(a64::s(src), a64::ptr(base, off)); return;
    case 8: a_.str(a64::d(src), a64::ptr(base, off)); return;
    default:
      a_.str(a64::d(src), a64::ptr(base, off));
      a_.add(lane_addr, base, Imm(uint64_t(offset + 8)));
      a_.st1(vq(src).s(2), a64::ptr(lane_addr));
  }
}

// `prfm pldl1keep, [base, #offset]`, embedded as its word (jit/a64/prefetch.hpp); the listing
// shows the instruction as a comment line followed by its `.word`.
void A64EmbagEmitter::prefetch(const a64::Gp& base, int64_t offset) {
  const uint32_t word = encode_prfm_pldl1keep(base.id(), offset);
  if (code().logger())
    a_.comment(("prfm pldl1keep, [x" + std::to_string(base.id()) + ", " + std::to_string(offset) + "]").c_str());
  a_.embedUInt32(word);
}

void A64EmbagEmitter::zero(uint32_t id) { a_.movi(vq(id).s4(), 0); }

// Step: load args -----------------------------------------------------------------------------

void A64EmbagEmitter::emit_load_args() {
  load_arg(weight_, SJ_ARG(weight));
  load_arg(stride_, SJ_ARG(row_stride_bytes));
  load_arg(indices_, SJ_ARG(indices));
  load_arg(offsets_, SJ_ARG(offsets));
  if (last_pos_.isValid()) {  // prefetch positions are clamped to the last index
    load_arg(last_pos_, SJ_ARG(num_indices));
    a_.sub(last_pos_, last_pos_, Imm(1));
  }
  if (pad_.isValid()) load_arg(pad_, SJ_ARG(padding_idx));
  if (psw_.isValid()) load_arg(psw_, SJ_ARG(per_sample_weights));
  if (o2b_.isValid()) load_arg(o2b_, SJ_ARG(offset2bag));
  load_arg(bag_, SJ_ARG(bag_begin));
  load_arg(bag_end_, SJ_ARG(bag_end));
  load_arg(out_, SJ_ARG(output));
  a_.mov(scratch_, Imm(uint64_t(key_.dim * 4)));
  a_.madd(out_, bag_, scratch_, out_);
  check("load_args");
}

// Step: bag loop --------------------------------------------------------------------------------

void A64EmbagEmitter::emit_bag_loop() {
  Label bag_top = a_.newLabel(), done = a_.newLabel();
  a_.cmp(bag_, bag_end_);
  a_.b_ge(done);
  a_.align(AlignMode::kCode, 16);
  a_.bind(bag_top);
  emit_bag_bounds();
  for (size_t b = 0; b < blocks_.size(); ++b) emit_block_at(blocks_[b], b == 0);
  emit_bag_counts();
  add_imm(out_, out_, key_.dim * 4);
  a_.add(bag_, bag_, Imm(1));
  a_.cmp(bag_, bag_end_);
  a_.b_lt(bag_top);
  a_.bind(done);
  check("bag_loop");
}

// end_ = offsets[bag + 1] when bag + 1 < num_offsets, else num_indices; count_ starts at the
// bag length (no padding) or 0 (padding: counted in the first block's row loop).
void A64EmbagEmitter::emit_bag_bounds() {
  Label last = a_.newLabel(), have_end = a_.newLabel();
  a_.add(row_, bag_, Imm(1));
  load_arg(scratch_, SJ_ARG(num_offsets));
  a_.cmp(row_, scratch_);
  a_.b_ge(last);
  load_index(end_, offsets_, row_, key_.offset);
  a_.b(have_end);
  a_.bind(last);
  load_arg(end_, SJ_ARG(num_indices));
  a_.bind(have_end);
  if (!counts()) return;
  if (key_.padding) {
    a_.mov(count_, a64::xzr);
  } else {
    load_index(count_, offsets_, bag_, key_.offset);
    a_.sub(count_, end_, count_);
  }
}

// Blocks right of the first address their vectors from weight_/out_ moved to the block, so
// every immediate offset stays small (ldr q reaches 64 KiB, ldp 1 KiB, prfm 32 KiB).
void A64EmbagEmitter::emit_block_at(const Block& blk, bool first_block) {
  if (blk.repeat > 1) {
    emit_block_loop(blk);
    return;
  }
  if (blk.first_vec == 0) {
    emit_block(blk, first_block);
    return;
  }
  const int64_t first = blk.first_vec * kBytes;
  add_imm(weight_, weight_, first);
  add_imm(out_, out_, first);
  base_vec_ = blk.first_vec;
  emit_block(blk, first_block);
  add_imm(weight_, weight_, -first);
  add_imm(out_, out_, -first);
  base_vec_ = 0;
}

// Runs one block shape `repeat` times, moving weight_ and out_ right by a block each time.
void A64EmbagEmitter::emit_block_loop(const Block& blk) {
  const int64_t step = blk.num_vecs * kBytes, first = blk.first_vec * kBytes;
  add_imm(weight_, weight_, first);
  add_imm(out_, out_, first);
  add_imm(block_end_, out_, blk.repeat * step);
  base_vec_ = blk.first_vec;
  Label loop = a_.newLabel();
  a_.align(AlignMode::kCode, 16);
  a_.bind(loop);
  emit_block(blk, false);
  add_imm(weight_, weight_, step);
  add_imm(out_, out_, step);
  a_.cmp(out_, block_end_);
  a_.b_lo(loop);
  add_imm(weight_, weight_, -(first + blk.repeat * step));
  add_imm(out_, out_, -(first + blk.repeat * step));
  base_vec_ = 0;
}

// Step: one column block of one bag -------------------------------------------------------------

void A64EmbagEmitter::emit_block(const Block& blk, bool first_block) {
  load_index(pos_, offsets_, bag_, key_.offset);
  // +0.0 starts the sums; for max, 0.0 and row id 0 are what an empty bag stores.
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    zero(acc_[size_t(j)]);
    if (key_.mode != Mode::kMax) continue;
    zero(ids_lo_[size_t(j)]);
    if (id_regs_of(blk.first_vec + j) == 2) zero(ids_hi_[size_t(j)]);
  }
  Label done = a_.newLabel();
  a_.cmp(pos_, end_);
  a_.b_ge(done);
  auto step = [&](const Label& loop) {
    a_.add(pos_, pos_, Imm(1));
    a_.cmp(pos_, end_);
    a_.b_lt(loop);
  };
  if (key_.mode != Mode::kMax) {
    Label loop = a_.newLabel(), next = a_.newLabel();
    a_.align(AlignMode::kCode, 16);
    a_.bind(loop);
    emit_row_head(blk, first_block, next);
    emit_row_accumulate(blk);
    a_.bind(next);
    step(loop);
  } else {
    // The first non-padding row is copied, the others compared: two loops sharing the tail.
    Label first_loop = a_.newLabel(), first_next = a_.newLabel();
    Label loop = a_.newLabel(), next = a_.newLabel();
    a_.bind(first_loop);
    emit_row_head(blk, first_block, first_next);
    emit_max_first(blk);
    a_.b(next);
    a_.bind(first_next);
    step(first_loop);
    a_.b(done);
    a_.align(AlignMode::kCode, 16);
    a_.bind(loop);
    emit_row_head(blk, first_block, next);
    emit_max_update(blk);
    a_.bind(next);
    step(loop);
  }
  a_.bind(done);
  emit_store(blk);
  check("block");
}

// Per position: offset2bag entry, prefetch, row id, padding skip, count.
void A64EmbagEmitter::emit_row_head(const Block& blk, bool first_block, const Label& skip) {
  if (first_block && writes_offset2bag()) store_int(bag_, o2b_, pos_);
  if (key_.prefetch > 0) emit_prefetch(blk);
  load_index(row_, indices_, pos_, key_.index);
  if (key_.padding) {
    a_.cmp(row_, pad_);
    a_.b_eq(skip);
    if (first_block && counts()) a_.add(count_, count_, Imm(1));
  }
}

// Prefetches this block's cache lines of the row `prefetch` positions ahead (clamped to the
// last index, so the index array is never read past its end).
void A64EmbagEmitter::emit_prefetch(const Block& blk) {
  if (key_.prefetch < 4096) {
    a_.add(scratch_, pos_, Imm(uint64_t(key_.prefetch)));
  } else {
    a_.mov(scratch_, Imm(uint64_t(key_.prefetch)));
    a_.add(scratch_, scratch_, pos_);
  }
  a_.cmp(scratch_, last_pos_);
  a_.csel(scratch_, last_pos_, scratch_, Imm(uint32_t(a64::CondCode::kGT)));
  load_index(scratch_, indices_, scratch_, key_.index);
  a_.madd(scratch_, scratch_, stride_, weight_);
  const int64_t begin = vec_offset(blk.first_vec);
  const int64_t len = std::min(key_.dim * 4, (blk.first_vec + blk.num_vecs) * kBytes) - blk.first_vec * kBytes;
  for (int64_t off = 0; off < len; off += 64) prefetch(scratch_, begin + off);
  // Rows need not be 64-byte aligned: the last byte may sit on one more line (the 8-byte
  // aligned address below it is on the same line).
  if ((len - 1) % 64 != 0) prefetch(scratch_, (begin + len - 1) & ~int64_t(7));
}

// Step: row accumulate (sum, mean, weighted sum). Full vectors load in pairs (ldp) into the
// two load registers; the tail loads exactly its columns.
void A64EmbagEmitter::emit_row_accumulate(const Block& blk) {
  const a64::Vec w = vq(bcast_);
  if (key_.weighted) a_.ldr(a64::s(bcast_), a64::ptr(psw_, pos_, a64::lsl(2)));
  a_.madd(rowp_, row_, stride_, weight_);
  auto accumulate = [&](int64_t j, uint32_t x) {
    const a64::Vec acc = vq(acc_[size_t(j)]).s4();
    if (key_.weighted) a_.fmla(acc, vq(x).s4(), w.s(0));
    else a_.fadd(acc, acc, vq(x).s4());
  };
  for (int64_t j = 0; j < blk.num_vecs;) {
    const int64_t v = blk.first_vec + j;
    const int32_t off = vec_offset(v);
    if (is_tail(v)) {
      load_cols(load0_, rowp_, off, tail_);
      accumulate(j, load0_);
      ++j;
    } else if (j + 1 < blk.num_vecs && !is_tail(v + 1) && off <= 1008) {
      a_.ldp(vq(load0_), vq(load1_), a64::ptr(rowp_, off));
      accumulate(j, load0_);
      accumulate(j + 1, load1_);
      j += 2;
    } else {
      a_.ldr(vq(load0_), a64::ptr(rowp_, off));
      accumulate(j, load0_);
      ++j;
    }
  }
}

// Step: finish.
void A64EmbagEmitter::emit_finish() {
  emit_epilog();
  check("finish");
}

void emit_embag_kernel_a64(const EmbagKey& key, CodeHolder& code) {
  A64EmbagEmitter(key, code).generate();
}

}  // namespace shapejit::jit
