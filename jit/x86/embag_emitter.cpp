// X86EmbagEmitter: the x86 primitives of the embedding-bag skeleton (jit/embag_skeleton.hpp):
// register plan, integer work, branches, rows and prefetch. Max mode is in
// embag_emitter_max.cpp, the stores of ids and tails in embag_emitter_store.cpp, everything that
// depends on the table dtype in embag_emitter_table.cpp.
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

}  // namespace

X86EmbagEmitter::X86EmbagEmitter(const EmbagKey& key, CodeHolder& code)
    : EmbagSkeleton(key, code, X86VecTraits::of(key.isa).lanes),
      t_(X86VecTraits::of(key.isa)),
      a_(&code),
      gp_(RegGroup::kGp, std::vector<uint32_t>(std::begin(kGpOrder), std::end(kGpOrder))),
      vecs_(RegGroup::kVec, id_range(0, t_.num_regs)),
      kregs_(RegGroup::kX86_K, id_range(1, 8)) {
  // Measured on the AVX2 host class only (an EPYC VM); AVX-512 keeps the order it was tuned with.
  prefetch_after_row_ = key.isa == Isa::kAvx2;
}

void X86EmbagEmitter::check_isa() const {
  if (isa_traits(key().isa).family != IsaFamily::kX86) unsupported("not an x86 ISA");
  if (code().arch() != Arch::kX64) unsupported("the CodeHolder is not initialised for x86-64");
}

// Planning --------------------------------------------------------------------------------------

void X86EmbagEmitter::plan_registers() {
  const EmbagKey& k = key();
  const bool max = k.mode == Mode::kMax;
  auto role = [&](G r) { gp_id_[size_t(r)] = gp_.take(); };
  args_ = x86::gpq(gp_.take(x86::Gp::kIdDi));
  for (G r : {G::kWeight, G::kStride, G::kIndices, G::kPos, G::kEnd, G::kRow, G::kScratch, G::kBag, G::kOut})
    role(r);
  gp_id_[size_t(G::kId)] = gp_id_[size_t(G::kRow)];  // max ids come from memory, not from kId
  if (k.prefetch > 0) role(G::kLastPos);
  if (k.padding) role(G::kPad);
  if (k.weighted) psw_ = x86::gpq(gp_.take());
  if (counts()) role(G::kCount);
  if (writes_offset2bag()) o2b_ = x86::gpq(gp_.take());

  // Vector roles first; the accumulators and ids take what the widest block needs of the rest.
  // An f32 mean whose row is no narrower than the registers left borrows its divisor's register
  // at the store (mean_divisor) instead of keeping one: one column block fewer, i.e. one pass
  // over the bag's indices fewer (AVX2 D=128: one block of 16 instead of two of 8).
  const bool mean_f32 = k.mode == Mode::kMean && k.table == DType::kF32 && tail() == 0;
  if (tracks_ids() || (k.mode == Mode::kMean && !mean_f32) || (k.weighted && k.table == DType::kF32)) bcast_ = vecs_.take();
  if (max) xtmp_ = vecs_.take();
  plan_table_scratch();
  if (max && !t_.avx512) vcmp_ = vecs_.take();
  if (mean_f32) {
    borrow_divisor_ = num_vecs() >= int64_t(vecs_.available());
    if (!borrow_divisor_) bcast_ = vecs_.take();
  }
  if (max && !t_.avx512 && has_wide_path()) widen_ = vecs_.take();
  const int64_t need = plan_blocks(vecs_.available());
  std::vector<uint32_t> slots;
  for (int64_t i = 0; i < need; ++i) slots.push_back(vecs_.take());
  set_slots(std::move(slots));
  if (needs_block_end()) role(G::kBlockEnd);
  // Two bags in flight: at most 15 general-purpose registers with these three (weighted sum:
  // psw_; mean: kCount and o2b_; pair keys never prefetch).
  if (pairs_bags()) role(G::kPos2), role(G::kEnd2), role(G::kPairEnd);
  // The mapping pointer stays in a register when one is left (else map_row reloads it).
  if (k.pruned && gp_.available() > 0) mapping_ = x86::gpq(gp_.take());

  if (t_.avx512) {
    if (tail() != 0) k_tail_ = x86::k(kregs_.take());
    if (tracks_ids()) k_cmp_ = x86::k(kregs_.take());
    if (tracks_ids() && out_size() == 8) k_hi_ = x86::k(kregs_.take());
  }
}

