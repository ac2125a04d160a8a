// A64EmbagEmitter: the NEON primitives of the embedding-bag skeleton (jit/embag_skeleton.hpp):
// register plan, integer work, branches, rows and prefetch. Max mode and the vector moves are
// in embag_emitter_max.cpp and embag_emitter_store.cpp, everything that depends on the table
// dtype in embag_emitter_table.cpp.
#include "jit/a64/embag_emitter.hpp"

#include <cstddef>
#include <string>

#include "jit/a64/reg_order.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

A64EmbagEmitter::A64EmbagEmitter(const EmbagKey& key, CodeHolder& code)
    : EmbagSkeleton(key, code, kLanes),
      a_(&code),
      gp_(RegGroup::kGp, a64_gp_order(/*with_link_register=*/false)),
      vecs_(RegGroup::kVec, a64_vec_order()) {
  rebase_static_blocks_ = true;  // ldr q reaches 64 KiB, ldp 1 KiB, prfm 32 KiB
}

void A64EmbagEmitter::check_isa() const {
  if (isa_traits(key().isa).family != IsaFamily::kA64) unsupported("not an AArch64 ISA");
  if (code().arch() != Arch::kAArch64) unsupported("the CodeHolder is not initialised for AArch64");
}

// Planning --------------------------------------------------------------------------------------

void A64EmbagEmitter::plan_registers() {
  const EmbagKey& k = key();
  const bool max = k.mode == Mode::kMax;
  auto role = [&](G r) { gp_id_[size_t(r)] = gp_.take(); };
  auto gpx = [&] { return a64::x(gp_.take()); };
  args_ = a64::x(gp_.take(0));  // the incoming argument stays where AAPCS64 puts it
  role(G::kWeight), role(G::kStride), role(G::kIndices);
  offsets_ = gpx();
  role(G::kPos), role(G::kEnd), role(G::kRow);
  rowp_ = gpx();
  role(G::kScratch), role(G::kBag);
  bag_end_ = gpx();
  role(G::kOut);
  if (k.prefetch > 0) role(G::kLastPos);
  if (k.padding) role(G::kPad);
  if (k.weighted) psw_ = gpx();
  if (counts()) role(G::kCount);
  if (writes_offset2bag()) o2b_ = gpx();
  if (k.prefetch > 0) ahead_ = gpx();  // indices + prefetch: the unclamped copy's index base
  if (k.pruned) {
    mapping_ = gpx();
    role(G::kId);  // max ids are dup'ed from the index as given
  } else {
    gp_id_[size_t(G::kId)] = gp_id_[size_t(G::kRow)];
  }

  // Vector roles first; the accumulators and ids take what the widest block needs of the rest,
  // so narrow kernels never touch the callee-saved v8-v15.
  load0_ = vecs_.take();
  plan_table_scratch();
  if (tracks_ids() || (k.weighted && f32_table()) || k.mode == Mode::kMean) bcast_ = vecs_.take();
  if (max) mask_ = vecs_.take();
  if (has_wide_path()) widen_ = vecs_.take();
  const int64_t free_vecs = vecs_.available();
  const int64_t need = plan_blocks(free_vecs);
  // The skeleton's rule for the 64-bit-id path (value + two id halves per vector), mirrored
  // for grouped max loads (block_vecs_at).
  if (has_wide_path()) wide_blocks_ = split_embag_blocks(num_vecs(), free_vecs / 3);
  std::vector<uint32_t> slots;
  for (int64_t i = 0; i < need; ++i) slots.push_back(vecs_.take());
  set_slots(std::move(slots));
  if (needs_block_end()) role(G::kBlockEnd);
  if (pairs_bags()) role(G::kPos2), role(G::kEnd2), role(G::kPairEnd);
  if (needs_block_end() && is_quantized_table(k.table)) table_ = gpx();
}

void A64EmbagEmitter::emit_prolog_frame() { emit_prolog(args_, {&gp_, &vecs_}, FrameOptions{}); }

// Helpers ---------------------------------------------------------------------------------------

void A64EmbagEmitter::load_field(const a64::Gp& dst, size_t offset) {
  a_.ldr(dst, a64::ptr(args_, static_cast<int32_t>(offset)));
}

a64::Gp A64EmbagEmitter::arg_reg(size_t offset) const {
  if (offset == offsetof(EmbagKernelArgs, offsets)) return offsets_;
  if (offset == offsetof(EmbagKernelArgs, bag_end)) return bag_end_;
  return a64::Gp();
}

