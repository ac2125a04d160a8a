// X86EmbagEmitter: see embag_emitter.hpp for the shape of the generated code. The arithmetic
// order per column is exactly the reference's (ref/embedding_bag.cpp), so results are bitwise
// equal: sum adds rows in index order from +0.0, weighted uses one FMA per row, mean divides
// once, max copies the first row and replaces only on an ordered `x > current`.
#include "jit/x86/embag_emitter.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

// Preferred order of general-purpose registers: caller-saved first, so small kernels need no
// saves; rsp is never handed out.
constexpr uint32_t kGpOrder[] = {x86::Gp::kIdDi, x86::Gp::kIdAx, x86::Gp::kIdCx, x86::Gp::kIdDx,
                                 x86::Gp::kIdSi, 8, 9, 10, 11, x86::Gp::kIdBx, 12, 13, 14, 15,
                                 x86::Gp::kIdBp};

std::vector<uint32_t> id_range(uint32_t first, uint32_t end) {
  std::vector<uint32_t> ids;
  for (uint32_t i = first; i < end; ++i) ids.push_back(i);
  return ids;
}

x86::Mem arg(const x86::Gp& args, size_t offset) {
  return x86::qword_ptr(args, static_cast<int32_t>(offset));
}

#define SJ_ARG(field) arg(args_, offsetof(EmbagKernelArgs, field))

}  // namespace

X86VecTraits X86VecTraits::of(Isa isa) {
  if (isa == Isa::kAvx512) return {true, 16, 64, 32};
  return {false, 8, 32, 16};
}

X86EmbagEmitter::X86EmbagEmitter(const EmbagKey& key, CodeHolder& code)
    : KernelEmitter(code, key.name()),
      key_(key),
      t_(X86VecTraits::of(key.isa)),
      a_(&code),
      gp_(RegGroup::kGp, std::vector<uint32_t>(std::begin(kGpOrder), std::end(kGpOrder))),
      vecs_(RegGroup::kVec, id_range(0, t_.num_regs)),
      kregs_(RegGroup::kX86_K, id_range(1, 8)) {
  attach(a_);
}

void X86EmbagEmitter::generate() {
  check_key();
  num_vecs_ = (key_.dim + t_.lanes - 1) / t_.lanes;
  tail_ = key_.dim % t_.lanes;
  out_size_ = key_.index_out() == DType::kI32 ? 4 : 8;
  plan_registers();
  emit_prolog(args_, {&gp_, &vecs_, &kregs_}, FrameOptions{true, t_.avx512});
  emit_load_args();
  emit_bag_loop();
  emit_finish();
}

// Planning --------------------------------------------------------------------------------------

int64_t X86EmbagEmitter::vec_cols(int64_t v) const { return is_tail(v) ? tail_ : t_.lanes; }

int64_t X86EmbagEmitter::index_regs_of(int64_t v) const {
  if (!wide_ids_) return 1;
  return vec_cols(v) > t_.lanes / 2 ? 2 : 1;  // 64-bit ids: half as many lanes per register
}

// Ids of int32 indices always fit 32-bit lanes; only int64 indices may need the wide path.
bool X86EmbagEmitter::has_wide_path() const {
  return key_.mode == Mode::kMax && out_size_ == 8 && key_.index == DType::kI64;
}

void X86EmbagEmitter::check_key() const {
  if (key_.isa != Isa::kAvx512 && key_.isa != Isa::kAvx2) unsupported("not an x86 ISA");
  if (code().arch() != Arch::kX64) unsupported("the CodeHolder is not initialised for x86-64");
  if (const auto why = embag_key_unsupported_reason(key_)) unsupported(*why);
}

void X86EmbagEmitter::plan_registers() {
  const bool max = key_.mode == Mode::kMax;
  auto gpq = [&] { return x86::gpq(gp_.take()); };
  args_ = x86::gpq(gp_.take(x86::Gp::kIdDi));
  weight_ = gpq(), stride_ = gpq(), indices_ = gpq(), pos_ = gpq(), end_ = gpq();
  row_ = gpq(), scratch_ = gpq(), bag_ = gpq(), out_ = gpq();
  if (key_.prefetch > 0) last_pos_ = gpq();
  if (key_.padding) pad_ = gpq();
  if (key_.weighted) psw_ = gpq();
  if (counts()) count_ = gpq();
  if (writes_offset2bag()) o2b_ = gpq();

  // Vector roles first; every remaining register is a slot for accumulators and ids.
  const bool avx2_tail = !t_.avx512 && tail_ != 0;
  if (max || key_.weighted || key_.mode == Mode::kMean) bcast_ = vecs_.take();
  if (max || avx2_tail) xtmp_ = vecs_.take();
  if (!max && avx2_tail && tail_ > 4) xtmp2_ = vecs_.take();
  if (max && !t_.avx512) vcmp_ = vecs_.take();
  if (max && !t_.avx512 && has_wide_path()) widen_ = vecs_.take();
  while (vecs_.available() > 0) slots_.push_back(vecs_.take());

  const int64_t slots = static_cast<int64_t>(slots_.size());
  // max: value + 32-bit ids per vector; the wide path: value + two 64-bit id halves.
  blocks_ = split_embag_blocks(num_vecs_, max ? slots / 2 : slots);
  if (has_wide_path()) wide_blocks_ = split_embag_blocks(num_vecs_, slots / 3);
  for (const auto* plan : {&blocks_, &wide_blocks_})
    for (const Block& b : *plan)
      if (b.repeat > 1 && !block_end_.isValid()) block_end_ = gpq();

  if (t_.avx512) {
    if (tail_ != 0) k_tail_ = x86::k(kregs_.take());
    if (max) k_cmp_ = x86::k(kregs_.take());
    if (max && out_size_ == 8) k_hi_ = x86::k(kregs_.take());
  }
}

