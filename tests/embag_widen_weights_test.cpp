// f16 per-sample weights widened by the plan (runtime/embag/widen_weights.hpp): which calls the
// plan widens, that their kernels are generated (an f32-weight key of an f16 or quantized table,
// not the generic fallback), that the widened weights are the reference's values, and that the
// kernel args point at them. The outputs of such calls against the reference are the dtype
// batteries' (embag_dtype_differential_test.cpp and the jit ones), which run them through the API.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "jit/embag_plan.hpp"
#include "ref/float16.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/validate.hpp"
#include "runtime/embag/widen_weights.hpp"

namespace {

using shapejit::DType;
using shapejit::jit::Isa;

// A weighted sum over a 4-row table of `table` (D = 8), three indices, weights of `psw`.
struct WeightedCall {
  std::vector<uint8_t> table = std::vector<uint8_t>(4 * 8 * 4);  // zeros: the plan reads no value
  std::vector<int64_t> indices{0, 3, 1};
  std::vector<int64_t> offsets{0};
  std::vector<uint16_t> weights16{0x3C00, 0xC000, 0x0001};  // f16 1, -2, the smallest subnormal
  std::vector<float> weights32{1.0f, -2.0f, 0.5f};
  shapejit_embedding_bag_ex_args args{};

  WeightedCall(shapejit_dtype table_dtype, shapejit_dtype psw) {
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = table_dtype;
    a.num_rows = 4;
    a.dim = 8;
    a.row_stride = 8;  // elements of a float table; bytes of a q4 row (4 of codes, 4 of scale and bias)
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = 3;
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = 1;
    a.mode = SHAPEJIT_SUM;
    a.per_sample_weights = psw == SHAPEJIT_F32 ? static_cast<const void*>(weights32.data()) : weights16.data();
    shapejit_embedding_bag_ex_init(&args, &a);
    args.per_sample_weights_dtype = psw;
  }
};

}  // namespace

TEST_CASE("widened weights: f16 every bit pattern as the reference widens it") {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  std::vector<float> wide(all.size());
  shapejit::rt::widen_f16_weights(all.data(), int64_t(all.size()), wide.data());
  int64_t differ = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = shapejit::ref::f16_to_f32(all[i]);
    // A NaN stays a NaN of the same sign; its payload is the conversion instruction's.
    const bool same = std::isnan(want) ? std::isnan(wide[i]) && std::signbit(want) == std::signbit(wide[i])
                                       : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(wide[i]);
    if (!same && differ++ < 5) FAIL_CHECK("f16 bits 0x" << std::hex << i << ": widened differs from the reference");
  }
  CHECK(differ == 0);
}

TEST_CASE("widened weights: which calls the plan widens, and their kernels") {
  struct Case {
    shapejit_dtype table, psw;
    bool widened;  // on x86-64
  };
  for (const Case c : {Case{SHAPEJIT_F16, SHAPEJIT_F16, true}, Case{SHAPEJIT_Q4, SHAPEJIT_F16, true},
                       Case{SHAPEJIT_BF16, SHAPEJIT_BF16, false}, Case{SHAPEJIT_F32, SHAPEJIT_F32, false},
                       Case{SHAPEJIT_Q4, SHAPEJIT_F32, false}}) {
    CAPTURE(int(c.table));
    CAPTURE(int(c.psw));
    WeightedCall call(c.table, c.psw);
    const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(call.args);
#if defined(__x86_64__)
    const bool widened = c.widened;
#else
    const bool widened = false;
#endif
    CHECK(plan.psw == DType(c.psw));
    CHECK((plan.kernel_psw == DType::kF32) == (widened || c.psw == SHAPEJIT_F32));
    const shapejit::jit::EmbagKernelArgs k = shapejit::rt::make_embag_kernel_args(plan, nullptr, nullptr, nullptr, nullptr);
    if (widened) {
      REQUIRE(plan.wide_weights.size() == 3);
      CHECK(k.per_sample_weights == plan.wide_weights.data());
      for (size_t i = 0; i < 3; ++i) CHECK(plan.wide_weights[i] == shapejit::ref::f16_to_f32(call.weights16[i]));
    } else {
      CHECK(k.per_sample_weights == call.args.call.per_sample_weights);
    }
    // Every generator takes the key the plan asks for: no call falls back to the generic kernel.
    for (const Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon}) {
      const shapejit::jit::EmbagKey key = shapejit::rt::make_embag_key(plan, isa);
      CHECK_MESSAGE(key.isa == isa, key.name());
      CHECK(key.psw == plan.kernel_psw);
    }
  }
}
