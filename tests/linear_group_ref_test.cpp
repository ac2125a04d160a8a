// The linear-group reference and the public API. Properties of the reference itself (double
// accumulation, activations computed in double and rounded once) are checked exactly on ref/;
// the API (the reference today, JIT kernels later) is checked with integer data, exact in any
// summation order, or within the acceptance bound: the bias -> activation -> scale order, both
// head-split orders, the five call forms of split-gemm-semantics.md and M = 0. The validation
// rules are in linear_group_validation_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ref/linear_group.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::Activation;
using shapejit::LinearGroup;
using shapejit::LinearGroupDesc;
using shapejit::LinearInput;
using shapejit::LinearOutput;
using shapejit::LinearPart;
using shapejit::OutputLayout;

constexpr unsigned char kSentinel = 0xA5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> sentinel_floats(size_t n) {
  std::vector<float> v(n);
  std::memset(v.data(), kSentinel, n * sizeof(float));
  return v;
}

bool is_sentinel(float v) {
  unsigned char b[4];
  std::memcpy(b, &v, 4);
  return b[0] == kSentinel && b[1] == kSentinel && b[2] == kSentinel && b[3] == kSentinel;
}

// y = x . w_row + b with small integers, exact in f32: the expected values of the call forms.
std::vector<float> naive(const std::vector<float>& x, int64_t m, int64_t k, const float* w, int64_t n,
                         const float* bias) {
  std::vector<float> y(size_t(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float acc = bias ? bias[c] : 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += x[size_t(r * k + i)] * w[c * k + i];
      y[size_t(r * n + c)] = acc;
    }
  return y;
}

// The reference view of a 1x1 part y = act(x * 1 + bias) * scale.
shapejit::ref::LinearPartView unit_view(const float* x, const float* one, const float* b, Activation act, float scale,
                                        float* y) {
  shapejit::ref::LinearPartView v;
  v.x = x, v.m = 1, v.k = 1, v.ldx = 1;
  v.w = one, v.n = 1, v.ldw = 1, v.bias = b;
  v.activation = static_cast<shapejit_activation>(act), v.scale = scale;
  v.y = y, v.ldy = 1;
  return v;
}

// y = act(x * 1 + bias) * scale by the reference.
float ref_epilogue(Activation act, float x, float scale = 1.0f, float bias = 0.0f) {
  const float one = 1.0f;
  float y = 0.0f;
  shapejit::ref::linear_part(unit_view(&x, &one, &bias, act, scale, &y));
  return y;
}

// The same through the API; checks it is within the acceptance bound of the reference.
float epilogue(Activation act, float x, float scale = 1.0f, float bias = 0.0f) {
  const float one = 1.0f;
  const float b[1] = {bias};
  LinearGroup g(LinearGroupDesc::packed(&one, 1, 1, {b, 1}, {{.rows = 1, .activation = act, .scale = scale}}));
  float y = 0.0f;
  const LinearInput in{&x, 1, 1};
  const LinearOutput out{&y};
  g.run({&in, 1}, {&out, 1});
  const auto e = shapejit::ref::reference_element(unit_view(&x, &one, b, act, scale, nullptr), 0, 0);
  CHECK_MESSAGE(shapejit::ref::accepted(y, e.value, e.bound),
                "act " << int(act) << " x " << x << ": " << y << " vs " << e.value << " +- " << e.bound);
  return y;
}

}  // namespace

TEST_CASE("linear group: row-major with strides, bias, and the sentinel gaps untouched") {
  // X [2,3] (rows 4 apart), W [2,3], b [2]: Y = [[1-3+0.5, 2+2-1], [4-6+0.5, 8+5-1]]
  const std::vector<float> x{1, 2, 3, 99, 4, 5, 6, 99};
  const std::vector<float> w{1, 0, -1, 2, 1, 0};
  const std::vector<float> b{0.5f, -1.0f};
  LinearGroup g(LinearGroupDesc::packed(w.data(), 2, 3, b, {{.rows = 2}}));
  CHECK(g.num_parts() == 1);
  auto y = sentinel_floats(6);
  const LinearInput in{x.data(), 2, 3, 4};
  const LinearOutput out{y.data(), 3};
  g.run({&in, 1}, {&out, 1});
  CHECK(y[0] == -1.5f);
  CHECK(y[1] == 3.0f);
  CHECK(is_sentinel(y[2]));
  CHECK(y[3] == -1.5f);
  CHECK(y[4] == 12.0f);
  CHECK(is_sentinel(y[5]));
}

