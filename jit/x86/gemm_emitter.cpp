// X86GemmEmitter: see gemm_emitter.hpp for the shape of the generated code. Every output element
// is one chain of FMAs in ascending k (split over `sets` chains that are added in a fixed order
// when the tile is small), so a result depends only on the key, never on how the runtime
// splits the work between threads.
#include "jit/x86/gemm_emitter.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <string>

#include "shapejit/shapejit.hpp"

// SLEEF's vector functions, called from generated code (only their addresses are taken here:
// sleef.h declares them only in translation units compiled for the matching ISA). Other hosts
// only cross-emit x86 code (jitdump), which never runs: the call target is then 0.
#if defined(SHAPEJIT_HOST_X86)
// The activation step calls SLEEF as the System V AMD64 ABI has it: the vector argument and
// result in zmm0/ymm0, no shadow space (the tile is spilled at [rsp], where a Win64 callee may
// write its 32-byte home area), and every vector and mask register clobbered. Win64 differs in
// all three, so such a build stops here instead of generating kernels that corrupt their tiles.
#if defined(_WIN64) || defined(__CYGWIN__)
#error "jit/x86/gemm_emitter.cpp: generated GEMM kernels call SLEEF with the System V AMD64 ABI; Win64 needs shadow space and its own argument passing"
#endif
static_assert(sizeof(void*) == 8, "the generated x86 kernels are x86-64 code");
extern "C" {
void Sleef_erff16_u10avx512f();
void Sleef_tanhf16_u10avx512f();
void Sleef_expf16_u10avx512f();
void Sleef_erff8_u10avx2();
void Sleef_tanhf8_u10avx2();
void Sleef_expf8_u10avx2();
}
#define SJ_SLEEF(fn) reinterpret_cast<uint64_t>(&fn)
#else
#define SJ_SLEEF(fn) uint64_t(0)
#endif

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kMaxK = int64_t(1) << 22;  // (k + 1) rows of a panel stay addressable by disp32
constexpr int64_t kFullUnrollK = 32;  // K up to this is emitted without a loop
constexpr int64_t kMinChains = 8;     // two FMA pipes x four cycles of latency

// Caller-saved registers first, so kernels without calls need no saves; rsp is never handed out.
const std::vector<uint32_t> kGpOrder = {x86::Gp::kIdDi, x86::Gp::kIdAx, x86::Gp::kIdCx,
                                        x86::Gp::kIdDx, x86::Gp::kIdSi, 8, 9, 10, 11,
                                        x86::Gp::kIdBx, 12, 13, 14, 15, x86::Gp::kIdBp};

std::vector<uint32_t> id_range(uint32_t first, uint32_t end) {
  std::vector<uint32_t> ids;
  for (uint32_t i = first; i < end; ++i) ids.push_back(i);
  return ids;
}

x86::Mem arg(const x86::Gp& args, size_t offset) {
  return x86::qword_ptr(args, static_cast<int32_t>(offset));
}

#define SJ_ARG(field) arg(args_, offsetof(GemmKernelArgs, field))

}  // namespace

X86GemmEmitter::X86GemmEmitter(const GemmKey& key, CodeHolder& code)
    : KernelEmitter(code, key.name()),
      key_(key),
      t_(X86VecTraits::of(key.isa)),
      lanes_(t_.lanes),
      vbytes_(t_.bytes),
      nv_(key.nv()),
      tail_(key.tail()),
      mr_(key.mr),
      a_(&code),
      gp_(RegGroup::kGp, kGpOrder),
      vecs_(RegGroup::kVec, id_range(0, t_.num_regs)),
      kregs_(RegGroup::kX86_K, id_range(1, 8)) {
  attach(a_);
}

void X86GemmEmitter::generate() {
  plan();
  plan_registers();
  emit_prolog(args_, {&gp_, &vecs_, &kregs_}, FrameOptions{true, t_.avx512});
  emit_load_args();
  emit_panel_loop();
  emit_finish();
  emit_constants();
}