// Hands the slots to the roles of one path: 1 (sum), 2 (max, 32-bit ids) or 3 (64-bit ids)
// registers per vector of columns.
void X86EmbagEmitter::assign_slots(bool wide_ids) {
  wide_ids_ = wide_ids;
  const size_t per = key_.mode != Mode::kMax ? 1 : wide_ids ? 3 : 2;
  acc_.clear(), idx_lo_.clear(), idx_hi_.clear();
  for (size_t j = 0; (j + 1) * per <= slots_.size(); ++j) {
    acc_.push_back(slots_[j * per]);
    if (per >= 2) idx_lo_.push_back(slots_[j * per + 1]);
    if (per == 3) idx_hi_.push_back(slots_[j * per + 2]);
  }
}

// Helpers ---------------------------------------------------------------------------------------

x86::Vec X86EmbagEmitter::vec(uint32_t id) const {
  return t_.avx512 ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
}

int32_t X86EmbagEmitter::vec_offset(int64_t v) const {
  return static_cast<int32_t>((v - base_vec_) * t_.bytes);
}

x86::Mem X86EmbagEmitter::row_mem(int64_t v) const {
  return x86::ptr(weight_, row_, 0, vec_offset(v));
}

void X86EmbagEmitter::load_index(const x86::Gp& dst, const x86::Gp& base, const x86::Gp& pos,
                                 DType type) {
  if (type == DType::kI32)
    a_.movsxd(dst, x86::dword_ptr(base, pos, 2));
  else
    a_.mov(dst, x86::qword_ptr(base, pos, 3));
}

void X86EmbagEmitter::store_int(const x86::Mem& dst, const x86::Gp& value) {
  x86::Mem m = dst;
  m.setSize(static_cast<uint32_t>(out_size_));
  if (out_size_ == 4) a_.mov(m, value.r32());
  else a_.mov(m, value.r64());
}

void X86EmbagEmitter::zero(uint32_t id) {
  if (t_.avx512) a_.vpxord(x86::zmm(id), x86::zmm(id), x86::zmm(id));
  else a_.vpxor(x86::xmm(id), x86::xmm(id), x86::xmm(id));  // VEX clears the upper lanes
}

// Step: load args -----------------------------------------------------------------------------

void X86EmbagEmitter::emit_load_args() {
  a_.mov(weight_, SJ_ARG(weight));
  a_.mov(stride_, SJ_ARG(row_stride_bytes));
  a_.mov(indices_, SJ_ARG(indices));
  if (last_pos_.isValid()) {  // prefetch positions are clamped to the last index
    a_.mov(last_pos_, SJ_ARG(num_indices));
    a_.dec(last_pos_);
  }
  if (pad_.isValid()) a_.mov(pad_, SJ_ARG(padding_idx));
  if (psw_.isValid()) a_.mov(psw_, SJ_ARG(per_sample_weights));
  if (o2b_.isValid()) a_.mov(o2b_, SJ_ARG(offset2bag));
  a_.mov(bag_, SJ_ARG(bag_begin));
  a_.mov(out_, SJ_ARG(output));
  a_.imul(scratch_, bag_, static_cast<int32_t>(key_.dim * 4));
  a_.add(out_, scratch_);

  if (tail_ != 0 && t_.avx512) {
    a_.mov(scratch_.r32(), (1u << tail_) - 1);
    a_.kmovw(k_tail_, scratch_.r32());
  }
  check("load_args");
}

// Step: bag loop --------------------------------------------------------------------------------

