// The activations of the GEMM epilogue that call a vector math function, written once: which
// SLEEF function each calls and the vector operations around the call, with their constants.
// The skeleton (jit/gemm_skeleton.cpp) plays a recipe through each back end's vector
// primitives, so every ISA evaluates the same formula in the same order; only the SLEEF entry
// point per ISA is the table of vector_math_address. relu and none need no call and are
// not described here.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/isa.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

/// The SLEEF single-precision functions the activations call (1.0-ulp variants); a back end
/// maps each to its ISA's entry point (Sleef_erff16_u10avx512f, Sleef_erff4_u10advsimd, ...).
enum class VectorMathFn : uint8_t { kErf, kTanh, kExp };

/// One operation of a recipe on two vector registers: kArg (the function's argument and
/// result register) and kTmp. Operands name those two, the input value or a constant.
enum class ActReg : uint8_t { kArg = 0, kTmp = 1 };

struct ActOp {
  enum class Kind : uint8_t {
    kMul,       ///< dst = a * b
    kAdd,       ///< dst = a + b
    kDiv,       ///< dst = a / b
    kMulConst,  ///< dst = a * constant
    kAddConst,  ///< dst = a + constant
    kNeg,       ///< dst = -a (sign flip, exact)
    kInput,     ///< dst = the pre-activation value again (reloaded: the call clobbered it)
    kCall,      ///< kArg = fn(kArg)
  };
  Kind kind;
  ActReg dst = ActReg::kArg;
  ActReg a = ActReg::kArg;
  ActReg b = ActReg::kArg;
  float constant = 0.0f;
};

/// An activation as a vector function call with operations around it. The value starts in
/// kArg; the result ends in kArg.
struct ActivationRecipe {
  VectorMathFn fn;
  std::vector<ActOp> ops;
};

/// The entry point generated code for `isa` calls for `fn`, or 0 when this host does not run
/// that ISA's family (code cross-emitted for it, e.g. by jitdump, never runs). The one table of
/// SLEEF symbols per ISA.
uint64_t vector_math_address(Isa isa, VectorMathFn fn);

/// True when `act` is evaluated through a vector math call (gelu, gelu_tanh, silu).
bool activation_calls_out(Activation act);

/// The recipe of `act`; throws kInternalError for an activation that makes no call.
const ActivationRecipe& activation_recipe(Activation act);

}  // namespace shapejit::jit