bool X86GemmEmitter::calls_sleef() const {
  return key_.act != Activation::kNone && key_.act != Activation::kRelu;
}

// Planning --------------------------------------------------------------------------------------

void X86GemmEmitter::plan() {
  if (isa_traits(key_.isa).family != IsaFamily::kX86) unsupported("not an x86 ISA");
  if (code().arch() != Arch::kX64) unsupported("the CodeHolder is not initialised for x86-64");
  if (key_.k < 1 || key_.k > kMaxK)
    unsupported("k " + std::to_string(key_.k) + " is outside [1, " + std::to_string(kMaxK) + "]");
  if (key_.nc < 1 || nv_ > 4) unsupported("nc " + std::to_string(key_.nc) + " needs 1..4 vectors");
  if (mr_ < 1 || mr_ > gemm_max_mr(key_.isa, int(nv_)))
    unsupported("mr " + std::to_string(mr_) + " is outside [1, " +
                std::to_string(gemm_max_mr(key_.isa, int(nv_))) + "] for " + std::to_string(nv_) + " vectors");
  if (key_.store == GemmStore::kTable && tail_ != 0)
    unsupported("table stores need whole vectors (nc a multiple of " + std::to_string(lanes_) + ")");
  if (key_.prefetch < 0 || key_.prefetch > (1 << 20)) unsupported("prefetch distance outside [0, 2^20]");

  // A small tile alone has too few independent chains to keep both FMA pipes busy: give each
  // output several partial sums (k steps rotate over them) while the register budget lasts.
  const int64_t chains = mr_ * nv_;
  const int64_t budget = gemm_accumulator_budget(key_.isa, int(nv_));
  sets_ = 1;
  if (chains < kMinChains) sets_ = std::min({(kMinChains + chains - 1) / chains, budget / chains, key_.k});
  sets_ = std::max<int64_t>(sets_, 1);
  unroll_ = sets_ * ((4 + sets_ - 1) / sets_);
  iterations_ = key_.k <= kFullUnrollK ? 0 : key_.k / unroll_;
  row_bytes_ = nv_ * vbytes_;
  spill_bytes_ = calls_sleef() ? (mr_ * nv_ * vbytes_ + 63) / 64 * 64 : 0;
}

void X86GemmEmitter::plan_registers() {
  auto gpq = [&] { return x86::gpq(gp_.take()); };
  if (calls_sleef()) {
    // What lives across the calls sits in callee-saved registers.
    args_ = x86::gpq(gp_.take(x86::Gp::kIdBx));
    b_ = x86::gpq(gp_.take(12));
    panels_ = x86::gpq(gp_.take(13));
    cur_ = x86::gpq(gp_.take(14));
    sp_save_ = x86::gpq(gp_.take(15));
  } else {
    args_ = x86::gpq(gp_.take(x86::Gp::kIdDi));
    b_ = gpq(), panels_ = gpq(), cur_ = gpq();
  }
  p0_ = gpq(), p3_ = gpq(), ld_ = gpq(), ld3_ = gpq(), kcnt_ = gpq();
  if (key_.store == GemmStore::kTable)
    for (int64_t j = 0; j < nv_; ++j) tcol_.push_back(gpq());

  for (int64_t j = 0; j < nv_; ++j) bv_.push_back(vecs_.take());
  for (int64_t i = 0; i < sets_ * mr_ * nv_; ++i) acc_.push_back(vecs_.take());
  const uint32_t temps = std::min<uint32_t>(4, vecs_.available());
  for (uint32_t i = 0; i < temps; ++i) bc_.push_back(vecs_.take());
  if (bc_.size() < 2) throw Error(Status::kInternalError, kernel_name() + ": vector register plan is wrong");
  if (t_.avx512 && tail_ != 0) k_tail_ = x86::k(kregs_.take());
}

// Helpers ---------------------------------------------------------------------------------------

x86::Vec X86GemmEmitter::vec(uint32_t id) const {
  return t_.avx512 ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
}

uint32_t X86GemmEmitter::acc(int64_t set, int64_t row, int64_t v) const {
  return acc_[size_t((set * mr_ + row) * nv_ + v)];
}