TEST_CASE("linear group ref: accumulation is in double, so cancellation loses nothing") {
  // f32 accumulation gives (1e8 + 1) - 1e8 = 0; the exact sum is 1. A kernel may give 0: the
  // bound, 2 K 2^-24 (sum |x w|), is about 71.5 here.
  const std::vector<float> x{1e8f, 1.0f, -1e8f}, w{1, 1, 1};
  float y = 0;
  shapejit::ref::LinearPartView v;
  v.x = x.data(), v.m = 1, v.k = 3, v.ldx = 3, v.w = w.data(), v.n = 1, v.ldw = 3, v.y = &y, v.ldy = 1;
  shapejit::ref::linear_part(v);
  CHECK(y == 1.0f);
  const auto e = shapejit::ref::reference_element(v, 0, 0);
  CHECK(e.value == 1.0f);
  CHECK(e.bound == doctest::Approx(2.0 * 3 * (2e8 + 1) / 16777216.0 + std::ldexp(1.0, -23)));
  CHECK(shapejit::ref::accepted(0.0f, e.value, e.bound));
  CHECK_FALSE(shapejit::ref::accepted(80.0f, e.value, e.bound));
}

TEST_CASE("linear group ref: accepted() wants NaN for NaN and equal infinities") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(shapejit::ref::accepted(kNaN, kNaN, 0.0));
  CHECK_FALSE(shapejit::ref::accepted(0.0f, kNaN, 1e30));
  CHECK_FALSE(shapejit::ref::accepted(kNaN, 1.0f, 1e30));
  CHECK(shapejit::ref::accepted(inf, inf, 0.0));
  CHECK_FALSE(shapejit::ref::accepted(-inf, inf, 1e30));
  CHECK_FALSE(shapejit::ref::accepted(inf, 1.0f, 1e30));
}

TEST_CASE("linear group ref: activations (values from erf/tanh/exp in double, rounded to f32)") {
  const float xs[] = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f};
  const float gelu[] = {-0.004049694165587425f, -0.15865525603294373f, -0.1542687714099884f, 0.0f,
                        0.3457312285900116f, 0.8413447737693787f, 1.9544997215270996f};
  const float gelu_tanh[] = {-0.003637392073869705f, -0.15880800783634186f, -0.1542859971523285f, 0.0f,
                             0.3457140028476715f, 0.8411920070648193f, 1.9545977115631104f};
  const float silu[] = {-0.14227761328220367f, -0.2689414322376251f, -0.1887703388929367f, 0.0f,
                        0.3112296760082245f, 0.7310585975646973f, 1.7615941762924194f};
  for (int i = 0; i < 7; ++i) {
    CAPTURE(xs[i]);
    CHECK(ref_epilogue(Activation::kNone, xs[i]) == xs[i]);
    CHECK(ref_epilogue(Activation::kRelu, xs[i]) == (xs[i] > 0 ? xs[i] : 0.0f));
    CHECK(ref_epilogue(Activation::kGelu, xs[i]) == gelu[i]);
    CHECK(ref_epilogue(Activation::kGeluTanh, xs[i]) == gelu_tanh[i]);
    CHECK(ref_epilogue(Activation::kSilu, xs[i]) == silu[i]);
    CHECK(epilogue(Activation::kNone, xs[i]) == xs[i]);  // exact in any implementation
    CHECK(epilogue(Activation::kRelu, xs[i]) == (xs[i] > 0 ? xs[i] : 0.0f));
    for (Activation a : {Activation::kGelu, Activation::kGeluTanh, Activation::kSilu}) epilogue(a, xs[i]);
  }
  // The far negative tail keeps its tiny values: gelu(-10) = -7.6e-23 (1 + erf(x) would give 0).
  CHECK(ref_epilogue(Activation::kGelu, -10.0f) == doctest::Approx(-7.619853e-23).epsilon(1e-6));
  CHECK(ref_epilogue(Activation::kSilu, -100.0f) == doctest::Approx(-3.720076e-42).epsilon(1e-3));
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kGelu, Activation::kGeluTanh,
                       Activation::kSilu})
    CHECK(std::isnan(epilogue(a, kNaN)));  // NaN propagates through every activation
}

TEST_CASE("linear group: bias, then activation, then scale") {
  CHECK(epilogue(Activation::kRelu, 1.0f, 1.0f, -3.0f) == 0.0f);    // relu(1 - 3), not relu(1) - 3
  CHECK(epilogue(Activation::kRelu, 2.0f, -0.5f) == -1.0f);         // relu(2) * -0.5, not relu(2 * -0.5)
  CHECK(epilogue(Activation::kNone, 3.0f, 0.25f, 1.0f) == 1.0f);    // (3 + 1) * 0.25
  CHECK(ref_epilogue(Activation::kGelu, 1.0f, 0.25f) == 0.8413447737693787f * 0.25f);
  epilogue(Activation::kGelu, 1.0f, 0.25f);
  // The scale is an f32 multiply of the rounded activation: 1/3 * 3 rounds in f32.
  CHECK(epilogue(Activation::kNone, 3.0f, 1.0f / 3.0f) == 3.0f * (1.0f / 3.0f));
}

