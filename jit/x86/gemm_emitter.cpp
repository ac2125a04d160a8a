// X86GemmEmitter, planning, frame, loops and the k step: see gemm_emitter.hpp. The order of the
// arithmetic is the skeleton's (jit/gemm_skeleton.hpp).
#include "jit/x86/gemm_emitter.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kMinChains = 8;  // two FMA pipes x four cycles of latency

// Caller-saved registers first, so kernels without calls need no saves; rsp is never handed out.
const std::vector<uint32_t> kGpOrder = {x86::Gp::kIdDi, x86::Gp::kIdAx, x86::Gp::kIdCx,
                                        x86::Gp::kIdDx, x86::Gp::kIdSi, 8, 9, 10, 11,
                                        x86::Gp::kIdBx, 12, 13, 14, 15, x86::Gp::kIdBp};

std::vector<uint32_t> id_range(uint32_t first, uint32_t end) {
  std::vector<uint32_t> ids;
  for (uint32_t i = first; i < end; ++i) ids.push_back(i);
  return ids;
}

}  // namespace

X86GemmEmitter::X86GemmEmitter(const GemmKey& key, CodeHolder& code)
    : GemmSkeleton(key, code),
      t_(X86VecTraits::of(key.isa)),
      vbytes_(t_.bytes),
      a_(&code),
      gp_(RegGroup::kGp, kGpOrder),
      vecs_(RegGroup::kVec, id_range(0, t_.num_regs)),
      kregs_(RegGroup::kX86_K, id_range(1, 8)) {}

// Planning --------------------------------------------------------------------------------------

void X86GemmEmitter::check_isa() const {
  if (isa_traits(key().isa).family != IsaFamily::kX86) unsupported("not an x86 ISA");
  if (code().arch() != Arch::kX64) unsupported("the CodeHolder is not initialised for x86-64");
  if (key().quant != GemmQuant::kF32 || key().dot) check_quant_key();
}

// A small tile alone has too few independent chains to keep both FMA pipes busy: give each
// output several partial sums (k steps rotate over them) while the register budget lasts.
int64_t X86GemmEmitter::plan_sets() const {
  const int64_t chains = mr() * nv();
  const int64_t budget = gemm_accumulator_budget(key().isa, int(nv()), key().quant, key().dot);
  const int64_t steps = std::max<int64_t>(1, gemm_padded_k(key()) / k_step_width());
  int64_t sets = 1;
  if (chains < kMinChains) sets = std::min({(kMinChains + chains - 1) / chains, budget / chains, steps});
  return std::max<int64_t>(sets, 1);
}

