// X86GemmEmitter, the epilogue primitives: combine, relu, scale, the activation calls' vector
// operations and call, the stores and the constant data.
#include <algorithm>
#include <bit>
#include <cstddef>

#include "jit/x86/gemm_emitter.hpp"
#include "shapejit/shapejit.hpp"

// The activation calls follow the System V AMD64 ABI: the vector argument and result in
// zmm0/ymm0, no shadow space (the tile is spilled at [rsp], where a Win64 callee may write its
// 32-byte home area), and every vector and mask register clobbered. Win64 differs in all three,
// so such a build stops here instead of generating kernels that corrupt their tiles.
#if defined(SHAPEJIT_HOST_X86)
#if defined(_WIN64) || defined(__CYGWIN__)
#error "jit/x86/gemm_emitter_epilogue.cpp: generated GEMM kernels call SLEEF with the System V AMD64 ABI; Win64 needs shadow space and its own argument passing"
#endif
static_assert(sizeof(void*) == 8, "the generated x86 kernels are x86-64 code");
#endif

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr uint32_t kConstTmp = 2;  // the activation recipes' constants go through zmm2/ymm2 (AVX2)

}  // namespace

// Combine, relu, scale --------------------------------------------------------------------------

// The qd8 forms' accumulators are int32 until dequantize().
void X86GemmEmitter::add_vec(uint32_t dst, uint32_t a, uint32_t b) {
  if (quant_) quant_->emit_add_accumulators(dst, a, b);
  else a_.vaddps(vec(dst), vec(a), vec(b));
}

// max(0, x) with x second: maxps returns the second operand when either is NaN, so NaN
// propagates as the reference requires.
void X86GemmEmitter::max_with_zero(uint32_t acc, uint32_t zero) { a_.vmaxps(vec(acc), vec(zero), vec(acc)); }

void X86GemmEmitter::load_scale(uint32_t dst) {
  a_.vbroadcastss(vec(dst), x86::dword_ptr(args_, static_cast<int32_t>(offsetof(GemmKernelArgs, scale))));
}

void X86GemmEmitter::mul_scale(uint32_t acc, uint32_t scale) { a_.vmulps(vec(acc), vec(acc), vec(scale)); }

// Activation calls ------------------------------------------------------------------------------

x86::Mem X86GemmEmitter::slot_mem(int64_t slot) const { return x86::ptr(x86::rsp, static_cast<int32_t>(slot * vbytes_)); }

void X86GemmEmitter::spill_vec(int64_t slot, uint32_t src) { a_.vmovaps(slot_mem(slot), vec(src)); }

void X86GemmEmitter::reload_vec(uint32_t dst, int64_t slot) { a_.vmovaps(vec(dst), slot_mem(slot)); }

void X86GemmEmitter::act_binary(ActOp::Kind kind, uint32_t dst, uint32_t a, uint32_t b) {
  switch (kind) {
    case ActOp::Kind::kMul: a_.vmulps(vec(dst), vec(a), vec(b)); return;
    case ActOp::Kind::kAdd: a_.vaddps(vec(dst), vec(a), vec(b)); return;
    case ActOp::Kind::kDiv: a_.vdivps(vec(dst), vec(a), vec(b)); return;
    default: throw Error(Status::kInternalError, kernel_name() + ": act_binary takes kMul, kAdd or kDiv");
  }
}

void X86GemmEmitter::act_const(ActOp::Kind kind, uint32_t dst, uint32_t a, float value) {
  op_const(kind == ActOp::Kind::kAddConst ? x86::Inst::kIdVaddps : x86::Inst::kIdVmulps, dst, a, value);
}

// x ^ -0.0: the sign flip, exact.
void X86GemmEmitter::act_neg(uint32_t dst, uint32_t a) {
  op_const(t_.avx512 ? x86::Inst::kIdVpxord : x86::Inst::kIdVxorps, dst, a, -0.0f);
}

void X86GemmEmitter::call_math(VectorMathFn fn) {
  a_.mov(kcnt_, imm(vector_math_address(key().isa, fn)));
  a_.call(kcnt_);
}

x86::Mem X86GemmEmitter::constant(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  auto it = std::find(pool_bits_.begin(), pool_bits_.end(), bits);
  const size_t index = size_t(it - pool_bits_.begin());
  if (it == pool_bits_.end()) pool_bits_.push_back(bits);
  if (!pool_.isValid()) pool_ = a_.newLabel();
  return x86::dword_ptr(pool_, static_cast<int32_t>(index * 4));
}

// dst = src <op> broadcast(value); AVX2 has no embedded broadcast and goes through kConstTmp.
void X86GemmEmitter::op_const(uint32_t inst_id, uint32_t dst, uint32_t src, float value) {
  const x86::Mem c = constant(value);
  if (t_.avx512) {
    a_.emit(inst_id, vec(dst), vec(src), c._1to16());
  } else {
    a_.vbroadcastss(vec(kConstTmp), c);
    a_.emit(inst_id, vec(dst), vec(src), vec(kConstTmp));
  }
}

// Stores ----------------------------------------------------------------------------------------

void X86GemmEmitter::prepare_tail_store() {
  if (t_.avx512) {
    a_.mov(kcnt_.r32(), (1u << tail()) - 1);
    a_.kmovw(k_tail_, kcnt_.r32());
  } else {
    if (!mask_table_.isValid()) mask_table_ = a_.newLabel();  // 8 x -1 then 8 x 0
    a_.vmovdqu(vec(bc_[0]), x86::ptr(mask_table_, static_cast<int32_t>((8 - tail()) * 4)));
  }
}

void X86GemmEmitter::store_vec(const x86::Mem& dst, int64_t v, uint32_t src) {
  if (!is_tail(v)) a_.vmovups(dst, vec(src));
  else if (t_.avx512) a_.k(k_tail_).vmovups(dst, vec(src));
  else a_.vmaskmovps(dst, vec(bc_[0]), vec(src));  // bc_[0] holds the tail mask during stores
}

void X86GemmEmitter::point_at_output_rows() {
  a_.mov(p0_, cur_);
  point_rows(arg(offsetof(GemmKernelArgs, ldc)));
}

void X86GemmEmitter::store_row_major(uint32_t src, int64_t row, int64_t v) {
  store_vec(row_mem(row, static_cast<int32_t>(v * vbytes_)), v, src);
}

void X86GemmEmitter::load_table_columns() {
  a_.mov(ld_, arg(offsetof(GemmKernelArgs, c)));
  a_.mov(p0_, arg(offsetof(GemmKernelArgs, row_off)));
  for (int64_t j = 0; j < nv(); ++j) {
    a_.mov(tcol_[size_t(j)], x86::qword_ptr(cur_, static_cast<int32_t>(j * 8)));
    a_.add(tcol_[size_t(j)], ld_);
  }
}

void X86GemmEmitter::load_table_row(int64_t row) { a_.mov(p3_, x86::qword_ptr(p0_, static_cast<int32_t>(row * 8))); }

void X86GemmEmitter::store_table(uint32_t src, int64_t v) { store_vec(x86::ptr(tcol_[size_t(v)], p3_), v, src); }

void X86GemmEmitter::advance_panel(int64_t b_bytes, int64_t cur_bytes) {
  a_.add(b_, static_cast<int32_t>(b_bytes));
  a_.add(cur_, static_cast<int32_t>(cur_bytes));
}

// Data ------------------------------------------------------------------------------------------

void X86GemmEmitter::emit_data() {
  if (quant_) quant_->emit_constants();
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
}

}  // namespace shapejit::jit