a64::Gp A64EmbagEmitter::base_reg(EmbagSrc base) {
  if (base.kind == EmbagSrc::Kind::kReg) return gp(base.reg);
  const a64::Gp kept = arg_reg(base.arg);
  if (kept.isValid()) return kept;
  load_field(gp(G::kScratch), base.arg);
  return gp(G::kScratch);
}

// dst = src + value for any value: a 12-bit immediate when it fits, else through kScratch.
void A64EmbagEmitter::add_imm(const a64::Gp& dst, const a64::Gp& src, int64_t value) {
  const uint64_t magnitude = value < 0 ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  if (magnitude < 4096) {
    if (value >= 0) a_.add(dst, src, Imm(magnitude));
    else a_.sub(dst, src, Imm(magnitude));
    return;
  }
  const a64::Gp s = gp(G::kScratch);
  if (src.id() == s.id())  // (dst may be kScratch: src is read before dst is written)
    throw Error(Status::kInternalError, kernel_name() + ": add_imm needs scratch for a large step");
  a_.mov(s, Imm(magnitude));
  if (value >= 0) a_.add(dst, src, s);
  else a_.sub(dst, src, s);
}

void A64EmbagEmitter::zero_vec(uint32_t id) { a_.movi(a64::v(id).s4(), 0); }

// Load args -------------------------------------------------------------------------------------

void A64EmbagEmitter::load_args() {
  load_field(gp(G::kWeight), offsetof(EmbagKernelArgs, weight));
  if (table_.isValid()) a_.mov(table_, gp(G::kWeight));
  load_field(gp(G::kStride), offsetof(EmbagKernelArgs, row_stride_bytes));
  load_field(gp(G::kIndices), offsetof(EmbagKernelArgs, indices));
  load_field(offsets_, offsetof(EmbagKernelArgs, offsets));
  if (key().prefetch > 0) {  // prefetch positions are clamped to the last index
    load_field(gp(G::kLastPos), offsetof(EmbagKernelArgs, num_indices));
    a_.sub(gp(G::kLastPos), gp(G::kLastPos), Imm(1));
    const int64_t elem = key().index == DType::kI32 ? 4 : 8;
    add_imm(ahead_, gp(G::kIndices), key().prefetch * elem);
  }
  if (key().padding) load_field(gp(G::kPad), offsetof(EmbagKernelArgs, padding_idx));
  if (psw_.isValid()) load_field(psw_, offsetof(EmbagKernelArgs, per_sample_weights));
  if (o2b_.isValid()) load_field(o2b_, offsetof(EmbagKernelArgs, offset2bag));
  if (mapping_.isValid()) load_field(mapping_, offsetof(EmbagKernelArgs, mapping));
  load_field(gp(G::kBag), offsetof(EmbagKernelArgs, bag_begin));
  load_field(bag_end_, offsetof(EmbagKernelArgs, bag_end));
  load_field(gp(G::kOut), offsetof(EmbagKernelArgs, output));
  a_.mov(gp(G::kScratch), Imm(uint64_t(out_row_bytes())));
  a_.madd(gp(G::kOut), gp(G::kBag), gp(G::kScratch), gp(G::kOut));
  emit_table_constants();
}

// Integer work and branches -----------------------------------------------------------------------

void A64EmbagEmitter::gp_add(G dst, G src, int64_t imm) {
  if (dst == src && imm == 0) return;
  add_imm(gp(dst), gp(src), imm);
}

void A64EmbagEmitter::gp_sub(G dst, G a, G b) { a_.sub(gp(dst), gp(a), gp(b)); }

void A64EmbagEmitter::gp_zero(G dst) { a_.mov(gp(dst), a64::xzr); }

void A64EmbagEmitter::gp_min(G dst, G limit) {
  a_.cmp(gp(dst), gp(limit));
  a_.csel(gp(dst), gp(limit), gp(dst), Imm(uint32_t(a64::CondCode::kGT)));
}

void A64EmbagEmitter::load_arg(G dst, size_t offset) { load_field(gp(dst), offset); }

void A64EmbagEmitter::load_int(G dst, EmbagSrc base, G pos, DType type) {
  const a64::Gp b = base_reg(base);
  if (type == DType::kI32) a_.ldrsw(gp(dst), a64::ptr(b, gp(pos), a64::lsl(2)));
  else a_.ldr(gp(dst), a64::ptr(b, gp(pos), a64::lsl(3)));
}

void A64EmbagEmitter::store_int(EmbagSrc base, G pos, G value) { store_int_at(base_reg(base), pos, value); }