void X86GemmEmitter::plan_registers() {
  auto gpq = [&] { return x86::gpq(gp_.take()); };
  if (calls_out()) {
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
  if (key().store == GemmStore::kTable)
    for (int64_t j = 0; j < nv(); ++j) tcol_.push_back(gpq());

  // The panel row's registers, the accumulators, then the temporaries (gemm_x86_step_registers:
  // the one rule, also gemm_max_mr's). The quantized steps rotate theirs in threes or fours.
  const GemmStepRegisters step = gemm_x86_step_registers(key().isa, int(nv()), key().quant, key().dot);
  for (int64_t j = 0; j < step.weights; ++j) bv_.push_back(vecs_.take());
  std::vector<uint32_t> acc;
  for (int64_t i = 0; i < sets() * tile_vectors(); ++i) acc.push_back(vecs_.take());
  set_accumulators(std::move(acc));
  const uint32_t temps = std::min<uint32_t>(uint32_t(step.temps == 3 ? 6 : std::max(4, step.temps)), vecs_.available());
  for (uint32_t i = 0; i < temps; ++i) bc_.push_back(vecs_.take());
  if (bc_.size() < size_t(std::max(2, step.temps)))
    throw Error(Status::kInternalError, kernel_name() + ": vector register plan is wrong");
  if (key().quant != GemmQuant::kF32) quant_ = std::make_unique<X86GemmQuantOps>(key(), a_);
  // A register left over (small tiles: decode) holds the int4 table.
  if (gemm_int4_planes(key()) && vecs_.available() > 0) quant_->hold_int4_table(vecs_.take());
  if (t_.avx512 && tail() != 0) k_tail_ = x86::k(kregs_.take());
  spill_bytes_ = calls_out() ? (tile_vectors() * vbytes_ + 63) / 64 * 64 : 0;
}

void X86GemmEmitter::emit_prolog_frame() { emit_prolog(args_, {&gp_, &vecs_, &kregs_}, FrameOptions{true, t_.avx512}); }

void X86GemmEmitter::load_args() {
  a_.mov(b_, arg(offsetof(GemmKernelArgs, b)));
  a_.mov(panels_, arg(offsetof(GemmKernelArgs, panels)));
  if (key().store == GemmStore::kTable) a_.mov(cur_, arg(offsetof(GemmKernelArgs, col_off)));
  else a_.mov(cur_, arg(offsetof(GemmKernelArgs, c)));
  if (calls_out()) {
    // A 64-byte aligned spill area; rsp stays 16-byte aligned at every call.
    a_.mov(sp_save_, x86::rsp);
    a_.and_(x86::rsp, -64);
    a_.sub(x86::rsp, static_cast<int32_t>(spill_bytes_));
  }
}

void X86GemmEmitter::finish() {
  if (calls_out()) a_.mov(x86::rsp, sp_save_);
}

// Helpers ---------------------------------------------------------------------------------------

x86::Vec X86GemmEmitter::vec(uint32_t id) const {
  return t_.avx512 ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
}

x86::Mem X86GemmEmitter::arg(size_t offset) const { return x86::qword_ptr(args_, static_cast<int32_t>(offset)); }

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

// With p0_ set: ld_ = stride, and for rows past 2 the second base p3_ = p0_ + 3 * stride.
void X86GemmEmitter::point_rows(const x86::Mem& stride) {
  a_.mov(ld_, stride);
  if (mr() <= 3) return;
  a_.lea(ld3_, x86::ptr(ld_, ld_, 1));
  a_.lea(p3_, x86::ptr(p0_, ld3_));
}

// Loops -----------------------------------------------------------------------------------------

void X86GemmEmitter::point_at_x_rows() {
  a_.mov(p0_, arg(offsetof(GemmKernelArgs, a)));
  point_rows(arg(offsetof(GemmKernelArgs, lda)));
}

void X86GemmEmitter::panel_loop_end(const Label& top) {
  a_.dec(panels_);
  a_.jnz(top);
}

void X86GemmEmitter::k_loop_begin(int64_t iterations) { a_.mov(kcnt_, iterations); }

void X86GemmEmitter::k_loop_end(int64_t k, const Label& top) {
  a_.add(p0_, static_cast<int32_t>(k * x_bytes_per_k()));
  if (mr() > 3) a_.add(p3_, static_cast<int32_t>(k * x_bytes_per_k()));
  a_.add(b_, static_cast<int32_t>(weight_bytes(k)));
  a_.dec(kcnt_);
  a_.jnz(top);
}

// The k step ------------------------------------------------------------------------------------

void X86GemmEmitter::zero_vec(uint32_t id) {
  if (t_.avx512) a_.vpxord(x86::zmm(id), x86::zmm(id), x86::zmm(id));
  else a_.vxorps(x86::ymm(id), x86::ymm(id), x86::ymm(id));
}

void X86GemmEmitter::load_bias(uint32_t dst, int64_t, int64_t v, int64_t offset) {
  a_.vmovups(vec(dst), x86::ptr(b_, static_cast<int32_t>(offset + v * vbytes_)));
}

// The row's vectors, then one prefetch per cache line the row starts.
void X86GemmEmitter::load_weight_row(int64_t b_off) {
  for (int64_t j = 0; j < nv(); ++j)
    a_.vmovups(vec(bv_[size_t(j)]), x86::ptr(b_, static_cast<int32_t>(b_off + j * vbytes_)));
  emit_weight_prefetch(b_off);
}

void X86GemmEmitter::prefetch_weights(int64_t offset) { a_.prefetcht0(x86::ptr(b_, static_cast<int32_t>(offset))); }

// AVX-512 with one vector: one FMA per broadcast, so the broadcast folds into its operand.
GemmXOperand X86GemmEmitter::broadcast_x(const GemmKStep& s, int64_t row, int64_t kk) {
  const int64_t k = s.k + kk;
  if (t_.avx512 && nv() == 1) return GemmXOperand{0, -1, true, row, k};
  const uint32_t bc = bc_[size_t((s.index * mr() + row) % int64_t(bc_.size()))];
  a_.vbroadcastss(vec(bc), row_mem(row, static_cast<int32_t>(k * 4)));
  return GemmXOperand{bc, -1, false, row, k};
}

void X86GemmEmitter::fma(uint32_t acc, int64_t v, const GemmXOperand& x) {
  if (x.memory) a_.vfmadd231ps(vec(acc), vec(bv_[size_t(v)]), row_mem(x.row, static_cast<int32_t>(x.k * 4))._1to16());
  else a_.vfmadd231ps(vec(acc), vec(bv_[size_t(v)]), vec(x.vec));
}

void emit_gemm_kernel_x86(const GemmKey& key, CodeHolder& code) {
  X86GemmEmitter emitter(key, code);
  emitter.generate();
}

}  // namespace shapejit::jit