// With prefetch, the bag loop is emitted twice: a first copy without the clamp of the prefetch
// position (2 of ~13 instructions per index at D=32; +7 % GB/s there, +3 % at D=64) runs while
// the bag's last prefetch stays within the indices; the first bag that would read past them
// moves to the clamped copy, which then runs every later bag (offsets are non-decreasing, so
// later bags end no earlier).
void X86EmbagEmitter::emit_bag_loop() {
  Label done = a_.newLabel();
  a_.cmp(bag_, SJ_ARG(bag_end));
  a_.jge(done);
  if (key_.prefetch > 0) {
    clamp_prefetch_ = false;
    clamped_loop_ = a_.newLabel();
    emit_bag_loop_copy(done);
    a_.bind(clamped_loop_);
    clamped_loop_ = Label();
  }
  clamp_prefetch_ = true;
  emit_bag_loop_copy(done);
  a_.bind(done);
  check("bag_loop");
}

// One copy of the loop over bags [bag_, bag_end), entered with at least one bag left.
void X86EmbagEmitter::emit_bag_loop_copy(const Label& done) {
  Label bag_top = a_.newLabel(), bag_done = a_.newLabel();
  if (has_wide_path()) wide_bag_ = a_.newLabel();
  a_.align(AlignMode::kCode, 16);
  a_.bind(bag_top);
  assign_slots(false);
  emit_bag_body(blocks_);
  a_.bind(bag_done);
  emit_bag_counts();
  a_.add(out_, static_cast<int32_t>(key_.dim * 4));
  a_.inc(bag_);
  a_.cmp(bag_, SJ_ARG(bag_end));
  a_.jl(bag_top);
  if (!clamp_prefetch_ || has_wide_path()) a_.jmp(done);  // the clamped copy ends at `done`
  if (has_wide_path()) {  // the bag again from the start, with 64-bit id lanes
    a_.bind(wide_bag_);
    assign_slots(true);
    emit_bag_body(wide_blocks_);
    a_.jmp(bag_done);
  }
}

void X86EmbagEmitter::emit_bag_body(const std::vector<Block>& blocks) {
  emit_bag_bounds();
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b].repeat > 1) emit_block_loop(blocks[b]);
    else emit_block(blocks[b], b == 0);
  }
}

// Runs one block shape `repeat` times, moving weight_ and out_ right by a block each time.
void X86EmbagEmitter::emit_block_loop(const Block& blk) {
  const int32_t step = static_cast<int32_t>(blk.num_vecs * t_.bytes);
  const int32_t first = static_cast<int32_t>(blk.first_vec * t_.bytes);
  a_.add(weight_, first);
  a_.add(out_, first);
  a_.lea(block_end_, x86::ptr(out_, static_cast<int32_t>(blk.repeat * step)));
  base_vec_ = blk.first_vec;
  Label loop = a_.newLabel();
  a_.align(AlignMode::kCode, 16);
  a_.bind(loop);
  emit_block(blk, false);
  a_.add(weight_, step);
  a_.add(out_, step);
  a_.cmp(out_, block_end_);
  a_.jb(loop);
  a_.sub(weight_, static_cast<int32_t>(first + blk.repeat * step));
  a_.sub(out_, static_cast<int32_t>(first + blk.repeat * step));
  base_vec_ = 0;
}

// end_ = offsets[bag + 1] when bag + 1 < num_offsets, else num_indices; count_ starts at the
// bag length (no padding) or 0 (padding: counted in the first block's row loop).
void X86EmbagEmitter::emit_bag_bounds() {
  Label last = a_.newLabel(), have_end = a_.newLabel();
  a_.mov(scratch_, SJ_ARG(offsets));
  a_.lea(row_, x86::ptr(bag_, 1));
  a_.cmp(row_, SJ_ARG(num_offsets));
  a_.jge(last);
  load_index(end_, scratch_, row_, key_.offset);
  a_.jmp(have_end);
  a_.bind(last);
  a_.mov(end_, SJ_ARG(num_indices));
  a_.bind(have_end);
  if (clamped_loop_.isValid()) {  // this bag's last prefetch would pass the last index
    a_.lea(row_, x86::ptr(end_, key_.prefetch - 1));
    a_.cmp(row_, last_pos_);
    a_.jg(clamped_loop_);
  }
  if (!counts()) return;
  if (key_.padding) {
    a_.xor_(count_.r32(), count_.r32());
  } else {
    load_index(count_, scratch_, bag_, key_.offset);
    a_.neg(count_);
    a_.add(count_, end_);
  }
}

// Step: one column block of one bag -------------------------------------------------------------

