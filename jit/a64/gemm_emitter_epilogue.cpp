// A64GemmEmitter, the epilogue primitives: combine, relu, scale, the activation calls' vector
// operations and call, and the stores.
#include <bit>
#include <cstddef>

#include "jit/a64/gemm_emitter.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

namespace {

constexpr int64_t kLanes = 4, kVecBytes = 16;
constexpr uint32_t kConstTmp = 2;  // the activation recipes' constants go through v2

a64::Vec vq(uint32_t id) { return a64::v(id); }

a64::Mem slot_mem(int64_t slot) { return a64::ptr(a64::sp, static_cast<int32_t>(slot * kVecBytes)); }

}  // namespace

// Combine, relu, scale --------------------------------------------------------------------------

void A64GemmEmitter::add_vec(uint32_t dst, uint32_t a, uint32_t b) { a_.fadd(vq(dst).s4(), vq(a).s4(), vq(b).s4()); }

// fmax propagates a NaN operand (FPCR.DN is 0 on Linux) and orders -0 below +0, so max(x, +0)
// is the reference's `x > 0 ? x : 0` with NaN kept.
void A64GemmEmitter::max_with_zero(uint32_t acc, uint32_t zero) { a_.fmax(vq(acc).s4(), vq(acc).s4(), vq(zero).s4()); }

void A64GemmEmitter::load_scale(uint32_t dst) {
  a_.ldr(a64::s(dst), a64::ptr(args_, static_cast<int32_t>(offsetof(GemmKernelArgs, scale))));
}

void A64GemmEmitter::mul_scale(uint32_t acc, uint32_t scale) { a_.fmul(vq(acc).s4(), vq(acc).s4(), vq(scale).s(0)); }

// Activation calls: SLEEF clobbers v0-v7, v16-v31 and the upper halves of v8-v15 -------------

void A64GemmEmitter::spill_vec(int64_t slot, uint32_t src) { a_.str(vq(src), slot_mem(slot)); }

void A64GemmEmitter::reload_vec(uint32_t dst, int64_t slot) { a_.ldr(vq(dst), slot_mem(slot)); }

void A64GemmEmitter::act_binary(ActOp::Kind kind, uint32_t dst, uint32_t a, uint32_t b) {
  switch (kind) {
    case ActOp::Kind::kMul: a_.fmul(vq(dst).s4(), vq(a).s4(), vq(b).s4()); return;
    case ActOp::Kind::kAdd: a_.fadd(vq(dst).s4(), vq(a).s4(), vq(b).s4()); return;
    case ActOp::Kind::kDiv: a_.fdiv(vq(dst).s4(), vq(a).s4(), vq(b).s4()); return;
    default: throw Error(Status::kInternalError, kernel_name() + ": act_binary takes kMul, kAdd or kDiv");
  }
}

void A64GemmEmitter::act_const(ActOp::Kind kind, uint32_t dst, uint32_t a, float value) {
  load_constant(kConstTmp, value);
  act_binary(kind == ActOp::Kind::kAddConst ? ActOp::Kind::kAdd : ActOp::Kind::kMul, dst, a, kConstTmp);
}

void A64GemmEmitter::act_neg(uint32_t dst, uint32_t a) { a_.fneg(vq(dst).s4(), vq(a).s4()); }

void A64GemmEmitter::call_math(VectorMathFn fn) {
  a_.mov(a64::x16, Imm(vector_math_address(key().isa, fn)));
  a_.blr(a64::x16);
}

// All four lanes of vector `vec_id` = value (scratch_ carries the bits).
void A64GemmEmitter::load_constant(uint32_t vec_id, float value) {
  a_.mov(a64::w(scratch_.id()), Imm(std::bit_cast<uint32_t>(value)));
  a_.dup(vq(vec_id).s4(), a64::w(scratch_.id()));
}

// Stores ----------------------------------------------------------------------------------------

// Vector v of a row to base + offset; the last vector of a partial panel stores exactly its
// tail columns (never past the row's end).
void A64GemmEmitter::store_vec(uint32_t src, const a64::Mem& dst, int64_t v) {
  switch (is_tail(v) ? tail() : kLanes) {
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

void A64GemmEmitter::point_at_output_rows() { point_rows(cur_, offsetof(GemmKernelArgs, ldc)); }

void A64GemmEmitter::store_row_major(uint32_t src, int64_t row, int64_t v) {
  store_vec(src, a64::ptr(rows_[size_t(row)], static_cast<int32_t>(v * kVecBytes)), v);
}

void A64GemmEmitter::load_table_columns() {
  load_arg(ld_, offsetof(GemmKernelArgs, c));
  for (int64_t j = 0; j < nv(); ++j) {
    a_.ldr(tcol_[size_t(j)], a64::ptr(cur_, static_cast<int32_t>(j * 8)));
    a_.add(tcol_[size_t(j)], tcol_[size_t(j)], ld_);
  }
  load_arg(ld_, offsetof(GemmKernelArgs, row_off));
}

void A64GemmEmitter::load_table_row(int64_t row) { a_.ldr(scratch_, a64::ptr(ld_, static_cast<int32_t>(row * 8))); }

void A64GemmEmitter::store_table(uint32_t src, int64_t v) { a_.str(vq(src), a64::ptr(tcol_[size_t(v)], scratch_)); }

void A64GemmEmitter::advance_panel(int64_t b_bytes, int64_t cur_bytes) {
  add_imm(b_, b_, b_bytes);
  add_imm(cur_, cur_, cur_bytes);
}

}  // namespace shapejit::jit
