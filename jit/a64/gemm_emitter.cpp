// A64GemmEmitter, planning, frame, loops and the k step: see gemm_emitter.hpp. The order of the
// arithmetic is the skeleton's (jit/gemm_skeleton.hpp), as on x86.
#include "jit/a64/gemm_emitter.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "jit/a64/prefetch.hpp"
#include "jit/a64/reg_order.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kLanes = 4, kVecBytes = 16;

a64::Vec vq(uint32_t id) { return a64::v(id); }

}  // namespace

A64GemmEmitter::A64GemmEmitter(const GemmKey& key, CodeHolder& code)
    : GemmSkeleton(key, code),
      a_(&code),
      gp_(RegGroup::kGp, a64_gp_order(/*with_link_register=*/true)),
      vecs_(RegGroup::kVec, a64_vec_order()) {}

// Planning --------------------------------------------------------------------------------------

void A64GemmEmitter::check_isa() const {
  if (isa_traits(key().isa).family != IsaFamily::kA64) unsupported("not an AArch64 ISA");
  if (code().arch() != Arch::kAArch64) unsupported("the CodeHolder is not initialised for AArch64");
  if (key().lanes() != kLanes) unsupported("gemm_lanes(neon) must be 4");
  if (key().k_split != 1) unsupported("k_split: the NEON emitter reads one weight stream (post-incremented X rows)");
}

void A64GemmEmitter::plan_registers() {
  auto gpx = [&] { return a64::x(gp_.take()); };
  if (calls_out()) {
    // What lives across the calls sits in callee-saved registers; blr clobbers x30.
    args_ = a64::x(gp_.take(19));
    b_ = a64::x(gp_.take(20));
    panels_ = a64::x(gp_.take(21));
    cur_ = a64::x(gp_.take(22));
    gp_.take(30);  // marks the link register dirty, so the frame saves and restores it
  } else {
    args_ = a64::x(gp_.take(0));
    b_ = gpx(), panels_ = gpx(), cur_ = gpx();
  }
  ld_ = gpx(), kcnt_ = gpx(), scratch_ = gpx();
  for (int64_t i = 0; i < mr(); ++i) rows_.push_back(gpx());
  if (key().store == GemmStore::kTable)
    for (int64_t j = 0; j < nv(); ++j) tcol_.push_back(gpx());

  spill_bytes_ = calls_out() ? tile_vectors() * kVecBytes : 0;
  if (key().quant != GemmQuant::kF32 || key().dot) {
    plan_quant_registers();
    return;
  }
  for (int64_t j = 0; j < nv(); ++j) bv_.push_back(vecs_.take());
  for (int64_t i = 0; i < mr(); ++i) av_.push_back(vecs_.take());
  std::vector<uint32_t> acc;
  for (int64_t i = 0; i < tile_vectors(); ++i) acc.push_back(vecs_.take());
  set_accumulators(std::move(acc));
}

// Quantized forms: the X registers first (v0-v7: smlal by element reaches v0-v15 only), then
// weights and accumulators as for f32, one constant and the temporaries the primitives need
// beyond the weight registers (gemm_max_mr leaves at least one register free for every nv).
void A64GemmEmitter::plan_quant_registers() {
  if (key().dot && !gemm_quantized_input(key().quant)) unsupported("the dot variant applies to the qd8 forms only");
  for (int64_t i = 0; i < mr(); ++i) av_.push_back(vecs_.take());
  for (int64_t j = 0; j < nv(); ++j) bv_.push_back(vecs_.take());
  std::vector<uint32_t> acc;
  for (int64_t i = 0; i < tile_vectors(); ++i) acc.push_back(vecs_.take());
  A64QuantRegs r;
  r.args = args_, r.b = b_, r.scratch = scratch_, r.gp1 = kcnt_, r.gp2 = ld_;
  r.rows = rows_, r.acc = acc, r.x = av_, r.temps = bv_;
  const int64_t extra = std::max<int64_t>(0, a64_quant_temps(key()) - nv());
  if (int64_t(vecs_.available()) < 1 + extra)
    unsupported("mr " + std::to_string(mr()) + " leaves too few vector registers for the quantized form");
  r.constant = vecs_.take();
  for (int64_t t = 0; t < extra; ++t) r.temps.push_back(vecs_.take());
  set_accumulators(std::move(acc));
  quant_ = std::make_unique<A64GemmQuantOps>(key(), a_, std::move(r), kernel_name());
}

void A64GemmEmitter::emit_prolog_frame() { emit_prolog(args_, {&gp_, &vecs_}, FrameOptions{}); }

void A64GemmEmitter::load_args() {
  load_arg(b_, offsetof(GemmKernelArgs, b));
  load_arg(panels_, offsetof(GemmKernelArgs, panels));
  load_arg(cur_, key().store == GemmStore::kTable ? offsetof(GemmKernelArgs, col_off) : offsetof(GemmKernelArgs, c));
  if (calls_out()) a_.sub(a64::sp, a64::sp, Imm(uint64_t(spill_bytes_)));  // a multiple of 16
}

void A64GemmEmitter::finish() {
  if (calls_out()) a_.add(a64::sp, a64::sp, Imm(uint64_t(spill_bytes_)));
}

// Helpers ---------------------------------------------------------------------------------------

void A64GemmEmitter::load_arg(const a64::Gp& dst, size_t offset) {
  a_.ldr(dst, a64::ptr(args_, static_cast<int32_t>(offset)));
}

