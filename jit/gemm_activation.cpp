// The activation recipes: see gemm_activation.hpp. The formulas (docs/split-gemm-semantics.md):
//   gelu       0.5 x (1 + erf(x / sqrt 2))
//   gelu_tanh  0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
//   silu       x / (1 + exp(-x))
// Each product and sum is its own rounded operation (no fused multiply-add), in the order
// written below, on every ISA.
#include "jit/gemm_activation.hpp"

#include <cstddef>
#include <string>

// SLEEF's vector functions, called from generated code (only their addresses are taken here:
// sleef.h declares them only in translation units compiled for the matching ISA). A host links
// its own family's only.
#if defined(SHAPEJIT_HOST_X86)
extern "C" {
void Sleef_erff16_u10avx512f();
void Sleef_tanhf16_u10avx512f();
void Sleef_expf16_u10avx512f();
void Sleef_erff8_u10avx2();
void Sleef_tanhf8_u10avx2();
void Sleef_expf8_u10avx2();
}
#endif
#if defined(SHAPEJIT_HOST_A64)
extern "C" {
void Sleef_erff4_u10advsimd();
void Sleef_tanhf4_u10advsimd();
void Sleef_expf4_u10advsimd();
}
#endif

namespace shapejit::jit {

namespace {

using K = ActOp::Kind;
constexpr ActReg kArg = ActReg::kArg, kTmp = ActReg::kTmp;

// 0.5 x (1 + f(arg)) once arg = f's argument: the tail gelu and gelu_tanh share.
std::vector<ActOp> half_x_times_one_plus(std::vector<ActOp> head) {
  head.push_back({K::kCall});
  head.push_back({K::kAddConst, kArg, kArg, kArg, 1.0f});
  head.push_back({K::kInput, kTmp});
  head.push_back({K::kMulConst, kTmp, kTmp, kArg, 0.5f});
  head.push_back({K::kMul, kArg, kArg, kTmp});
  return head;
}

const ActivationRecipe& gelu() {
  static const ActivationRecipe r{VectorMathFn::kErf,
                                  half_x_times_one_plus({{K::kMulConst, kArg, kArg, kArg, 0.70710678118654752f}})};
  return r;
}

const ActivationRecipe& gelu_tanh() {
  static const ActivationRecipe r{VectorMathFn::kTanh, half_x_times_one_plus({
                                                           {K::kMul, kTmp, kArg, kArg},  // x^2
                                                           {K::kMul, kTmp, kTmp, kArg},  // x^3
                                                           {K::kMulConst, kTmp, kTmp, kArg, 0.044715f},
                                                           {K::kAdd, kArg, kArg, kTmp},
                                                           {K::kMulConst, kArg, kArg, kArg, 0.79788456080286536f},
                                                       })};
  return r;
}

const ActivationRecipe& silu() {
  static const ActivationRecipe r{VectorMathFn::kExp, {
                                                          {K::kNeg, kArg, kArg},
                                                          {K::kCall},
                                                          {K::kAddConst, kArg, kArg, kArg, 1.0f},
                                                          {K::kInput, kTmp},
                                                          {K::kDiv, kArg, kTmp, kArg},
                                                      }};
  return r;
}

using EntryPoint = void (*)();

// Entry points in VectorMathFn order: erf, tanh, exp.
uint64_t pick(const EntryPoint (&fns)[3], VectorMathFn fn) { return reinterpret_cast<uint64_t>(fns[size_t(fn)]); }

}  // namespace

uint64_t vector_math_address(Isa isa, VectorMathFn fn) {
  switch (isa) {
#if defined(SHAPEJIT_HOST_X86)
    case Isa::kAvx512: return pick({Sleef_erff16_u10avx512f, Sleef_tanhf16_u10avx512f, Sleef_expf16_u10avx512f}, fn);
    case Isa::kAvx2: return pick({Sleef_erff8_u10avx2, Sleef_tanhf8_u10avx2, Sleef_expf8_u10avx2}, fn);
#endif
#if defined(SHAPEJIT_HOST_A64)
    case Isa::kNeon: return pick({Sleef_erff4_u10advsimd, Sleef_tanhf4_u10advsimd, Sleef_expf4_u10advsimd}, fn);
#endif
    default: return 0;
  }
}

bool activation_calls_out(Activation act) {
  return act == Activation::kGelu || act == Activation::kGeluTanh || act == Activation::kSilu;
}

const ActivationRecipe& activation_recipe(Activation act) {
  switch (act) {
    case Activation::kGelu: return gelu();
    case Activation::kGeluTanh: return gelu_tanh();
    case Activation::kSilu: return silu();
    default: break;
  }
  throw Error(Status::kInternalError, "activation_recipe: activation " + std::to_string(int(act)) +
                                          " makes no vector math call (only gelu, gelu_tanh and silu do)");
}

}  // namespace shapejit::jit