void X86EmbagEmitter::emit_prolog_frame() {
  emit_prolog(args_, {&gp_, &vecs_, &kregs_}, FrameOptions{true, t_.avx512});
}

// Helpers ---------------------------------------------------------------------------------------

x86::Vec X86EmbagEmitter::vec(uint32_t id) const {
  return t_.avx512 ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
}

x86::Mem X86EmbagEmitter::row_mem(int64_t col) const {
  return x86::ptr(gp(G::kWeight), gp(G::kRow), 0, static_cast<int32_t>(row_disp(col)));
}

x86::Mem X86EmbagEmitter::arg_mem(size_t offset) const {
  return x86::qword_ptr(args_, static_cast<int32_t>(offset));
}

x86::Gp X86EmbagEmitter::base_reg(EmbagSrc base) {
  if (base.kind == EmbagSrc::Kind::kReg) return gp(base.reg);
  a_.mov(gp(G::kScratch), arg_mem(base.arg));
  return gp(G::kScratch);
}

void X86EmbagEmitter::zero_vec(uint32_t id) {
  if (t_.avx512) a_.vpxord(x86::zmm(id), x86::zmm(id), x86::zmm(id));
  else a_.vpxor(x86::xmm(id), x86::xmm(id), x86::xmm(id));  // VEX clears the upper lanes
}

// Load args -------------------------------------------------------------------------------------

void X86EmbagEmitter::load_args() {
  a_.mov(gp(G::kWeight), arg_mem(offsetof(EmbagKernelArgs, weight)));
  a_.mov(gp(G::kStride), arg_mem(offsetof(EmbagKernelArgs, row_stride_bytes)));
  a_.mov(gp(G::kIndices), arg_mem(offsetof(EmbagKernelArgs, indices)));
  if (key().prefetch > 0) {  // prefetch positions are clamped to the last index
    a_.mov(gp(G::kLastPos), arg_mem(offsetof(EmbagKernelArgs, num_indices)));
    a_.dec(gp(G::kLastPos));
  }
  if (key().padding) a_.mov(gp(G::kPad), arg_mem(offsetof(EmbagKernelArgs, padding_idx)));
  if (psw_.isValid()) a_.mov(psw_, arg_mem(offsetof(EmbagKernelArgs, per_sample_weights)));
  if (o2b_.isValid()) a_.mov(o2b_, arg_mem(offsetof(EmbagKernelArgs, offset2bag)));
  if (mapping_.isValid()) a_.mov(mapping_, arg_mem(offsetof(EmbagKernelArgs, mapping)));
  a_.mov(gp(G::kBag), arg_mem(offsetof(EmbagKernelArgs, bag_begin)));
  a_.mov(gp(G::kOut), arg_mem(offsetof(EmbagKernelArgs, output)));
  a_.imul(gp(G::kScratch), gp(G::kBag), static_cast<int32_t>(out_row_bytes()));
  a_.add(gp(G::kOut), gp(G::kScratch));
  if (tail() != 0 && t_.avx512) {
    a_.mov(gp(G::kScratch).r32(), (1u << tail()) - 1);
    a_.kmovw(k_tail_, gp(G::kScratch).r32());
  }
  if (ops_) ops_->setup(gp(G::kScratch));  // the dtype's constants and tail masks
}

// Integer work and branches -----------------------------------------------------------------------

void X86EmbagEmitter::gp_add(G dst, G src, int64_t imm) {
  const x86::Gp d = gp(dst);
  if (dst != src && imm == 0) {
    a_.mov(d, gp(src));
  } else if (dst != src) {
    a_.lea(d, x86::ptr(gp(src), static_cast<int32_t>(imm)));
  } else if (imm == 1) {
    a_.inc(d);
  } else if (imm > 0) {
    a_.add(d, static_cast<int32_t>(imm));
  } else if (imm < 0) {
    a_.sub(d, static_cast<int32_t>(-imm));
  }
}

void X86EmbagEmitter::gp_sub(G dst, G a, G b) {
  if (dst == b) {
    a_.neg(gp(dst));
    a_.add(gp(dst), gp(a));
    return;
  }
  if (dst != a) a_.mov(gp(dst), gp(a));
  a_.sub(gp(dst), gp(b));
}

void X86EmbagEmitter::gp_zero(G dst) { a_.xor_(gp(dst).r32(), gp(dst).r32()); }

