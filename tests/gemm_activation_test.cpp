// The activation recipes of the GEMM epilogue (jit/gemm_activation.hpp), which every back end
// plays: played here in scalar f32 (std::erf/tanh/exp for SLEEF), each must stay within the
// linear group's activation bound of the double-precision reference (ref::activate).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "jit/gemm_activation.hpp"
#include "ref/linear_group.hpp"

namespace {

using shapejit::Activation;
using shapejit::jit::ActOp;
using shapejit::jit::ActReg;
using shapejit::jit::ActivationRecipe;
using shapejit::jit::VectorMathFn;

float call(VectorMathFn fn, float x) {
  switch (fn) {
    case VectorMathFn::kErf: return std::erf(x);
    case VectorMathFn::kTanh: return std::tanh(x);
    case VectorMathFn::kExp: return std::exp(x);
  }
  return std::numeric_limits<float>::quiet_NaN();
}

// The recipe on one lane, each operation rounded to f32 as the generated code rounds it.
float play(const ActivationRecipe& r, float input) {
  float reg[2] = {input, 0.0f};
  auto at = [&](ActReg x) -> float& { return reg[int(x)]; };
  for (const ActOp& op : r.ops) {
    switch (op.kind) {
      case ActOp::Kind::kMul: at(op.dst) = at(op.a) * at(op.b); break;
      case ActOp::Kind::kAdd: at(op.dst) = at(op.a) + at(op.b); break;
      case ActOp::Kind::kDiv: at(op.dst) = at(op.a) / at(op.b); break;
      case ActOp::Kind::kMulConst: at(op.dst) = at(op.a) * op.constant; break;
      case ActOp::Kind::kAddConst: at(op.dst) = at(op.a) + op.constant; break;
      case ActOp::Kind::kNeg: at(op.dst) = -at(op.a); break;
      case ActOp::Kind::kInput: at(op.dst) = input; break;
      case ActOp::Kind::kCall: reg[0] = call(r.fn, reg[0]); break;
    }
  }
  return reg[0];
}

double ulp(float v) {
  const float a = std::fabs(v);
  return double(std::nextafter(a, std::numeric_limits<float>::infinity())) - double(a);
}

}  // namespace

TEST_CASE("gemm activation recipes: gelu, gelu_tanh and silu within the activation bound of the reference") {
  const struct {
    Activation act;
    shapejit_activation ref;
  } cases[] = {{Activation::kGelu, SHAPEJIT_ACTIVATION_GELU},
               {Activation::kGeluTanh, SHAPEJIT_ACTIVATION_GELU_TANH},
               {Activation::kSilu, SHAPEJIT_ACTIVATION_SILU}};
  for (const auto& c : cases) {
    CAPTURE(int(c.act));
    REQUIRE(shapejit::jit::activation_calls_out(c.act));
    const ActivationRecipe& recipe = shapejit::jit::activation_recipe(c.act);
    double worst = 0.0;
    for (float z = -12.0f; z <= 12.0f; z += 0.00731f) {
      const float want = shapejit::ref::activate(c.ref, z);
      const float got = play(recipe, z);
      const double bound = 2.0 * ulp(want) + 8.0 * ulp(z);
      worst = std::fmax(worst, std::fabs(double(got) - double(want)) / bound);
      if (std::fabs(double(got) - double(want)) > bound) {
        CAPTURE(z);
        CHECK(got == want);  // fails, showing both values
        break;
      }
    }
    MESSAGE("activation " << int(c.act) << ": worst error / bound " << worst);
  }
}

TEST_CASE("gemm activation recipes: none and relu make no call and have no recipe") {
  for (Activation act : {Activation::kNone, Activation::kRelu}) {
    CAPTURE(int(act));
    CHECK_FALSE(shapejit::jit::activation_calls_out(act));
    CHECK_THROWS_AS(shapejit::jit::activation_recipe(act), shapejit::Error);
  }
}