// Rows 0..7 from two bases and two strides: 0 1 2 4 from p0, 3 5 6 7 from p3 = p0 + 3 ld.
x86::Mem X86GemmEmitter::row_mem(int64_t row, int32_t disp) const {
  switch (row) {
    case 0: return x86::ptr(p0_, disp);
    case 1: return x86::ptr(p0_, ld_, 0, disp);
    case 2: return x86::ptr(p0_, ld_, 1, disp);
    case 3: return x86::ptr(p3_, disp);
    case 4: return x86::ptr(p0_, ld_, 2, disp);
    case 5: return x86::ptr(p3_, ld_, 1, disp);
    case 6: return x86::ptr(p3_, ld3_, 0, disp);
    case 7: return x86::ptr(p3_, ld_, 2, disp);
  }
  throw Error(Status::kInternalError, kernel_name() + ": row " + std::to_string(row) + " has no address");
}

void X86GemmEmitter::zero(uint32_t id) {
  if (t_.avx512) a_.vpxord(x86::zmm(id), x86::zmm(id), x86::zmm(id));
  else a_.vxorps(x86::ymm(id), x86::ymm(id), x86::ymm(id));
}

void X86GemmEmitter::store_vec(const x86::Mem& dst, int64_t v, uint32_t src) {
  if (v != nv_ - 1 || tail_ == 0) {
    a_.vmovups(dst, vec(src));
  } else if (t_.avx512) {
    a_.k(k_tail_).vmovups(dst, vec(src));
  } else {
    a_.vmaskmovps(dst, vec(bc_[0]), vec(src));  // bc_[0] holds the tail mask during stores
  }
}

x86::Mem X86GemmEmitter::constant(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  auto it = std::find(pool_bits_.begin(), pool_bits_.end(), bits);
  const size_t index = size_t(it - pool_bits_.begin());
  if (it == pool_bits_.end()) pool_bits_.push_back(bits);
  if (!pool_.isValid()) pool_ = a_.newLabel();
  return x86::dword_ptr(pool_, static_cast<int32_t>(index * 4));
}

// dst = src <op> broadcast(value); AVX2 has no embedded broadcast and goes through tmp.
void X86GemmEmitter::op_const(uint32_t inst_id, uint32_t dst, uint32_t src, float value, uint32_t tmp) {
  const x86::Mem c = constant(value);
  if (t_.avx512) {
    a_.emit(inst_id, vec(dst), vec(src), c._1to16());
  } else {
    a_.vbroadcastss(vec(tmp), c);
    a_.emit(inst_id, vec(dst), vec(src), vec(tmp));
  }
}

// Step: load args -----------------------------------------------------------------------------

void X86GemmEmitter::emit_load_args() {
  a_.mov(b_, SJ_ARG(b));
  a_.mov(panels_, SJ_ARG(panels));
  if (key_.store == GemmStore::kTable) a_.mov(cur_, SJ_ARG(col_off));
  else a_.mov(cur_, SJ_ARG(c));
  if (calls_sleef()) {
    // A 64-byte aligned spill area; rsp stays 16-byte aligned at every call.
    a_.mov(sp_save_, x86::rsp);
    a_.and_(x86::rsp, -64);
    a_.sub(x86::rsp, static_cast<int32_t>(spill_bytes_));
  }
  check("load_args");
}

// Step: panel loop ------------------------------------------------------------------------------

void X86GemmEmitter::emit_panel_loop() {
  Label top = a_.newLabel();
  a_.align(AlignMode::kCode, 64);
  a_.bind(top);
  a_.mov(p0_, SJ_ARG(a));
  emit_row_pointers(SJ_ARG(lda));
  emit_zero();
  emit_k_loop();
  emit_combine_sets();
  emit_activation();
  emit_scale();
  emit_store();
  emit_next_panel();
  a_.dec(panels_);
  a_.jnz(top);
  check("panel_loop");
}