// base[pos] = value, as an element of the integer outputs' type.
void A64EmbagEmitter::store_int_at(const a64::Gp& base, G pos, G value) {
  if (out_size() == 4) a_.str(a64::w(gp(value).id()), a64::ptr(base, gp(pos), a64::lsl(2)));
  else a_.str(gp(value), a64::ptr(base, gp(pos), a64::lsl(3)));
}

void A64EmbagEmitter::branch(EmbagCond cond, G a, EmbagSrc b, const Label& target) {
  const a64::Gp x = gp(a);
  switch (b.kind) {
    case EmbagSrc::Kind::kReg: a_.cmp(x, gp(b.reg)); break;
    case EmbagSrc::Kind::kArg: a_.cmp(x, base_reg(b)); break;
    case EmbagSrc::Kind::kImm:
      if (b.imm >= 0 && b.imm < 4096) a_.cmp(x, Imm(uint64_t(b.imm)));
      else if (b.imm < 0 && b.imm > -4096) a_.cmn(x, Imm(uint64_t(-b.imm)));
      else throw Error(Status::kInternalError, kernel_name() + ": compare immediate out of range");
      break;
  }
  switch (cond) {
    case EmbagCond::kEq: a_.b_eq(target); break;
    case EmbagCond::kLt: a_.b_lt(target); break;
    case EmbagCond::kGe: a_.b_ge(target); break;
    case EmbagCond::kGt: a_.b_gt(target); break;
    case EmbagCond::kBelow: a_.b_lo(target); break;
  }
}

void A64EmbagEmitter::jump(const Label& target) { a_.b(target); }

// Any of bits 31-63 set: the id does not fit a 32-bit lane (one logical-immediate test).
void A64EmbagEmitter::branch_if_wide_id(const Label& target) {
  a_.tst(gp(G::kId), Imm(uint64_t(0xFFFFFFFF80000000u)));
  a_.b_ne(target);
}

// Rows, prefetch, pruning ---------------------------------------------------------------------------

// The offset2bag fill's primitives (EmbagSkeleton::emit_offset2bag_fill).
void A64EmbagEmitter::broadcast_bag(uint32_t vec) {
  if (out_size() == 4) a_.dup(a64::v(vec).s4(), a64::w(gp(G::kBag).id()));
  else a_.dup(a64::v(vec).d2(), gp(G::kBag));
}

// A q register has no element-scaled index form: the address goes through rowp_, free before
// the row loop.
void A64EmbagEmitter::store_bag_vector(uint32_t vec, G pos) {
  a_.add(rowp_, o2b_, gp(pos), a64::lsl(out_size() == 4 ? 2 : 3));
  a_.str(a64::v(vec), a64::ptr(rowp_));  // the whole q register
}

void A64EmbagEmitter::load_index_ahead() {
  const a64::Gp s = gp(G::kScratch);
  if (key().index == DType::kI32) a_.ldrsw(s, a64::ptr(ahead_, gp(G::kPos), a64::lsl(2)));
  else a_.ldr(s, a64::ptr(ahead_, gp(G::kPos), a64::lsl(3)));
}

void A64EmbagEmitter::map_row(G dst, G id, G) {
  a_.ldrsw(gp(dst), a64::ptr(mapping_, gp(id), a64::lsl(2)));
}

// Rows need not be 64-byte aligned: the last byte may sit on one more line (the 8-byte aligned
// address below it is on the same line).
void A64EmbagEmitter::prefetch_row(int64_t begin, int64_t len) {
  const a64::Gp s = gp(G::kScratch);
  a_.madd(s, s, gp(G::kStride), gp(G::kWeight));
  for (int64_t off = 0; off < len; off += 64) prefetch(s, begin + off);
  if ((len - 1) % 64 != 0) prefetch(s, (begin + len - 1) & ~int64_t(7));
}

// `prfm pldl1keep, [base, #offset]`, embedded as its word (jit/a64/prefetch.hpp); the listing
// shows the instruction as a comment line followed by its `.word`.
void A64EmbagEmitter::prefetch(const a64::Gp& base, int64_t offset) {
  const uint32_t word = encode_prfm_pldl1keep(base.id(), offset);
  if (code().logger())
    a_.comment(("prfm pldl1keep, [x" + std::to_string(base.id()) + ", " + std::to_string(offset) + "]").c_str());
  a_.embedUInt32(word);
}

// The row's address, once per row: its columns are immediate offsets from rowp_.
void A64EmbagEmitter::form_row_address() {
  a_.madd(rowp_, gp(G::kRow), gp(G::kStride), gp(G::kWeight));
}

void emit_embag_kernel_a64(const EmbagKey& key, CodeHolder& code) {
  A64EmbagEmitter(key, code).generate();
}

}  // namespace shapejit::jit
