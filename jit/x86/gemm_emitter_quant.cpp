// X86GemmEmitter, the quantized forms' primitives of the skeleton: the k step, dequantization and
// the bias, through X86GemmQuantOps (jit/x86/gemm_quant_ops.hpp), which gets the emitter's
// registers and X addressing. The weight-only forms convert their codes into the f32 step's
// weight registers and reuse its broadcasts and FMAs.
#include <algorithm>
#include <string>

#include "jit/x86/gemm_emitter.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

using namespace asmjit;

X86QuantBody X86GemmEmitter::quant_body() const {
  X86QuantBody body;
  body.x_row = [this](int64_t row, int32_t disp) { return row_mem(row, disp); };
  body.acc = [this](int64_t set, int64_t row, int64_t v) { return acc(set, row, v); };
  body.weights = bv_;
  body.temps = bc_;
  body.panel = b_;
  body.args = args_;
  return body;
}

// What the skeleton's key check (the contract's rules: the qd8 K limit, where the dot variant
// exists) leaves to the x86 quantized forms: their register budget.
void X86GemmEmitter::check_quant_key() const {
  const int max_mr = gemm_max_mr(key().isa, int(nv()), key().quant, key().dot);
  if (nv() <= 4 && mr() > max_mr)  // more vectors: the skeleton's check names nc
    unsupported("mr " + std::to_string(mr()) + " is outside [1, " + std::to_string(max_mr) + "] for " +
                std::to_string(nv()) + " vectors of this form");
}

void X86GemmEmitter::prepare_quant_panel() { quant_->load_held_constants(); }

int64_t X86GemmEmitter::k_rest_step_width(int64_t left) const {
  const bool groups = gemm_quantized_input(key().quant) || gemm_int4_planes(key());
  return groups ? std::min(left, gemm_k_group(key())) : 1;
}

// One step: qd8 a whole code group (gemm_k_group) at once; weight-only one k (int8), the k of
// an int4 byte row (two, or one at the end of an odd K: the row's low codes), or with int4
// planes the k of one group (8, or those of the last group that K leaves), one load of its codes.
void X86GemmEmitter::quant_k_step(const GemmKStep& s) {
  if (!quant_) throw Error(Status::kInternalError, kernel_name() + ": no quantized primitives for this form");
  const int64_t b_off = weight_bytes(s.k);
  for (int64_t kk = 0; kk < s.width; ++kk) emit_weight_prefetch(weight_bytes(s.k + kk));
  const X86QuantBody body = quant_body();
  if (gemm_quantized_input(key().quant)) {
    quant_->emit_qd8_step(body, s.set, static_cast<int32_t>(s.k * x_bytes_per_k()), static_cast<int32_t>(b_off));
    return;
  }
  if (gemm_int4_planes(key())) {  // weights nv + j hold the group's codes, weights j one plane
    if (s.k % gemm_k_group(key()) != 0) throw Error(Status::kInternalError, kernel_name() + ": a step inside an int4 group");
    for (int64_t j = 0; j < nv(); ++j) quant_->emit_int4_group_load(body, j, static_cast<int32_t>(b_off));
    for (int64_t kk = 0; kk < s.width; ++kk) {
      for (int64_t j = 0; j < nv(); ++j) quant_->emit_int4_plane(body, j, int(kk));
      for (int64_t i = 0; i < mr(); ++i) {
        const GemmXOperand x = broadcast_x(s, i, kk);
        for (int64_t j = 0; j < nv(); ++j) fma(acc(s.set, i, j), j, x);
      }
    }
    return;
  }
  for (int64_t kk = 0; kk < s.width; ++kk) {
    for (int64_t j = 0; j < nv(); ++j) quant_->emit_weight_only_codes(body, j, static_cast<int32_t>(b_off), int(kk));
    for (int64_t i = 0; i < mr(); ++i) {
      const GemmXOperand x = broadcast_x(s, i, kk);
      for (int64_t j = 0; j < nv(); ++j) fma(acc(s.set, i, j), j, x);
    }
  }
}

// p0_ and p3_ (the X rows) are free until the stores point them at Y. The k loop moved the
// panel pointer b_consumed() bytes into the panel.
void X86GemmEmitter::dequantize() {
  quant_->emit_dequantize(quant_body(), static_cast<int32_t>(-b_consumed()), p0_, p3_);
  check("dequantize");
}

// `offset` is from the panel's start (gemm_panel_offsets().bias).
void X86GemmEmitter::add_bias(uint32_t acc, int64_t v, int64_t offset) {
  a_.vaddps(vec(acc), vec(acc), x86::ptr(b_, static_cast<int32_t>(offset - b_consumed() + v * vbytes_)));
}

}  // namespace shapejit::jit