// With p0_ set: ld_ = stride, and for rows past 2 the second base p3_ = p0_ + 3 * stride.
void X86GemmEmitter::emit_row_pointers(const x86::Mem& stride) {
  a_.mov(ld_, stride);
  if (mr_ <= 3) return;
  a_.lea(ld3_, x86::ptr(ld_, ld_, 1));
  a_.lea(p3_, x86::ptr(p0_, ld3_));
}

// The first set starts from the bias (the panel's row after its k rows), the others from zero:
// one rounding fewer per element than adding the bias at the end, and no add in the epilogue.
void X86GemmEmitter::emit_zero() {
  for (int64_t s = 0; s < sets_; ++s)
    for (int64_t i = 0; i < mr_; ++i)
      for (int64_t j = 0; j < nv_; ++j) {
        if (s == 0 && key_.bias)
          a_.vmovups(vec(acc(0, i, j)), x86::ptr(b_, static_cast<int32_t>(key_.k * row_bytes_ + j * vbytes_)));
        else
          zero(acc(s, i, j));
      }
}

// Step: k loop ----------------------------------------------------------------------------------

void X86GemmEmitter::emit_k_loop() {
  b_consumed_ = 0;
  if (iterations_ > 0) {
    Label loop = a_.newLabel();
    a_.mov(kcnt_, iterations_);
    a_.align(AlignMode::kCode, 16);
    a_.bind(loop);
    for (int64_t s = 0; s < unroll_; ++s)
      emit_k_step(s, s % sets_, static_cast<int32_t>(s * 4), static_cast<int32_t>(s * row_bytes_));
    a_.add(p0_, static_cast<int32_t>(unroll_ * 4));
    if (mr_ > 3) a_.add(p3_, static_cast<int32_t>(unroll_ * 4));
    a_.add(b_, static_cast<int32_t>(unroll_ * row_bytes_));
    a_.dec(kcnt_);
    a_.jnz(loop);
    b_consumed_ = iterations_ * unroll_ * row_bytes_;
  }
  // The rest (or all of a small K), unrolled; unroll_ is a multiple of sets_, so step r of the
  // rest continues the rotation at set r % sets_.
  const int64_t rest = key_.k - iterations_ * unroll_;
  for (int64_t r = 0; r < rest; ++r)
    emit_k_step(r, r % sets_, static_cast<int32_t>(r * 4), static_cast<int32_t>(r * row_bytes_));
  check("k_loop");
}

// One k: load the panel row, then per X row broadcast one float and FMA it into nv vectors.
void X86GemmEmitter::emit_k_step(int64_t step, int64_t set, int32_t a_disp, int32_t b_disp) {
  for (int64_t j = 0; j < nv_; ++j) a_.vmovups(vec(bv_[size_t(j)]), x86::ptr(b_, b_disp + int32_t(j * vbytes_)));
  if (key_.prefetch > 0) {
    // One prefetch per cache line the row starts (panels are 64-byte aligned).
    const int64_t pos = b_consumed_ + b_disp;
    for (int64_t line = (pos + 63) / 64 * 64; line < pos + row_bytes_; line += 64)
      a_.prefetcht0(x86::ptr(b_, static_cast<int32_t>(line - b_consumed_ + key_.prefetch)));
  }
  for (int64_t i = 0; i < mr_; ++i) {
    if (t_.avx512 && nv_ == 1) {  // one FMA per broadcast: fold the broadcast into its operand
      a_.vfmadd231ps(vec(acc(set, i, 0)), vec(bv_[0]), row_mem(i, a_disp)._1to16());
      continue;
    }
    const uint32_t bc = bc_[size_t((step * mr_ + i) % int64_t(bc_.size()))];
    a_.vbroadcastss(vec(bc), row_mem(i, a_disp));
    for (int64_t j = 0; j < nv_; ++j) a_.vfmadd231ps(vec(acc(set, i, j)), vec(bv_[size_t(j)]), vec(bc));
  }
}

// Step: epilogue --------------------------------------------------------------------------------

