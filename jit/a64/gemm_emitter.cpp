// A64GemmEmitter: see gemm_emitter.hpp for the shape of the generated code. Results are within
// the tolerance of split-gemm-semantics.md (fused multiply-adds in ascending k from the bias),
// like the x86 kernels; the epilogue evaluates the activations with the same formulas.
#include "jit/a64/gemm_emitter.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <string>

#include "jit/a64/reg_order.hpp"
#include "shapejit/shapejit.hpp"

// SLEEF's advsimd functions, called from generated code (only their addresses are taken).
// Other hosts only cross-emit AArch64 code (jitdump), which never runs: the call target is 0.
#if defined(SHAPEJIT_HOST_A64)
extern "C" {
void Sleef_erff4_u10advsimd();
void Sleef_tanhf4_u10advsimd();
void Sleef_expf4_u10advsimd();
}
#define SJ_SLEEF(fn) reinterpret_cast<uint64_t>(&fn)
#else
#define SJ_SLEEF(fn) uint64_t(0)
#endif

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kMaxK = int64_t(1) << 22;
constexpr int64_t kFullUnrollK = 32;  // K up to this is emitted without a loop
constexpr int64_t kLanes = 4, kVecBytes = 16;

a64::Vec vq(uint32_t id) { return a64::v(id); }

#define SJ_ARG(field) offsetof(GemmKernelArgs, field)

}  // namespace

A64GemmEmitter::A64GemmEmitter(const GemmKey& key, CodeHolder& code)
    : KernelEmitter(code, key.name()),
      key_(key),
      nv_(key.nv()),
      tail_(key.tail()),
      mr_(key.mr),
      a_(&code),
      gp_(RegGroup::kGp, a64_gp_order(/*with_link_register=*/true)),
      vecs_(RegGroup::kVec, a64_vec_order()) {
  attach(a_);
}

void A64GemmEmitter::generate() {
  plan();
  plan_registers();
  emit_prolog(args_, {&gp_, &vecs_}, FrameOptions{});
  emit_load_args();
  emit_panel_loop();
  emit_finish();
}

bool A64GemmEmitter::calls_sleef() const {
  return key_.act != Activation::kNone && key_.act != Activation::kRelu;
}

// Planning --------------------------------------------------------------------------------------

void A64GemmEmitter::plan() {
  if (isa_traits(key_.isa).family != IsaFamily::kA64) unsupported("not an AArch64 ISA");
  if (code().arch() != Arch::kAArch64) unsupported("the CodeHolder is not initialised for AArch64");
  if (key_.lanes() != kLanes) unsupported("gemm_lanes(neon) must be 4");
  if (key_.k < 1 || key_.k > kMaxK)
    unsupported("k " + std::to_string(key_.k) + " is outside [1, " + std::to_string(kMaxK) + "]");
  if (key_.nc < 1 || nv_ > 4) unsupported("nc " + std::to_string(key_.nc) + " needs 1..4 vectors");
  if (mr_ < 1 || mr_ > gemm_max_mr(key_.isa, int(nv_)))
    unsupported("mr " + std::to_string(mr_) + " is outside [1, " + std::to_string(gemm_max_mr(key_.isa, int(nv_))) +
                "] for " + std::to_string(nv_) + " vectors");
  if (key_.store == GemmStore::kTable && tail_ != 0)
    unsupported("table stores need whole vectors (nc a multiple of 4)");
  if (key_.prefetch < 0 || key_.prefetch > (1 << 20)) unsupported("prefetch distance outside [0, 2^20]");
  row_bytes_ = nv_ * kVecBytes;
  groups_ = key_.k / 4;
  rest_ = key_.k % 4;
  loop_k_ = key_.k > kFullUnrollK;
  spill_bytes_ = calls_sleef() ? mr_ * nv_ * kVecBytes : 0;
}