TEST_CASE("linear group: head-split layouts, sequence-first and batch-first") {
  // M = 6 rows, row r = [r]; W = [1, 10, 100, 1000]^T so Y[r, c] = r * w_c; N = 4, H = 2, Dh = 2.
  const std::vector<float> x{0, 1, 2, 3, 4, 5}, w{1, 10, 100, 1000};
  const std::vector<float> seq_first{0, 0, 2, 20, 4, 40, 0, 0, 200, 2000, 400, 4000,
                                     1, 10, 3, 30, 5, 50, 100, 1000, 300, 3000, 500, 5000};
  const std::vector<float> batch_first{0, 0, 1, 10, 2, 20, 0, 0, 100, 1000, 200, 2000,
                                       3, 30, 4, 40, 5, 50, 300, 3000, 400, 4000, 500, 5000};
  for (auto [layout, expected] : {std::pair{OutputLayout::kHeadsSeqFirst, seq_first},
                                  std::pair{OutputLayout::kHeadsBatchFirst, batch_first}}) {
    const int layout_id = int(layout);
    CAPTURE(layout_id);
    LinearGroup g(LinearGroupDesc::packed(w.data(), 4, 1, {}, {{.rows = 4, .layout = layout, .heads = 2}}));
    auto y = sentinel_floats(25);
    const LinearInput in{x.data(), 6, 1};
    const LinearOutput out{y.data(), 0, /*batch=*/2, /*seq_len=*/3};
    g.run({&in, 1}, {&out, 1});
    CHECK(std::vector<float>(y.begin(), y.begin() + 24) == expected);
    CHECK(is_sentinel(y[24]));
  }
}

TEST_CASE("linear group: F1 self-attention (one input, packed weight and bias, one [M, 3E] output)") {
  // E = 2: W [6, 2], b [6]; X [2, 2] shared by q, k, v. Written side by side into Y [2, 6].
  const std::vector<float> w{1, 0, 0, 1, 1, 1, 1, -1, 2, 0, 0, 3};
  const std::vector<float> b{0, 0, 1, 1, -1, -1};
  const std::vector<float> x{1, 2, 3, 4};
  LinearGroup g(LinearGroupDesc::packed(w.data(), 6, 2, b, {{.rows = 2}, {.row_begin = 2, .rows = 2},
                                                             {.row_begin = 4, .rows = 2}}));
  auto y = sentinel_floats(12);
  const LinearInput in{x.data(), 2, 2};
  const LinearInput ins[3] = {in, in, in};
  const LinearOutput outs[3] = {{y.data(), 6}, {y.data() + 2, 6}, {y.data() + 4, 6}};
  g.run(ins, outs);
  // row 0: q = (1, 2), k = (3+1, -1+1), v = (2-1, 6-1); row 1: q = (3, 4), k = (8, 0), v = (5, 11)
  CHECK(y == std::vector<float>{1, 2, 4, 0, 1, 5, 3, 4, 8, 0, 5, 11});
  // The same through the C ABI, each part into its own buffer.
  std::vector<shapejit_linear_part_desc> parts(3);
  for (int p = 0; p < 3; ++p) parts[size_t(p)] = {.row_begin = 2 * p, .rows = 2};
  const shapejit_linear_group_desc desc{SHAPEJIT_WEIGHTS_PACKED, w.data(), 6, 2, 2, b.data(), 6, parts.data(), 3};
  shapejit_linear_group* cg = nullptr;
  REQUIRE(shapejit_linear_group_create(&desc, &cg) == SHAPEJIT_OK);
  std::vector<float> q(4), k(4), v(4);
  const shapejit_linear_group_io io[3] = {{x.data(), 2, 2, 2, q.data(), 2}, {x.data(), 2, 2, 2, k.data(), 2},
                                          {x.data(), 2, 2, 2, v.data(), 2}};
  CHECK(shapejit_linear_group_run(cg, io, 3) == SHAPEJIT_OK);
  CHECK(std::string(shapejit_last_error()).empty());
  CHECK(q == std::vector<float>{1, 2, 3, 4});
  CHECK(k == std::vector<float>{4, 0, 8, 0});
  CHECK(v == std::vector<float>{1, 5, 5, 11});
  CHECK(shapejit_linear_group_destroy(cg) == SHAPEJIT_OK);
  CHECK(shapejit_linear_group_destroy(nullptr) == SHAPEJIT_OK);
  // The reference straight from the caller's description resolves the same rows and bias slices.
  std::vector<float> rq(4), rk(4), rv(4);
  const shapejit_linear_group_io rio[3] = {{x.data(), 2, 2, 2, rq.data(), 2}, {x.data(), 2, 2, 2, rk.data(), 2},
                                           {x.data(), 2, 2, 2, rv.data(), 2}};
  shapejit::ref::linear_group(desc, rio);
  CHECK(rq == q);
  CHECK(rk == k);
  CHECK(rv == v);
}