void X86GemmEmitter::emit_combine_sets() {
  for (int64_t s = 1; s < sets_; ++s)
    for (int64_t i = 0; i < mr_; ++i)
      for (int64_t j = 0; j < nv_; ++j)
        a_.vaddps(vec(acc(0, i, j)), vec(acc(0, i, j)), vec(acc(s, i, j)));
}

void X86GemmEmitter::emit_activation() {
  if (key_.act == Activation::kNone) return;
  if (key_.act == Activation::kRelu) {
    // max(0, x) with x second: maxps returns the second operand when either is NaN, so NaN
    // propagates as the reference requires.
    const uint32_t z = bv_[0];
    zero(z);
    for (int64_t i = 0; i < mr_; ++i)
      for (int64_t j = 0; j < nv_; ++j) a_.vmaxps(vec(acc(0, i, j)), vec(z), vec(acc(0, i, j)));
    return;
  }
  emit_sleef_activation();
}

void X86GemmEmitter::emit_scale() {
  if (!key_.scale) return;
  const uint32_t s = bc_[1];
  a_.vbroadcastss(vec(s), x86::dword_ptr(args_, static_cast<int32_t>(offsetof(GemmKernelArgs, scale))));
  for (int64_t i = 0; i < mr_; ++i)
    for (int64_t j = 0; j < nv_; ++j) a_.vmulps(vec(acc(0, i, j)), vec(acc(0, i, j)), vec(s));
}

void X86GemmEmitter::emit_store() {
  if (tail_ != 0) {
    if (t_.avx512) {
      a_.mov(kcnt_.r32(), (1u << tail_) - 1);
      a_.kmovw(k_tail_, kcnt_.r32());
    } else {
      if (!mask_table_.isValid()) mask_table_ = a_.newLabel();  // 8 x -1 then 8 x 0
      a_.vmovdqu(vec(bc_[0]), x86::ptr(mask_table_, static_cast<int32_t>((8 - tail_) * 4)));
    }
  }
  if (key_.store == GemmStore::kTable) emit_store_table();
  else emit_store_row_major();
  check("store");
}

void X86GemmEmitter::emit_store_row_major() {
  a_.mov(p0_, cur_);
  emit_row_pointers(SJ_ARG(ldc));
  for (int64_t i = 0; i < mr_; ++i)
    for (int64_t j = 0; j < nv_; ++j) store_vec(row_mem(i, static_cast<int32_t>(j * vbytes_)), j, acc(0, i, j));
}

// Y[r, vector j] at c + row_off[r] + col_off[j]: the column part once per panel, the row part
// once per row.
void X86GemmEmitter::emit_store_table() {
  a_.mov(ld_, SJ_ARG(c));
  a_.mov(p0_, SJ_ARG(row_off));
  for (int64_t j = 0; j < nv_; ++j) {
    a_.mov(tcol_[size_t(j)], x86::qword_ptr(cur_, static_cast<int32_t>(j * 8)));
    a_.add(tcol_[size_t(j)], ld_);
  }
  for (int64_t i = 0; i < mr_; ++i) {
    a_.mov(p3_, x86::qword_ptr(p0_, static_cast<int32_t>(i * 8)));
    for (int64_t j = 0; j < nv_; ++j) store_vec(x86::ptr(tcol_[size_t(j)], p3_), j, acc(0, i, j));
  }
}

void X86GemmEmitter::emit_next_panel() {
  a_.add(b_, static_cast<int32_t>(gemm_panel_bytes(key_) - b_consumed_));
  if (key_.store == GemmStore::kTable) a_.add(cur_, static_cast<int32_t>(nv_ * 8));
  else a_.add(cur_, static_cast<int32_t>(key_.nc * 4));
}

// Step: finish ----------------------------------------------------------------------------------

void X86GemmEmitter::emit_finish() {
  if (calls_sleef()) a_.mov(x86::rsp, sp_save_);
  emit_epilog();
}