void X86EmbagEmitter::gp_min(G dst, G limit) {
  a_.cmp(gp(dst), gp(limit));
  a_.cmovg(gp(dst), gp(limit));
}

void X86EmbagEmitter::load_arg(G dst, size_t offset) { a_.mov(gp(dst), arg_mem(offset)); }

void X86EmbagEmitter::load_int(G dst, EmbagSrc base, G pos, DType type) {
  const x86::Gp b = base_reg(base);
  if (type == DType::kI32) a_.movsxd(gp(dst), x86::dword_ptr(b, gp(pos), 2));
  else a_.mov(gp(dst), x86::qword_ptr(b, gp(pos), 3));
}

void X86EmbagEmitter::store_int(EmbagSrc base, G pos, G value) { store_int_at(base_reg(base), pos, value); }

void X86EmbagEmitter::store_int_at(const x86::Gp& base, G pos, G value) {
  if (out_size() == 4) a_.mov(x86::dword_ptr(base, gp(pos), 2), gp(value).r32());
  else a_.mov(x86::qword_ptr(base, gp(pos), 3), gp(value));
}

void X86EmbagEmitter::branch(EmbagCond cond, G a, EmbagSrc b, const Label& target) {
  switch (b.kind) {
    case EmbagSrc::Kind::kReg: a_.cmp(gp(a), gp(b.reg)); break;
    case EmbagSrc::Kind::kArg: a_.cmp(gp(a), arg_mem(b.arg)); break;
    case EmbagSrc::Kind::kImm: a_.cmp(gp(a), static_cast<int32_t>(b.imm)); break;
  }
  switch (cond) {
    case EmbagCond::kEq: a_.je(target); break;
    case EmbagCond::kLt: a_.jl(target); break;
    case EmbagCond::kGe: a_.jge(target); break;
    case EmbagCond::kGt: a_.jg(target); break;
    case EmbagCond::kBelow: a_.jb(target); break;
  }
}

void X86EmbagEmitter::jump(const Label& target) { a_.jmp(target); }

void X86EmbagEmitter::branch_if_wide_id(const Label& target) {
  a_.cmp(gp(G::kId), 0x7FFFFFFF);
  a_.ja(target);
}

// Rows, prefetch, pruning ---------------------------------------------------------------------------


// The position `prefetch` ahead as a displacement of the index load (the unclamped copy).
void X86EmbagEmitter::load_index_ahead() {
  const x86::Gp s = gp(G::kScratch), pos = gp(G::kPos), idx = gp(G::kIndices);
  if (key().index == DType::kI32) a_.movsxd(s, x86::dword_ptr(idx, pos, 2, key().prefetch * 4));
  else a_.mov(s, x86::qword_ptr(idx, pos, 3, key().prefetch * 8));
}

void X86EmbagEmitter::map_row(G dst, G id, G tmp) {
  x86::Gp base = mapping_;
  if (!base.isValid()) {
    base = gp(tmp);
    a_.mov(base, arg_mem(offsetof(EmbagKernelArgs, mapping)));
  }
  a_.movsxd(gp(dst), x86::dword_ptr(base, gp(id), 2));
}

// A block of whole lines gets exactly its lines when the row is 64-byte aligned (the usual
// table: aligned base, D a multiple of 16); an unaligned row then leaves its last line to the
// demand load. Prefetching that line too cost 24 % of the GB/s at D=32 and 9 % at D=64 on
// aligned tables (a fifth prefetch per 4-line row). Other lengths straddle a line anyway, so the
// line of their last byte is prefetched as well.
void X86EmbagEmitter::prefetch_row(int64_t begin, int64_t len) {
  const x86::Gp s = gp(G::kScratch), w = gp(G::kWeight);
  a_.imul(s, gp(G::kStride));
  for (int64_t off = 0; off < len; off += 64)
    a_.prefetcht0(x86::ptr(w, s, 0, static_cast<int32_t>(begin + off)));
  if (len % 64 != 0 && (len - 1) % 64 != 0)
    a_.prefetcht0(x86::ptr(w, s, 0, static_cast<int32_t>(begin + len - 1)));
}

// kRow becomes the row's byte offset from kWeight: columns are then [weight + row + disp].
void X86EmbagEmitter::form_row_address() { a_.imul(gp(G::kRow), gp(G::kStride)); }

void emit_embag_kernel_x86(const EmbagKey& key, CodeHolder& code) {
  X86EmbagEmitter(key, code).generate();
}

}  // namespace shapejit::jit