// dst = src + value for any value: a 12-bit immediate when it fits, else through scratch_.
void A64GemmEmitter::add_imm(const a64::Gp& dst, const a64::Gp& src, int64_t value) {
  const uint64_t magnitude = value < 0 ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  if (magnitude < 4096) {
    if (value > 0 || dst.id() != src.id()) {
      if (value >= 0) a_.add(dst, src, Imm(magnitude));
      else a_.sub(dst, src, Imm(magnitude));
    }
    return;
  }
  if (src.id() == scratch_.id())  // (dst may be scratch_: src is read before dst is written)
    throw Error(Status::kInternalError, kernel_name() + ": add_imm needs scratch for a large step");
  a_.mov(scratch_, Imm(magnitude));
  if (value >= 0) a_.add(dst, src, scratch_);
  else a_.sub(dst, src, scratch_);
}

// rows_[0] = base, rows_[i] = rows_[i - 1] + the stride argument.
void A64GemmEmitter::point_rows(const a64::Gp& base, size_t stride_arg) {
  if (rows_[0].id() != base.id()) a_.mov(rows_[0], base);
  if (mr() == 1) return;
  load_arg(ld_, stride_arg);
  for (int64_t i = 1; i < mr(); ++i) a_.add(rows_[size_t(i)], rows_[size_t(i - 1)], ld_);
}

// Loops -----------------------------------------------------------------------------------------

void A64GemmEmitter::point_at_x_rows() {
  load_arg(rows_[0], offsetof(GemmKernelArgs, a));
  point_rows(rows_[0], offsetof(GemmKernelArgs, lda));
}

void A64GemmEmitter::panel_loop_end(const Label& top) {
  a_.subs(panels_, panels_, Imm(1));
  a_.b_ne(top);
}

void A64GemmEmitter::k_loop_begin(int64_t iterations) { a_.mov(kcnt_, Imm(uint64_t(iterations))); }

// The X rows moved by their loads' post-increment; the panel pointer moves here.
void A64GemmEmitter::k_loop_end(int64_t k, const Label& top) {
  add_imm(b_, b_, weight_bytes(k));
  a_.subs(kcnt_, kcnt_, Imm(1));
  a_.b_ne(top);
}

// The k step ------------------------------------------------------------------------------------

void A64GemmEmitter::zero_vec(uint32_t vec) { a_.movi(vq(vec).s4(), 0); }

// Row 0 loads the bias row (its address in scratch_ once), the other rows copy row 0.
void A64GemmEmitter::load_bias(uint32_t dst, int64_t row, int64_t v, int64_t offset) {
  if (row != 0) {
    a_.mov(vq(dst).b16(), vq(acc(0, 0, v)).b16());
    return;
  }
  if (v == 0) add_imm(scratch_, b_, offset);
  a_.ldr(vq(dst), a64::ptr(scratch_, static_cast<int32_t>(v * kVecBytes)));
}

// Four k: X[r, k..k+3] in one register per row (post-incremented inside the loop); one k: a
// single float.
void A64GemmEmitter::load_x(const GemmKStep& s) {
  for (int64_t i = 0; i < mr(); ++i) {
    const a64::Gp& p = rows_[size_t(i)];
    const uint32_t x = av_[size_t(i)];
    if (s.width == 1) a_.ldr(a64::s(x), a64::ptr(p, static_cast<int32_t>(s.k * 4)));
    else if (s.in_loop) a_.ldr(vq(x), a64::ptr_post(p, int32_t(kVecBytes)));
    else a_.ldr(vq(x), a64::ptr(p, static_cast<int32_t>(s.k * 4)));
  }
}

// One panel row (nv vectors; the packing zero-pads past nc) at b_ + b_off, in pairs when the
// offset allows, after prefetching the lines the row starts.
void A64GemmEmitter::load_weight_row(int64_t b_off) {
  emit_weight_prefetch(b_off);
  for (int64_t j = 0; j < nv();) {
    const int64_t off = b_off + j * kVecBytes;
    if (j + 1 < nv() && off <= 1008) {
      a_.ldp(vq(bv_[size_t(j)]), vq(bv_[size_t(j + 1)]), a64::ptr(b_, static_cast<int32_t>(off)));
      j += 2;
    } else {
      a_.ldr(vq(bv_[size_t(j)]), a64::ptr(b_, static_cast<int32_t>(off)));
      ++j;
    }
  }
}

// `prfm pldl1keep, [b_, #offset]` (asmjit 1.9 has no PRFM: jit/a64/prefetch.hpp).
void A64GemmEmitter::prefetch_weights(int64_t offset) {
  offset &= ~int64_t(7);  // the scaled form needs a multiple of 8 (same cache line)
  a64::Gp base = b_;
  if (offset > 32760) {  // out of the immediate's reach: the address in scratch_
    a_.mov(scratch_, Imm(uint64_t(offset)));
    a_.add(scratch_, scratch_, b_);
    base = scratch_, offset = 0;
  }
  const uint32_t word = encode_prfm_pldl1keep(base.id(), offset);
  if (code().logger())
    a_.comment(("prfm pldl1keep, [x" + std::to_string(base.id()) + ", " + std::to_string(offset) + "]").c_str());
  a_.embedUInt32(word);
}

// No broadcast: the FMA takes lane kk of the row's X register.
GemmXOperand A64GemmEmitter::broadcast_x(const GemmKStep& s, int64_t row, int64_t kk) {
  return GemmXOperand{av_[size_t(row)], s.width == 1 ? 0 : kk, false, row, s.k + kk};
}

void A64GemmEmitter::fma(uint32_t acc, int64_t v, const GemmXOperand& x) {
  a_.fmla(vq(acc).s4(), vq(bv_[size_t(v)]).s4(), vq(x.vec).s(uint32_t(x.lane)));
}

void emit_gemm_kernel_a64(const GemmKey& key, CodeHolder& code) {
  A64GemmEmitter emitter(key, code);
  emitter.generate();
}

}  // namespace shapejit::jit