void X86GemmEmitter::emit_constants() {
  if (pool_.isValid()) {
    a_.align(AlignMode::kData, 64);
    a_.bind(pool_);
    a_.embed(pool_bits_.data(), pool_bits_.size() * sizeof(uint32_t));
  }
  if (mask_table_.isValid()) {
    static constexpr int32_t kTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    a_.align(AlignMode::kData, 32);
    a_.bind(mask_table_);
    a_.embed(kTable, sizeof(kTable));
  }
  check("constants");
}

// Step: activation through SLEEF -----------------------------------------------------------------

// The calls clobber every vector and mask register, so the tile goes to the stack and each
// vector is transformed in zmm0/ymm0 (SLEEF's argument and result) with zmm1/zmm2 as
// temporaries, then the tile is reloaded.
void X86GemmEmitter::emit_sleef_activation() {
  uint64_t fn = 0;
  switch (key_.act) {
    case Activation::kGelu: fn = t_.avx512 ? SJ_SLEEF(Sleef_erff16_u10avx512f) : SJ_SLEEF(Sleef_erff8_u10avx2); break;
    case Activation::kGeluTanh:
      fn = t_.avx512 ? SJ_SLEEF(Sleef_tanhf16_u10avx512f) : SJ_SLEEF(Sleef_tanhf8_u10avx2);
      break;
    case Activation::kSilu: fn = t_.avx512 ? SJ_SLEEF(Sleef_expf16_u10avx512f) : SJ_SLEEF(Sleef_expf8_u10avx2); break;
    default: throw Error(Status::kInternalError, kernel_name() + ": no SLEEF function for the activation");
  }
  const int64_t count = mr_ * nv_;
  for (int64_t v = 0; v < count; ++v)
    a_.vmovaps(x86::ptr(x86::rsp, static_cast<int32_t>(v * vbytes_)), vec(acc(0, v / nv_, v % nv_)));

  namespace I = x86;
  const uint32_t x0 = 0, x1 = 1, t = 2;
  for (int64_t v = 0; v < count; ++v) {
    const x86::Mem slot = x86::ptr(x86::rsp, static_cast<int32_t>(v * vbytes_));
    a_.vmovaps(vec(x0), slot);
    switch (key_.act) {
      case Activation::kGelu:  // 0.5 x (1 + erf(x / sqrt 2))
        op_const(I::Inst::kIdVmulps, x0, x0, 0.70710678118654752f, t);
        break;
      case Activation::kGeluTanh:  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        a_.vmulps(vec(x1), vec(x0), vec(x0));
        a_.vmulps(vec(x1), vec(x1), vec(x0));
        op_const(I::Inst::kIdVmulps, x1, x1, 0.044715f, t);
        a_.vaddps(vec(x0), vec(x0), vec(x1));
        op_const(I::Inst::kIdVmulps, x0, x0, 0.79788456080286536f, t);
        break;
      default:  // silu: x / (1 + exp(-x))
        op_const(t_.avx512 ? I::Inst::kIdVpxord : I::Inst::kIdVxorps, x0, x0, -0.0f, t);
        break;
    }
    a_.mov(kcnt_, imm(fn));
    a_.call(kcnt_);
    op_const(I::Inst::kIdVaddps, x0, x0, 1.0f, t);
    if (key_.act == Activation::kSilu) {
      a_.vmovaps(vec(x1), slot);
      a_.vdivps(vec(x0), vec(x1), vec(x0));
    } else {
      a_.vmovaps(vec(x1), slot);
      op_const(I::Inst::kIdVmulps, x1, x1, 0.5f, t);
      a_.vmulps(vec(x0), vec(x0), vec(x1));
    }
    a_.vmovaps(slot, vec(x0));
  }
  for (int64_t v = 0; v < count; ++v)
    a_.vmovaps(vec(acc(0, v / nv_, v % nv_)), x86::ptr(x86::rsp, static_cast<int32_t>(v * vbytes_)));
  check("sleef_activation");
}

void emit_gemm_kernel_x86(const GemmKey& key, CodeHolder& code) {
  X86GemmEmitter emitter(key, code);
  emitter.generate();
}

}  // namespace shapejit::jit