void X86EmbagEmitter::emit_block(const Block& blk, bool first_block) {
  a_.mov(scratch_, SJ_ARG(offsets));
  load_index(pos_, scratch_, bag_, key_.offset);
  // +0.0 starts the sums; for max, 0.0 and row id 0 are what an empty bag stores.
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    zero(acc_[size_t(j)]);
    if (key_.mode != Mode::kMax) continue;
    zero(idx_lo_[size_t(j)]);
    if (wide_ids_) zero(idx_hi_[size_t(j)]);
  }
  Label done = a_.newLabel();
  a_.cmp(pos_, end_);
  a_.jge(done);
  auto step = [&](const Label& loop) {
    a_.inc(pos_);
    a_.cmp(pos_, end_);
    a_.jl(loop);
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
    a_.jmp(next);
    a_.bind(first_next);
    step(first_loop);
    a_.jmp(done);
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
void X86EmbagEmitter::emit_row_head(const Block& blk, bool first_block, const Label& skip) {
  if (first_block && writes_offset2bag())
    store_int(x86::ptr(o2b_, pos_, out_size_ == 4 ? 2 : 3), bag_);
  if (key_.prefetch > 0) emit_prefetch(blk);
  load_index(row_, indices_, pos_, key_.index);
  if (key_.padding) {
    a_.cmp(row_, pad_);
    a_.je(skip);
    if (first_block && counts()) a_.inc(count_);
  }
  // An id beyond 32-bit lanes: redo the bag wide. The first block meets every id of the
  // bag, and it is never inside a block loop, so weight_ and out_ are unshifted here.
  if (first_block && has_wide_path() && !wide_ids_) {
    a_.cmp(row_, 0x7FFFFFFF);
    a_.ja(wide_bag_);
  }
}

// Prefetches this block's cache lines of the row `prefetch` positions ahead. The index array
// is never read past its end: the clamped copy of the bag loop clamps the position to the last
// index, the other runs only bags whose positions + prefetch stay within it (emit_bag_bounds).
void X86EmbagEmitter::emit_prefetch(const Block& blk) {
  if (clamp_prefetch_) {
    a_.lea(scratch_, x86::ptr(pos_, key_.prefetch));
    a_.cmp(scratch_, last_pos_);
    a_.cmovg(scratch_, last_pos_);
    load_index(scratch_, indices_, scratch_, key_.index);
  } else if (key_.index == DType::kI32) {
    a_.movsxd(scratch_, x86::dword_ptr(indices_, pos_, 2, key_.prefetch * 4));
  } else {
    a_.mov(scratch_, x86::qword_ptr(indices_, pos_, 3, key_.prefetch * 8));
  }
  a_.imul(scratch_, stride_);
  const int64_t begin = vec_offset(blk.first_vec);
  const int64_t len = std::min(key_.dim * 4, (blk.first_vec + blk.num_vecs) * t_.bytes) - blk.first_vec * t_.bytes;
  for (int64_t off = 0; off < len; off += 64)
    a_.prefetcht0(x86::ptr(weight_, scratch_, 0, static_cast<int32_t>(begin + off)));
  // A block of whole lines gets exactly its lines when the row is 64-byte aligned (the usual
  // table: aligned base, D a multiple of 16); an unaligned row then leaves its last line to the
  // demand load. Prefetching that line too cost 24 % of the GB/s at D=32 and 9 % at D=64 on
  // aligned tables (a fifth prefetch per 4-line row). Other lengths straddle a line anyway,
  // so the line of their last byte is prefetched as well.
  if (len % 64 != 0 && (len - 1) % 64 != 0)
    a_.prefetcht0(x86::ptr(weight_, scratch_, 0, static_cast<int32_t>(begin + len - 1)));
}

// Step: row accumulate (sum, mean, weighted sum).
void X86EmbagEmitter::emit_row_accumulate(const Block& blk) {
  const x86::Vec w = vec(bcast_);
  if (key_.weighted) a_.vbroadcastss(w, x86::dword_ptr(psw_, pos_, 2));
  a_.imul(row_, stride_);
  for (int64_t j = 0; j < blk.num_vecs; ++j) {
    const int64_t v = blk.first_vec + j;
    const x86::Vec acc = vec(acc_[size_t(j)]);
    const x86::Mem x = row_mem(v);
    if (is_tail(v) && !t_.avx512) {
      const x86::Vec tmp = vec(xtmp_);
      load_tail_avx2(tmp, x, x86::xmm(xtmp2_));
      if (key_.weighted) a_.vfmadd231ps(acc, w, tmp);
      else a_.vaddps(acc, acc, tmp);
      continue;
    }
    if (is_tail(v)) a_.k(k_tail_);  // masked lanes keep +0.0 and fault-suppress
    if (key_.weighted) a_.vfmadd231ps(acc, w, x);
    else a_.vaddps(acc, acc, x);
  }
}

// Step: finish.
void X86EmbagEmitter::emit_finish() {
  emit_epilog();
  check("finish");
}

void emit_embag_kernel_x86(const EmbagKey& key, CodeHolder& code) {
  X86EmbagEmitter(key, code).generate();
}

}  // namespace shapejit::jit