void A64GemmEmitter::plan_registers() {
  auto gpx = [&] { return a64::x(gp_.take()); };
  if (calls_sleef()) {
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
  for (int64_t i = 0; i < mr_; ++i) rows_.push_back(gpx());
  if (key_.store == GemmStore::kTable)
    for (int64_t j = 0; j < nv_; ++j) tcol_.push_back(gpx());

  for (int64_t j = 0; j < nv_; ++j) bv_.push_back(vecs_.take());
  for (int64_t i = 0; i < mr_; ++i) av_.push_back(vecs_.take());
  for (int64_t i = 0; i < mr_ * nv_; ++i) acc_.push_back(vecs_.take());
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

// All four lanes of vector `vec_id` = value (scratch_ carries the bits).
void A64GemmEmitter::load_constant(uint32_t vec_id, float value) {
  a_.mov(a64::w(scratch_.id()), Imm(std::bit_cast<uint32_t>(value)));
  a_.dup(vq(vec_id).s4(), a64::w(scratch_.id()));
}

// Vector v of a row to base + offset; the last vector of a partial panel stores exactly its
// tail columns (never past the row's end).
void A64GemmEmitter::store_vec(uint32_t src, const a64::Mem& dst, int64_t v) {
  const int64_t cols = v == nv_ - 1 && tail_ != 0 ? tail_ : kLanes;
  switch (cols) {
    case 4: a_.str(vq(src), dst); return;
    case 1: a_.str(a64::s(src), dst); return;
    case 2: a_.str(a64::d(src), dst); return;
    default: {
      a_.str(a64::d(src), dst);
      const a64::Gp base = a64::x(dst.baseId());
      add_imm(scratch_, base, dst.offsetLo32() + 8);  // lane stores take no offset
      a_.st1(vq(src).s(2), a64::ptr(scratch_));
    }
  }
}

// `prfm pldl1keep, [b_, #offset]` (asmjit 1.9 has no PRFM: jit/a64/prefetch.hpp).
void A64GemmEmitter::prefetch(int64_t offset) {
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

// Step: load args -----------------------------------------------------------------------------

void A64GemmEmitter::emit_load_args() {
  load_arg(b_, SJ_ARG(b));
  load_arg(panels_, SJ_ARG(panels));
  if (key_.store == GemmStore::kTable) load_arg(cur_, SJ_ARG(col_off));
  else load_arg(cur_, SJ_ARG(c));
  if (calls_sleef()) a_.sub(a64::sp, a64::sp, Imm(uint64_t(spill_bytes_)));  // a multiple of 16
  check("load_args");
}

// Step: panel loop ------------------------------------------------------------------------------

void A64GemmEmitter::emit_panel_loop() {
  Label top = a_.newLabel();
  a_.align(AlignMode::kCode, 16);
  a_.bind(top);
  load_arg(rows_[0], SJ_ARG(a));
  emit_row_pointers(rows_[0], SJ_ARG(lda));
  emit_init();
  emit_k_loop();
  emit_activation();
  emit_scale();
  emit_store();
  emit_next_panel();
  a_.subs(panels_, panels_, Imm(1));
  a_.b_ne(top);
  check("panel_loop");
}

// rows_[0] = base, rows_[i] = rows_[i - 1] + the stride argument.
void A64GemmEmitter::emit_row_pointers(const a64::Gp& base, size_t stride_arg) {
  if (rows_[0].id() != base.id()) a_.mov(rows_[0], base);
  if (mr_ == 1) return;
  load_arg(ld_, stride_arg);
  for (int64_t i = 1; i < mr_; ++i) a_.add(rows_[size_t(i)], rows_[size_t(i - 1)], ld_);
}

// Every row starts from the bias (the panel's row after its k rows), or from zero.
void A64GemmEmitter::emit_init() {
  if (!key_.bias) {
    for (uint32_t r : acc_) a_.movi(vq(r).s4(), 0);
    return;
  }
  add_imm(scratch_, b_, key_.k * row_bytes_);
  for (int64_t j = 0; j < nv_; ++j) {
    a_.ldr(vq(acc(0, j)), a64::ptr(scratch_, static_cast<int32_t>(j * kVecBytes)));
    for (int64_t i = 1; i < mr_; ++i) a_.mov(vq(acc(i, j)).b16(), vq(acc(0, j)).b16());
  }
}

// Step: k loop ----------------------------------------------------------------------------------

void A64GemmEmitter::emit_k_loop() {
  b_consumed_ = 0;
  int64_t a_base = 0, b_base = 0;  // offsets of the rest from the row pointers and b_
  if (loop_k_) {
    Label loop = a_.newLabel();
    a_.mov(kcnt_, Imm(uint64_t(groups_)));
    a_.align(AlignMode::kCode, 16);
    a_.bind(loop);
    emit_k_group(0, 0, true);
    add_imm(b_, b_, 4 * row_bytes_);
    a_.subs(kcnt_, kcnt_, Imm(1));
    a_.b_ne(loop);
    b_consumed_ = groups_ * 4 * row_bytes_;
  } else {
    for (int64_t g = 0; g < groups_; ++g) emit_k_group(g * kVecBytes, g * 4 * row_bytes_, false);
    a_base = groups_ * kVecBytes;
    b_base = groups_ * 4 * row_bytes_;
  }
  for (int64_t r = 0; r < rest_; ++r) emit_k_single(a_base + r * 4, b_base + r * row_bytes_);
  check("k_loop");
}

// Four k: X[r, k..k+3] in one register per row, lane kk multiplying panel row k + kk.
void A64GemmEmitter::emit_k_group(int64_t a_off, int64_t b_off, bool post_increment) {
  for (int64_t i = 0; i < mr_; ++i) {
    const a64::Gp& p = rows_[size_t(i)];
    if (post_increment) a_.ldr(vq(av_[size_t(i)]), a64::ptr_post(p, int32_t(kVecBytes)));
    else a_.ldr(vq(av_[size_t(i)]), a64::ptr(p, static_cast<int32_t>(a_off)));
  }
  for (int64_t kk = 0; kk < 4; ++kk) {
    emit_panel_row(b_off + kk * row_bytes_);
    for (int64_t i = 0; i < mr_; ++i)
      for (int64_t j = 0; j < nv_; ++j)
        a_.fmla(vq(acc(i, j)).s4(), vq(bv_[size_t(j)]).s4(), vq(av_[size_t(i)]).s(uint32_t(kk)));
  }
}

// One k (the K % 4 rest): a single float per row.
void A64GemmEmitter::emit_k_single(int64_t a_off, int64_t b_off) {
  for (int64_t i = 0; i < mr_; ++i)
    a_.ldr(a64::s(av_[size_t(i)]), a64::ptr(rows_[size_t(i)], static_cast<int32_t>(a_off)));
  emit_panel_row(b_off);
  for (int64_t i = 0; i < mr_; ++i)
    for (int64_t j = 0; j < nv_; ++j)
      a_.fmla(vq(acc(i, j)).s4(), vq(bv_[size_t(j)]).s4(), vq(av_[size_t(i)]).s(0));
}

// Loads one panel row (nv vectors; the packing zero-pads past nc) at b_ + b_off, in pairs when
// the offset allows, after prefetching the lines the row starts `prefetch` bytes ahead.
void A64GemmEmitter::emit_panel_row(int64_t b_off) {
  if (key_.prefetch > 0) {
    const int64_t pos = b_consumed_ + b_off;  // panels are 64-byte aligned; groups move 64 nv
    for (int64_t line = (pos + 63) / 64 * 64; line < pos + row_bytes_; line += 64)
      prefetch(line - b_consumed_ + key_.prefetch);
  }
  for (int64_t j = 0; j < nv_;) {
    const int64_t off = b_off + j * kVecBytes;
    if (j + 1 < nv_ && off <= 1008) {
      a_.ldp(vq(bv_[size_t(j)]), vq(bv_[size_t(j + 1)]), a64::ptr(b_, static_cast<int32_t>(off)));
      j += 2;
    } else {
      a_.ldr(vq(bv_[size_t(j)]), a64::ptr(b_, static_cast<int32_t>(off)));
      ++j;
    }
  }
}

// Step: epilogue --------------------------------------------------------------------------------

void A64GemmEmitter::emit_activation() {
  if (key_.act == Activation::kNone) return;
  if (key_.act == Activation::kRelu) {
    // fmax propagates a NaN operand (FPCR.DN is 0 on Linux) and orders -0 below +0, so
    // max(x, +0) is the reference's `x > 0 ? x : 0` with NaN kept.
    const uint32_t z = bv_[0];
    a_.movi(vq(z).s4(), 0);
    for (uint32_t r : acc_) a_.fmax(vq(r).s4(), vq(r).s4(), vq(z).s4());
    return;
  }
  emit_sleef_activation();
}

void A64GemmEmitter::emit_scale() {
  if (!key_.scale) return;
  const uint32_t s = av_[0];
  a_.ldr(a64::s(s), a64::ptr(args_, static_cast<int32_t>(SJ_ARG(scale))));
  for (uint32_t r : acc_) a_.fmul(vq(r).s4(), vq(r).s4(), vq(s).s(0));
}

void A64GemmEmitter::emit_store() {
  if (key_.store == GemmStore::kTable) emit_store_table();
  else emit_store_row_major();
  check("store");
}

void A64GemmEmitter::emit_store_row_major() {
  emit_row_pointers(cur_, SJ_ARG(ldc));
  for (int64_t i = 0; i < mr_; ++i)
    for (int64_t j = 0; j < nv_; ++j)
      store_vec(acc(i, j), a64::ptr(rows_[size_t(i)], static_cast<int32_t>(j * kVecBytes)), j);
}

// Y[r, vector j] at c + row_off[r] + col_off[j]: the column part once per panel, the row part
// once per row.
void A64GemmEmitter::emit_store_table() {
  load_arg(ld_, SJ_ARG(c));
  for (int64_t j = 0; j < nv_; ++j) {
    a_.ldr(tcol_[size_t(j)], a64::ptr(cur_, static_cast<int32_t>(j * 8)));
    a_.add(tcol_[size_t(j)], tcol_[size_t(j)], ld_);
  }
  load_arg(ld_, SJ_ARG(row_off));
  for (int64_t i = 0; i < mr_; ++i) {
    a_.ldr(scratch_, a64::ptr(ld_, static_cast<int32_t>(i * 8)));
    for (int64_t j = 0; j < nv_; ++j) a_.str(vq(acc(i, j)), a64::ptr(tcol_[size_t(j)], scratch_));
  }
}

void A64GemmEmitter::emit_next_panel() {
  add_imm(b_, b_, gemm_panel_bytes(key_) - b_consumed_);
  add_imm(cur_, cur_, key_.store == GemmStore::kTable ? nv_ * 8 : int64_t(key_.nc) * 4);
}

// Step: finish ----------------------------------------------------------------------------------

void A64GemmEmitter::emit_finish() {
  if (calls_sleef()) a_.add(a64::sp, a64::sp, Imm(uint64_t(spill_bytes_)));
  emit_epilog();
}

// Step: activation through SLEEF -----------------------------------------------------------------

// The calls clobber v0-v7, v16-v31 (and the upper halves of v8-v15), so the tile goes to the
// stack and each vector is transformed in v0 (SLEEF's argument and result) with v1/v2 as
// temporaries, then the tile is reloaded. Formulas as the x86 emitter's:
//   gelu 0.5 x (1 + erf(x / sqrt 2)), gelu_tanh 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
//   silu x / (1 + exp(-x)).
void A64GemmEmitter::emit_sleef_activation() {
  uint64_t fn = 0;
  switch (key_.act) {
    case Activation::kGelu: fn = SJ_SLEEF(Sleef_erff4_u10advsimd); break;
    case Activation::kGeluTanh: fn = SJ_SLEEF(Sleef_tanhf4_u10advsimd); break;
    case Activation::kSilu: fn = SJ_SLEEF(Sleef_expf4_u10advsimd); break;
    default: throw Error(Status::kInternalError, kernel_name() + ": no SLEEF function for the activation");
  }
  const int64_t count = mr_ * nv_;
  auto slot = [](int64_t v) { return a64::ptr(a64::sp, static_cast<int32_t>(v * kVecBytes)); };
  for (int64_t v = 0; v < count; ++v) a_.str(vq(acc_[size_t(v)]), slot(v));

  const a64::Vec x0 = vq(0).s4(), x1 = vq(1).s4(), t = vq(2).s4();
  for (int64_t v = 0; v < count; ++v) {
    a_.ldr(vq(0), slot(v));
    switch (key_.act) {
      case Activation::kGelu:
        load_constant(2, 0.70710678118654752f);
        a_.fmul(x0, x0, t);
        break;
      case Activation::kGeluTanh:
        a_.fmul(x1, x0, x0);
        a_.fmul(x1, x1, x0);
        load_constant(2, 0.044715f);
        a_.fmul(x1, x1, t);
        a_.fadd(x0, x0, x1);
        load_constant(2, 0.79788456080286536f);
        a_.fmul(x0, x0, t);
        break;
      default:
        a_.fneg(x0, x0);
        break;
    }
    a_.mov(a64::x16, Imm(fn));
    a_.blr(a64::x16);
    load_constant(2, 1.0f);
    a_.fadd(x0, x0, t);
    a_.ldr(vq(1), slot(v));
    if (key_.act == Activation::kSilu) {
      a_.fdiv(x0, x1, x0);
    } else {
      load_constant(2, 0.5f);
      a_.fmul(x1, x1, t);
      a_.fmul(x0, x0, x1);
    }
    a_.str(vq(0), slot(v));
  }
  for (int64_t v = 0; v < count; ++v) a_.ldr(vq(acc_[size_t(v)]), slot(v));
  check("sleef_activation");
}

void emit_gemm_kernel_a64(const GemmKey& key, CodeHolder& code) {
  A64GemmEmitter emitter(key, code);
  emitter.generate();
}

}  // namespace shapejit::jit