TEST_CASE("linear group: F2 cross-attention, F3 distinct inputs, F5 no bias") {
  const int64_t e = 3;
  std::vector<float> w(size_t(3 * e * e)), b(size_t(3 * e));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7 % 11) - 5);
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i) - 4);
  const std::vector<float> tgt{1, 2, 3, -1, 0, 2};                // L*N = 2 rows
  const std::vector<float> mem{2, 1, 0, 0, 1, -2, 3, 3, 1, -1, 4, 0};  // S*N = 4 rows
  const std::vector<float> val{5, 0, -1, 1, 1, 1, 0, 2, 2, 2, -3, 1};
  const std::vector<LinearPart> parts{{.rows = e}, {.row_begin = e, .rows = e}, {.row_begin = 2 * e, .rows = e}};
  struct Form {
    const char* name;
    const std::vector<float>*q, *k, *v;
    bool bias;
  };
  for (const Form& f : {Form{"F2", &tgt, &mem, &mem, true}, Form{"F3", &tgt, &mem, &val, true},
                        Form{"F5 (self)", &tgt, &tgt, &tgt, false}, Form{"F5 (cross)", &tgt, &mem, &mem, false}}) {
    CAPTURE(f.name);
    LinearGroup g(LinearGroupDesc::packed(w.data(), 3 * e, e, f.bias ? std::span<const float>(b) : std::span<const float>(),
                                          parts));
    const std::vector<float>* in[3] = {f.q, f.k, f.v};
    LinearInput ins[3];
    std::vector<float> ys[3];
    LinearOutput outs[3];
    for (int p = 0; p < 3; ++p) {
      ins[p] = {in[p]->data(), int64_t(in[p]->size()) / e, e};
      ys[p] = sentinel_floats(in[p]->size());
      outs[p] = {ys[p].data()};
    }
    g.run(ins, outs);
    for (int p = 0; p < 3; ++p) {
      CAPTURE(p);
      CHECK(ys[p] == naive(*in[p], ins[p].m, e, w.data() + p * e * e, e, f.bias ? b.data() + p * e : nullptr));
    }
  }
}

TEST_CASE("linear group: F4 kdim/vdim with separate weights and a packed bias") {
  // E = 2, kdim = 3, vdim = 1: weights [2,2], [2,3] (rows 4 apart), [2,1]; bias [6] packed.
  const std::vector<float> wq{1, 2, 3, 4}, wk{1, 0, -1, 9, 2, 1, 1, 9}, wv{3, -2};
  const std::vector<float> wk_dense{1, 0, -1, 2, 1, 1};
  const std::vector<float> b{1, 2, 3, 4, 5, 6};
  const std::vector<float> q_in{1, 1, 2, 0}, k_in{1, 2, 3, 0, 0, 1, 2, 2, 2}, v_in{1, 2, 3};
  LinearGroup g(LinearGroupDesc::separate({{.rows = 2, .weight = wq.data(), .k = 2},
                                           {.row_begin = 2, .rows = 2, .weight = wk.data(), .k = 3, .weight_stride = 4},
                                           {.row_begin = 4, .rows = 2, .weight = wv.data(), .k = 1}},
                                          b));
  std::vector<float> q(4), k(6), v(6);
  const LinearInput ins[3] = {{q_in.data(), 2, 2}, {k_in.data(), 3, 3}, {v_in.data(), 3, 1}};
  const LinearOutput outs[3] = {{q.data()}, {k.data()}, {v.data()}};
  g.run(ins, outs);
  CHECK(q == naive(q_in, 2, 2, wq.data(), 2, b.data()));
  CHECK(k == naive(k_in, 3, 3, wk_dense.data(), 2, b.data() + 2));
  CHECK(v == naive(v_in, 3, 1, wv.data(), 2, b.data() + 4));
  CHECK(q == std::vector<float>{4, 9, 3, 8});  // anchors the helper: [1+2+1, 3+4+2], [2+1, 6+2]
}

TEST_CASE("linear group: M = 0 runs with null buffers, in both layouts") {
  const std::vector<float> w{1, 2, 3, 4};
  LinearGroup g(LinearGroupDesc::packed(w.data(), 2, 2, {}, {{.rows = 2}, {.rows = 2, .layout = OutputLayout::kHeadsSeqFirst, .heads = 2}}));
  const LinearInput ins[2] = {{nullptr, 0, 2}, {nullptr, 0, 2}};
  for (int64_t batch : {0, 3}) {
    const LinearOutput outs[2] = {{nullptr}, {nullptr, 0, batch, 0}};
    CHECK_NOTHROW(g.run(ins, outs));
  }
}
