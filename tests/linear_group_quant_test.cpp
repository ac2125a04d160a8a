// Quantized linear groups (docs/quantized-linear-semantics.md) above the kernels: the runtime's
// weight and input quantizers against the scalar reference's own copies (integer parts exact),
// random groups of every call form and every quantized form through the C ABI against the
// reference (bitwise for qd8 with none/relu, the documented bounds otherwise; the
// double-precision epilogue on the exact accumulator; the quantization error against float32),
// the distinct-input sharing, the reference fallback's counting, and every new validation rule
// (outputs untouched). Seeds: SHAPEJIT_TEST_SEED replays a run.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "ref/linear_group.hpp"
#include "ref/linear_group_quant.hpp"
#include "runtime/linear_group/linear_group.hpp"
#include "runtime/linear_group/linear_group_input_quant.hpp"
#include "runtime/linear_group/linear_weight_quant.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::test_seed;

constexpr shapejit_linear_quant kQuantForms[] = {SHAPEJIT_LINEAR_QD8_QC8W, SHAPEJIT_LINEAR_QD8_QC4W,
                                                 SHAPEJIT_LINEAR_F32_QC8W, SHAPEJIT_LINEAR_F32_QC4W};
const char* form_name(shapejit_linear_quant q) {
  switch (q) {
    case SHAPEJIT_LINEAR_F32: return "f32";
    case SHAPEJIT_LINEAR_QD8_QC8W: return "qd8-qc8w";
    case SHAPEJIT_LINEAR_QD8_QC4W: return "qd8-qc4w";
    case SHAPEJIT_LINEAR_F32_QC8W: return "f32-qc8w";
    case SHAPEJIT_LINEAR_F32_QC4W: return "f32-qc4w";
  }
  return "?";
}

constexpr uint32_t kSentinelBits = 0x7FA5A5A5u;

float sentinel() {
  float f;
  std::memcpy(&f, &kSentinelBits, 4);
  return f;
}

bool all_sentinel(const std::vector<float>& v) {
  for (float f : v)
    if (std::memcmp(&f, &kSentinelBits, 4) != 0) return false;
  return true;
}

// Values of mixed magnitude with exact ties (halves) now and then, so rounding rules matter.
float draw(std::mt19937_64& rng, float scale) {
  std::uniform_int_distribution<int> pick(0, 9);
  std::normal_distribution<float> normal(0.0f, scale);
  switch (pick(rng)) {
    case 0: return 0.0f;
    case 1: return float(int(std::uniform_int_distribution<int>(-20, 20)(rng))) * 0.5f;
    default: return normal(rng);
  }
}

// ---- Weight and input quantization: the runtime against the reference, integer parts exact ----

TEST_CASE("quantized linear: weight quantization equals the reference's (codes and scales bitwise)") {
  std::mt19937_64 rng(test_seed(0x5157));
  for (shapejit_linear_quant q : kQuantForms)
    for (int64_t k : {1, 2, 7, 33, 130}) {
      const int64_t rows = 9, ld = k + 3;
      std::vector<float> w(size_t(rows * ld), 123.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < k; ++c) w[size_t(r * ld + c)] = r == 0 ? 0.0f : draw(rng, float(r));
      if (k > 1) {  // row 1: a tie at 3.5 / (7 / 7) for qc4w
        std::fill_n(w.begin() + ld, k, 0.0f);
        w[size_t(1 * ld)] = 7.0f, w[size_t(1 * ld + 1)] = 3.5f;
      }
      std::vector<int8_t> codes(size_t(rows * k)), want(size_t(rows * k));
      std::vector<float> scales(static_cast<size_t>(rows)), want_scales(static_cast<size_t>(rows));
      REQUIRE(shapejit_linear_quantize_weights(q, w.data(), rows, k, ld, codes.data(), scales.data()) == SHAPEJIT_OK);
      for (int64_t r = 0; r < rows; ++r)
        REQUIRE(shapejit::ref::quantize_weight_row(q, w.data() + r * ld, k, want.data() + r * k, &want_scales[size_t(r)]) == -1);
      CHECK(codes == want);
      CHECK(std::memcmp(scales.data(), want_scales.data(), scales.size() * 4) == 0);
      CHECK(scales[0] == 0.0f);  // a row of zeros
      for (int8_t c : codes) {
        CHECK(int(c) >= shapejit::ref::quant_code_min(q));
        CHECK(int(c) <= shapejit::ref::quant_code_max(q));
      }
      if (k > 1 && shapejit::ref::quant_int4(q)) CHECK(codes[size_t(k + 1)] == 4);  // rne(3.5) = 4 (even)
    }
}

TEST_CASE("quantized linear: input rows quantize as the reference does (codes, scale, zero point exact)") {
  std::mt19937_64 rng(test_seed(0x1A7));
  std::vector<std::vector<float>> rows = {
      {0.0f, 0.0f, 0.0f},                 // zeros: scale 1, zero point -128
      {1.0f, 2.0f, 3.0f},                 // all positive: lo = 0
      {-1.0f, -2.0f, -3.0f, -0.5f},       // all negative: hi = 0
      {1e-44f, -3e-45f, 0.0f},            // denormals: the scale underflows to 0, then 1
      {3e37f, -3e37f, 1.0f},              // large but finite range
      {-128.0f, 127.0f, 0.5f, -0.5f, 1.5f, 2.5f},
  };
  for (int i = 0; i < 40; ++i) {
    std::vector<float> r(size_t(1 + i * 7 % 61));
    for (float& v : r) v = draw(rng, float(1 + i));
    rows.push_back(r);
  }
  for (const std::vector<float>& x : rows) {
    const int64_t k = int64_t(x.size());
    std::vector<uint8_t> u(size_t(shapejit::rt::quantized_row_bytes(k)), 0xEE);
    float scale = 0;
    int32_t zero = 0;
    REQUIRE(shapejit::rt::quantize_input_row(x.data(), k, u.data(), &scale, &zero));
    std::vector<int8_t> q(static_cast<size_t>(k));
    shapejit::ref::InputRowError error;
    const shapejit::ref::InputRowQuant want = shapejit::ref::quantize_input_row(x.data(), k, q.data(), error);
    REQUIRE(error == shapejit::ref::InputRowError::kNone);
    CHECK(scale == want.scale);
    CHECK(zero == want.zero + 128);
    CHECK(want.zero >= -128);
    CHECK(want.zero <= 127);
    for (int64_t c = 0; c < k; ++c) CHECK(int(u[size_t(c)]) == int(q[size_t(c)]) + 128);
    for (size_t c = size_t(k); c < u.size(); ++c) CHECK(u[c] == 0);  // padding past k
    // The dequantized row is within half a step of x (the clamp never moves a code further).
    for (int64_t c = 0; c < k; ++c)
      CHECK(std::fabs(double(x[size_t(c)]) - double(want.scale) * (q[size_t(c)] - want.zero)) <=
            0.5 * double(want.scale) * (1 + 0x1p-10) + 0x1p-149);
  }
  CHECK(rows[0].size() == 3);
  float scale = 0;
  int32_t zero = 0;
  std::vector<uint8_t> u(8);
  const float bad[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_FALSE(shapejit::rt::quantize_input_row(bad, 2, u.data(), &scale, &zero));
  const float overflow[] = {3e38f, -3e38f};
  CHECK_FALSE(shapejit::rt::quantize_input_row(overflow, 2, u.data(), &scale, &zero));
  // Rows past one vector width (the x86 engine runs eight lanes at a time): a bad value in a
  // vector lane or in the tail, and a range that overflows only across lanes.
  std::vector<uint8_t> wide(24);
  for (const float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()})
    for (const int64_t at : {0, 5, 7, 8, 15, 16, 18}) {
      std::vector<float> x(19, 0.25f);
      x[size_t(at)] = v;
      CHECK_FALSE(shapejit::rt::quantize_input_row(x.data(), 19, wide.data(), &scale, &zero));
    }
  std::vector<float> split(17, 1.0f);
  split[2] = 3e38f, split[13] = -3e38f;
  CHECK_FALSE(shapejit::rt::quantize_input_row(split.data(), 17, wide.data(), &scale, &zero));
}

// Rows whose values sit on half steps of their own scale (x / s exactly n + 1/2, or a few ulps
// from it), where a quotient one ulp off rounds to the other integer: the engine's x86 rows take
// x * (1 / s) and must fall back to the division there (runtime/linear_group/input_quant_avx2.cpp);
// scales around 2^-125, where it switches to the division for whole rows; random rows of every
// magnitude. All through quantize_run_inputs (blocks of rows, tails), row by row against the
// reference's own division.
TEST_CASE("quantized linear: inputs on and next to half steps quantize as the reference's division does") {
  std::mt19937_64 rng(test_seed(0x4A1F));
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto unit = [&] { return std::uniform_real_distribution<float>(0.5f, 1.0f)(rng); };
  int64_t near_half = 0, checked = 0;
  for (const int64_t k : {1, 2, 3, 8, 9, 16, 17, 32, 40, 203}) {  // 16, 32: widths with their own code
    const int64_t m = 61;  // several blocks of eight rows and a partial one
    std::vector<float> x(size_t(m * k));
    for (int64_t r = 0; r < m; ++r) {
      float* row = &x[size_t(r * k)];
      const int kind = int(r % 4);
      const int e = kind == 3 ? uniform(-122, -112) : uniform(-60, 60);  // kind 3: s near 2^-125
      const float a = std::ldexp(unit(), e), b = std::ldexp(unit(), e);
      std::normal_distribution<float> normal(0.0f, b);
      for (int64_t c = 0; c < k; ++c) row[c] = kind == 1 ? normal(rng) : float(uniform(-3, 3)) * b * 0.25f;
      if (kind == 1 || kind == 2 || k < 3) continue;
      // lo = -a and hi = b fix the scale exactly as the rule computes it; the other values go
      // on half steps n + 1/2 of it (|n| <= 60 keeps them inside [-a, b]), nudged by 0..2 ulps.
      row[0] = -a, row[1] = b;
      const float s = (b - -a) / 255.0f;
      for (int64_t c = 2; c < k; ++c) {
        float v = (float(uniform(-60, 60)) + 0.5f) * s;
        for (int d = uniform(-2, 2); d != 0; d += d > 0 ? -1 : 1) v = std::nextafter(v, d > 0 ? INFINITY : -INFINITY);
        row[c] = v;
      }
    }
    std::vector<float> y(1);
    const shapejit_linear_group_io io{x.data(), m, k, k, y.data(), 1, 0, 0};
    for (const bool signed_codes : {false, true}) {
      const auto q = shapejit::rt::quantize_run_inputs(std::span(&io, 1), signed_codes);
      for (int64_t r = 0; r < m; ++r) {
        CAPTURE(k);
        CAPTURE(r);
        std::vector<int8_t> want(static_cast<size_t>(k));
        shapejit::ref::InputRowError error;
        const shapejit::ref::InputRowQuant rq = shapejit::ref::quantize_input_row(&x[size_t(r * k)], k, want.data(), error);
        REQUIRE(error == shapejit::ref::InputRowError::kNone);
        REQUIRE(q[0].scale[r] == rq.scale);
        REQUIRE(q[0].zero[r] == rq.zero + 128);
        const uint8_t* u = q[0].u + r * q[0].ldu;
        for (int64_t c = 0; c < k; ++c) {
          const float d = x[size_t(r * k + c)] / rq.scale;
          near_half += !signed_codes && std::fabs(d - std::nearbyint(d)) >= 0.5f - 0x1p-13f;
          REQUIRE(int(u[c]) == ((int(want[size_t(c)]) + 128) ^ (signed_codes ? 0x80 : 0)));
        }
        for (int64_t c = k; c < q[0].ldu; ++c) REQUIRE(u[c] == 0);
        checked += k;
      }
    }
  }
  MESSAGE(checked << " codes checked, " << near_half << " quotients within 2^-13 of a half step");
  CHECK(near_half > 1000);  // the rows above do reach the cases a reciprocal gets wrong
  // The first bad row of a block is named, whichever kind comes first (NaN, or a range that
  // overflows), in the widths with their own code and in others.
  for (const int64_t k : {16, 32, 13}) {
    const int64_t m = 11;
    std::vector<float> x(size_t(m * k), 0.5f);
    std::vector<float> y(1);
    const shapejit_linear_group_io io{x.data(), m, k, k, y.data(), 1, 0, 0};
    auto first_bad = [&]() -> std::string {
      try {
        shapejit::rt::quantize_run_inputs(std::span(&io, 1));
      } catch (const shapejit::Error& e) {
        return e.what();
      }
      return "no error";
    };
    CAPTURE(k);
    x[size_t(9 * k + 5)] = std::numeric_limits<float>::quiet_NaN();
    x[size_t(10 * k)] = -std::numeric_limits<float>::infinity();
    CHECK(first_bad().find("row 9 holds NaN at column 5") != std::string::npos);
    x[size_t(3 * k + 1)] = 3e38f, x[size_t(3 * k + k - 1)] = -3e38f;  // overflows before the NaN
    CHECK(first_bad().find("row 3: its max - min overflows") != std::string::npos);
    x[size_t(2 * k + k - 1)] = std::numeric_limits<float>::quiet_NaN();  // a NaN before the overflow
    CHECK(first_bad().find("row 2 holds NaN at column " + std::to_string(k - 1)) != std::string::npos);
  }
}

// The input rows' last value right before a PROT_NONE page: the x86 rows read their tails with
// masked loads, which must not touch what lies past x[k - 1] (a fault ends the test). qemu-user
// (7.2) emulates an x86 masked load by reading every lane, masked or not, so under it the test
// would only show the emulator's fault: it reports itself skipped there.
TEST_CASE("quantized linear: input rows ending at a guard page quantize without reading past them") {
#if defined(__x86_64__)
  if (std::getenv("SHAPEJIT_UNDER_EMULATOR") != nullptr) {  // set by tests/CMakeLists.txt for qemu runs
    MESSAGE("SKIPPED under an emulator: qemu-user's x86 masked loads read the masked-out lanes too");
    return;
  }
#endif
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* map = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(map != MAP_FAILED);
  unsigned char* base = static_cast<unsigned char*>(map);
  REQUIRE(mprotect(base + 2 * page, page, PROT_NONE) == 0);
  std::mt19937_64 rng(test_seed(0x6A7D));
  for (const int64_t k : {1, 5, 13, 16, 17, 32, 33}) {
    const int64_t m = 9;
    float* x = reinterpret_cast<float*>(base + 2 * page) - m * k;
    for (int64_t i = 0; i < m * k; ++i) x[i] = draw(rng, 2.0f);
    std::vector<float> y(1);
    const shapejit_linear_group_io io{x, m, k, k, y.data(), 1, 0, 0};
    const auto q = shapejit::rt::quantize_run_inputs(std::span(&io, 1));
    for (int64_t r = 0; r < m; ++r) {
      std::vector<int8_t> want(static_cast<size_t>(k));
      shapejit::ref::InputRowError error;
      const shapejit::ref::InputRowQuant rq = shapejit::ref::quantize_input_row(x + r * k, k, want.data(), error);
      CHECK(q[0].scale[r] == rq.scale);
      for (int64_t c = 0; c < k; ++c) CHECK(int(q[0].u[r * q[0].ldu + c]) == int(want[size_t(c)]) + 128);
    }
    std::vector<uint8_t> u(size_t(shapejit::rt::quantized_row_bytes(k)));
    float scale = 0;
    int32_t zero = 0;
    CHECK(shapejit::rt::quantize_input_row(x + (m - 1) * k, k, u.data(), &scale, &zero));
  }
  munmap(map, 3 * page);
}

TEST_CASE("quantized linear: the accumulator of the kernels' form equals the exact sum") {
  // sum u * c - x_zero * colsum(c) (what the kernels compute) against sum (q - z) * c, at the
  // largest magnitudes the K limit allows.
  const int64_t k = shapejit::ref::kQd8MaxK;
  std::vector<int8_t> q(size_t(k), -128), c(size_t(k), -128 + 1);
  const int32_t z = 127;
  const int64_t acc = shapejit::ref::qd8_accumulator(q.data(), z, c.data(), k);
  CHECK(acc == int64_t(k) * (-255) * (-127));
  CHECK(acc < (int64_t(1) << 31));
  int64_t via_u = 0, colsum = 0;
  for (int64_t i = 0; i < k; ++i) via_u += int64_t(q[size_t(i)] + 128) * c[size_t(i)], colsum += c[size_t(i)];
  CHECK(via_u - int64_t(z + 128) * colsum == acc);
}

// ---- Random groups of every call form -----------------------------------------------------

struct Input {
  std::vector<float> x;
  int64_t m = 0, k = 0, ldx = 0;
};

struct RandomGroup {
  shapejit_linear_quant quant = SHAPEJIT_LINEAR_QD8_QC8W;
  bool packed = true, given_codes = false;
  std::vector<float> weight;                 // packed [rows, K] (stride K + 1)
  std::vector<std::vector<float>> part_w;    // separate
  std::vector<float> bias;
  std::vector<shapejit_linear_part_desc> parts;
  std::vector<std::vector<int8_t>> codes;    // given codes, one per entry
  std::vector<std::vector<float>> scales;
  std::vector<shapejit_linear_weight_codes> code_entries;
  shapejit_linear_group_ex_desc ex{};
  std::vector<Input> inputs;
  std::vector<int> input_of;                 // part -> input
  std::string what;
};

// Builds a random group: `shape` 0 self (packed, one input), 1 cross (q from one input, k and v
// from another), 2 distinct k/v (three inputs), 3 kdim/vdim (separate, K per part), 4 random.
RandomGroup random_group(std::mt19937_64& rng, shapejit_linear_quant quant, int shape, bool given_codes) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  RandomGroup g;
  g.quant = quant;
  g.given_codes = given_codes;
  const int num_parts = shape == 4 ? int(uni(1, 3)) : 3;
  g.packed = shape != 3 && !(shape == 4 && uni(0, 1));
  const int64_t K = uni(1, 150) | (shapejit::ref::quant_int4(quant) ? 1 : 0);  // odd K for int4
  std::vector<int64_t> rows(static_cast<size_t>(num_parts)), ks(size_t(num_parts), K);
  int64_t total = 0;
  for (int p = 0; p < num_parts; ++p) {
    rows[size_t(p)] = uni(1, 70);
    if (!g.packed) ks[size_t(p)] = uni(1, 120);
    total += rows[size_t(p)];
  }
  const bool bias = uni(0, 3) != 0;
  if (bias) {
    g.bias.resize(size_t(total));
    for (float& b : g.bias) b = draw(rng, 2.0f);
  }
  // Inputs: which part reads which.
  int num_inputs = shape == 0 ? 1 : shape == 1 ? 2 : 3;
  if (shape == 4) num_inputs = int(uni(1, num_parts));
  g.input_of.resize(size_t(num_parts));
  for (int p = 0; p < num_parts; ++p)
    g.input_of[size_t(p)] = shape == 0 ? 0 : shape == 1 ? (p == 0 ? 0 : 1) : shape == 4 ? int(uni(0, num_inputs - 1)) : p;
  if (!g.packed)  // parts of different K cannot share an input
    for (int p = 0; p < num_parts; ++p) g.input_of[size_t(p)] = p, num_inputs = num_parts;
  {  // number the inputs by first use, so every one is read by some part
    std::vector<int> renumber(3, -1);
    num_inputs = 0;
    for (int& i : g.input_of) {
      if (renumber[size_t(i)] < 0) renumber[size_t(i)] = num_inputs++;
      i = renumber[size_t(i)];
    }
  }
  const int64_t ms[] = {0, 1, 2, 5, 8, 9, 17, 33, 64, 131, 300};
  g.inputs.resize(size_t(num_inputs));
  for (int i = 0; i < num_inputs; ++i) {
    Input& in = g.inputs[size_t(i)];
    in.m = ms[uni(0, 10)];
    int p0 = 0;
    while (g.input_of[size_t(p0)] != i) ++p0;
    in.k = ks[size_t(p0)];
    in.ldx = in.k + uni(0, 3);
    in.x.assign(size_t(std::max<int64_t>(1, in.m * in.ldx)), 0.0f);
    const float mag = float(uni(1, 4));
    for (int64_t r = 0; r < in.m; ++r)
      for (int64_t c = 0; c < in.k; ++c) in.x[size_t(r * in.ldx + c)] = draw(rng, mag) + (r % 3 == 0 ? 1.5f : 0.0f);
  }
  // Weights (f32; quantized at build time, or quantized here by the reference and given as codes).
  int64_t row0 = 0;
  for (int p = 0; p < num_parts; ++p) {
    shapejit_linear_part_desc d{};
    d.row_begin = row0;
    d.rows = rows[size_t(p)];
    d.activation = shapejit_activation(uni(0, 4));
    const int s = int(uni(0, 3));
    d.has_scale = s != 0;
    d.scale = s == 1 ? 0.125f : s == 2 ? -0.5f : 1.0f;
    d.layout = shapejit_layout(uni(0, 2));
    if (d.layout != SHAPEJIT_LAYOUT_ROW_MAJOR) {
      std::vector<int64_t> divisors;
      for (int64_t h = 1; h <= d.rows; ++h)
        if (d.rows % h == 0) divisors.push_back(h);
      d.heads = divisors[size_t(uni(0, int64_t(divisors.size()) - 1))];
    }
    if (!g.packed) d.k = ks[size_t(p)], d.weight_stride = ks[size_t(p)] + 1;
    g.parts.push_back(d);
    row0 += d.rows;
  }
  if (g.packed) {
    g.weight.resize(size_t(total * (K + 1)), 99.0f);
    for (int64_t r = 0; r < total; ++r)
      for (int64_t c = 0; c < K; ++c) g.weight[size_t(r * (K + 1) + c)] = r % 11 == 3 ? 0.0f : draw(rng, 0.3f);
  } else {
    for (int p = 0; p < num_parts; ++p) {
      std::vector<float> w(size_t(rows[size_t(p)] * (ks[size_t(p)] + 1)), 99.0f);
      for (int64_t r = 0; r < rows[size_t(p)]; ++r)
        for (int64_t c = 0; c < ks[size_t(p)]; ++c) w[size_t(r * (ks[size_t(p)] + 1) + c)] = draw(rng, 0.3f);
      g.part_w.push_back(std::move(w));
    }
  }
  shapejit_linear_group_desc desc{};
  desc.form = g.packed ? SHAPEJIT_WEIGHTS_PACKED : SHAPEJIT_WEIGHTS_SEPARATE;
  if (g.packed) desc.weight = g.weight.data(), desc.weight_rows = total, desc.k = K, desc.weight_stride = K + 1;
  else
    for (int p = 0; p < num_parts; ++p) g.parts[size_t(p)].weight = g.part_w[size_t(p)].data();
  desc.bias = bias ? g.bias.data() : nullptr;
  desc.bias_len = bias ? total : 0;
  desc.parts = g.parts.data();
  desc.num_parts = num_parts;
  shapejit_linear_group_ex_init(&g.ex, &desc);
  g.ex.quant = quant;
  if (given_codes) {
    // Codes of the reference's quantizer, in a strided matrix; int4 entries also take -8.
    auto quantize = [&](const float* w, int64_t n, int64_t k, int64_t ldw) {
      std::vector<int8_t> c(size_t(n * (k + 2)), 0);
      std::vector<float> s(static_cast<size_t>(n));
      for (int64_t r = 0; r < n; ++r)
        REQUIRE(shapejit::ref::quantize_weight_row(quant, w + r * ldw, k, c.data() + r * (k + 2), &s[size_t(r)]) == -1);
      if (shapejit::ref::quant_int4(quant)) c[0] = -8;
      g.codes.push_back(std::move(c));
      g.scales.push_back(std::move(s));
      g.code_entries.push_back({g.codes.back().data(), k + 2, g.scales.back().data()});
    };
    g.codes.reserve(size_t(num_parts));
    g.scales.reserve(size_t(num_parts));
    if (g.packed) {
      quantize(g.weight.data(), total, K, K + 1);
      g.ex.group.weight = nullptr;
    } else {
      for (int p = 0; p < num_parts; ++p) {
        quantize(g.part_w[size_t(p)].data(), rows[size_t(p)], ks[size_t(p)], ks[size_t(p)] + 1);
        g.parts[size_t(p)].weight = nullptr;
      }
    }
    g.ex.codes = g.code_entries.data();
    g.ex.num_codes = int64_t(g.code_entries.size());
  }
  const char* shapes[] = {"self", "cross", "distinct k/v", "kdim/vdim", "random"};
  g.what = std::string(form_name(quant)) + " " + shapes[shape] + (given_codes ? " codes" : "") + " K=" +
           std::to_string(K) + " parts=" + std::to_string(num_parts);
  return g;
}

// The f32 weights of part p ([n, k] rows ldw apart).
const float* part_weight(const RandomGroup& g, int64_t p, int64_t& ldw) {
  const shapejit_linear_part_desc& d = g.parts[size_t(p)];
  if (g.packed) {
    ldw = g.ex.group.k + 1;
    return g.weight.data() + d.row_begin * ldw;
  }
  ldw = d.k + 1;
  return g.part_w[size_t(p)].data();
}

struct ErrorStats {
  double worst_ratio = 0;  // max |y - f32| / bound
  double worst_abs = 0;
  int64_t outputs = 0;
};

// Builds g, runs it through the C ABI and checks every output against the reference.
void check_group(RandomGroup& g, ErrorStats& stats) {
  CAPTURE(g.what);
  shapejit_linear_group* handle = nullptr;
  REQUIRE_MESSAGE(shapejit_linear_group_create_ex(&g.ex, &handle) == SHAPEJIT_OK, shapejit_last_error());
  const int64_t num_parts = g.ex.group.num_parts;
  std::vector<std::vector<float>> ys(static_cast<size_t>(num_parts));
  std::vector<shapejit_linear_group_io> io(static_cast<size_t>(num_parts));
  for (int64_t p = 0; p < num_parts; ++p) {
    const shapejit_linear_part_desc& d = g.parts[size_t(p)];
    const Input& in = g.inputs[size_t(g.input_of[size_t(p)])];
    shapejit_linear_group_io& e = io[size_t(p)];
    e.x = in.x.data(), e.m = in.m, e.k = in.k, e.ldx = in.ldx;
    e.ldy = d.rows + 1;
    // Head-split: a batch dividing m.
    int64_t batch = 1;
    for (int64_t b : {3, 2, 1})
      if (in.m % b == 0) { batch = b; break; }
    e.batch = batch, e.seq_len = batch ? in.m / batch : 0;
    ys[size_t(p)].assign(size_t(std::max<int64_t>(1, in.m * (d.rows + 1))), sentinel());
    e.y = ys[size_t(p)].data();
  }
  REQUIRE_MESSAGE(shapejit_linear_group_run(handle, io.data(), num_parts) == SHAPEJIT_OK, shapejit_last_error());

  for (int64_t p = 0; p < num_parts; ++p) {
    const shapejit_linear_part_desc& d = g.parts[size_t(p)];
    shapejit::ref::QuantPartView v;
    v.f = shapejit::ref::resolve_part(g.ex.group, p, io[size_t(p)]);
    v.quant = g.quant;
    // The reference's own codes: from its quantizer, or the given ones.
    std::vector<int8_t> codes(size_t(d.rows * io[size_t(p)].k));
    std::vector<float> scales(size_t(d.rows));
    int64_t ldw = 0;
    const float* w = part_weight(g, p, ldw);
    if (g.given_codes) {
      const shapejit_linear_weight_codes& e = g.code_entries[size_t(g.packed ? 0 : p)];
      const int64_t r0 = g.packed ? d.row_begin : 0;
      for (int64_t r = 0; r < d.rows; ++r) {
        std::copy_n(e.codes + (r0 + r) * e.stride, io[size_t(p)].k, codes.data() + r * io[size_t(p)].k);
        scales[size_t(r)] = e.scales[r0 + r];
      }
    } else {
      for (int64_t r = 0; r < d.rows; ++r)
        shapejit::ref::quantize_weight_row(g.quant, w + r * ldw, io[size_t(p)].k, codes.data() + r * io[size_t(p)].k,
                                           &scales[size_t(r)]);
    }
    v.codes = codes.data(), v.ldc = io[size_t(p)].k, v.wscale = scales.data();
    // The f32 view of the same part, for the quantization error.
    shapejit::ref::LinearPartView f32 = v.f;
    f32.w = w, f32.ldw = ldw;
    const bool bitwise = shapejit::ref::quant_input(g.quant) &&
                         (d.activation == SHAPEJIT_ACTIVATION_NONE || d.activation == SHAPEJIT_ACTIVATION_RELU);
    std::vector<int8_t> q(size_t(io[size_t(p)].k));
    for (int64_t r = 0; r < io[size_t(p)].m; ++r) {
      shapejit::ref::InputRowError err;
      const shapejit::ref::InputRowQuant rq = shapejit::ref::quantize_input_row(
          io[size_t(p)].x + r * io[size_t(p)].ldx, io[size_t(p)].k, q.data(), err);
      for (int64_t c = 0; c < d.rows; ++c) {
        const float y = ys[size_t(p)][size_t(shapejit::ref::output_offset(v.f, r, c))];
        const shapejit::ref::ElementRef want = shapejit::ref::quant_reference_element(v, r, c);
        CAPTURE(p);
        CAPTURE(r);
        CAPTURE(c);
        CAPTURE(y);
        CAPTURE(want.value);
        CAPTURE(want.bound);
        if (bitwise) REQUIRE(std::memcmp(&y, &want.value, 4) == 0);
        else REQUIRE(shapejit::ref::accepted(y, want.value, want.bound));
        if (shapejit::ref::quant_input(g.quant) && d.activation == SHAPEJIT_ACTIVATION_NONE && !d.has_scale) {
          // Within the documented bound of the double-precision epilogue on the exact accumulator.
          const int64_t acc =
              shapejit::ref::qd8_accumulator(q.data(), rq.zero, codes.data() + c * io[size_t(p)].k, io[size_t(p)].k);
          const shapejit::ref::DoubleEpilogue dd = shapejit::ref::qd8_double_epilogue(
              int32_t(acc), rq.scale, scales[size_t(c)], v.f.bias ? v.f.bias + c : nullptr);
          REQUIRE(std::fabs(double(y) - dd.value) <= dd.bound);
        }
        if (!g.given_codes || !shapejit::ref::quant_int4(g.quant)) {
          // The quantization error against the f32 product stays within the bound of the scales.
          const shapejit::ref::ElementRef exact = shapejit::ref::reference_element(f32, r, c);
          const double bound = shapejit::ref::quantization_bound(v, w, ldw, r, c) + exact.bound;
          const double err = std::fabs(double(y) - double(exact.value));
          REQUIRE(err <= bound);
          stats.worst_ratio = std::max(stats.worst_ratio, bound > 0 ? err / bound : 0.0);
          stats.worst_abs = std::max(stats.worst_abs, err);
          ++stats.outputs;
        }
      }
    }
    // Untouched past each row-major row's N columns (ldy = N + 1) and past m rows.
    if (d.layout == SHAPEJIT_LAYOUT_ROW_MAJOR)
      for (int64_t r = 0; r < io[size_t(p)].m; ++r) {
        const float t = ys[size_t(p)][size_t(r * (d.rows + 1) + d.rows)];
        CHECK(std::memcmp(&t, &kSentinelBits, 4) == 0);
      }
  }
  shapejit_linear_group_destroy(handle);
}

TEST_CASE("quantized linear: random groups of every call form against the reference") {
  const uint64_t seed = test_seed(0x9A11);
  std::mt19937_64 rng(seed);
  CAPTURE(seed);
  for (shapejit_linear_quant q : kQuantForms) {
    ErrorStats stats;
    for (int shape = 0; shape < 5; ++shape)
      for (int given = 0; given < 2; ++given) {
        RandomGroup g = random_group(rng, q, shape, given == 1);
        check_group(g, stats);
      }
    MESSAGE(std::string(form_name(q)) << ": " << stats.outputs << " outputs, largest error against f32 " << stats.worst_abs
                         << ", at most " << stats.worst_ratio << " of the quantization bound");
  }
}

TEST_CASE("quantized linear: parts sharing an input share one quantization per run") {
  std::vector<float> a(6 * 10), b(6 * 10);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3.0f, b[i] = a[i];
  std::vector<float> y(1);
  const shapejit_linear_group_io io[4] = {
      {a.data(), 6, 10, 10, y.data(), 1, 0, 0},
      {a.data(), 6, 10, 10, y.data(), 1, 0, 0},  // the same input: shares
      {b.data(), 6, 10, 10, y.data(), 1, 0, 0},  // equal values, another pointer: its own
      {a.data(), 5, 10, 10, y.data(), 1, 0, 0},  // fewer rows: its own
  };
  const auto q = shapejit::rt::quantize_run_inputs(io);
  REQUIRE(q.size() == 4);
  CHECK(q[0].u == q[1].u);
  CHECK(q[0].scale == q[1].scale);
  CHECK(q[2].u != q[0].u);
  CHECK(q[3].u != q[0].u);
  CHECK(std::memcmp(q[0].u, q[2].u, size_t(6 * q[0].ldu)) == 0);
  CHECK(q[0].ldu == 16);
  CHECK_FALSE(q[0].signed_codes);
  // Signed (for kernels that read q, jit::gemm_signed_input): each code's top bit flipped, the
  // padding still zero.
  const std::vector<uint8_t> biased(q[0].u, q[0].u + 6 * q[0].ldu);
  const auto s = shapejit::rt::quantize_run_inputs(std::span(io, 1), true);
  REQUIRE(s[0].signed_codes);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < s[0].ldu; ++c)
      CHECK(int(s[0].u[r * s[0].ldu + c]) == (c < 10 ? biased[size_t(r * 16 + c)] ^ 0x80 : 0));
}

TEST_CASE("quantized linear: a group without a generator for its form runs the reference, counted") {
  shapejit_kernel_cache_stats before{}, after{};
  REQUIRE(shapejit_get_kernel_cache_stats_sized(&before, sizeof before) == SHAPEJIT_OK);
  std::vector<float> w(12 * 20, 0.25f);
  shapejit_linear_part_desc part{};
  part.rows = 12;
  shapejit_linear_group_desc desc{SHAPEJIT_WEIGHTS_PACKED, w.data(), 12, 20, 20, nullptr, 0, &part, 1};
  shapejit_linear_group_ex_desc ex;
  shapejit_linear_group_ex_init(&ex, &desc);
  ex.quant = SHAPEJIT_LINEAR_QD8_QC8W;
  shapejit_linear_group* handle = nullptr;
  REQUIRE(shapejit_linear_group_create_ex(&ex, &handle) == SHAPEJIT_OK);
  REQUIRE(shapejit_get_kernel_cache_stats_sized(&after, sizeof after) == SHAPEJIT_OK);
  // Decided once, when built: packed panels (a generator took the form) or the reference.
  const bool packed = !handle->packed.parts.empty();
  CHECK(after.reference_linear_groups - before.reference_linear_groups == (packed ? 0 : 1));
  std::vector<float> x(3 * 20, 1.0f), y(3 * 12, 0.0f);
  const shapejit_linear_group_io io{x.data(), 3, 20, 20, y.data(), 12, 0, 0};
  REQUIRE(shapejit_linear_group_run(handle, &io, 1) == SHAPEJIT_OK);
  for (float v : y) CHECK(std::fabs(v - 5.0f) <= 1e-5f);  // x = 1 and w = 0.25 are both on their grids: 20 * 0.25
  shapejit_linear_group_destroy(handle);
}

TEST_CASE("quantized linear: the C++ API builds every form and quantize_linear_weights matches the C ABI") {
  const int64_t n = 5, k = 9;
  std::vector<float> w(size_t(n * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 9) - 4) * 0.1f;
  std::vector<float> bias(size_t(n), 0.5f);
  std::vector<float> x(size_t(2 * k), 1.0f), y(size_t(2 * n)), y2(size_t(2 * n));
  for (shapejit_linear_quant q : kQuantForms) {
    CAPTURE(form_name(q));
    std::vector<int8_t> codes(size_t(n * k)), codes_c(size_t(n * k));
    std::vector<float> scales(static_cast<size_t>(n)), scales_c(static_cast<size_t>(n));
    shapejit::quantize_linear_weights(shapejit::LinearQuant(q), w.data(), n, k, 0, codes.data(), scales.data());
    REQUIRE(shapejit_linear_quantize_weights(q, w.data(), n, k, k, codes_c.data(), scales_c.data()) == SHAPEJIT_OK);
    CHECK(codes == codes_c);
    CHECK(scales == scales_c);
    shapejit::LinearPart part;
    part.rows = n;
    shapejit::LinearGroupDesc from_f32 = shapejit::LinearGroupDesc::packed(w.data(), n, k, bias, {part});
    from_f32.quant = shapejit::LinearQuant(q);
    shapejit::LinearGroupDesc from_codes = shapejit::LinearGroupDesc::packed(nullptr, n, k, bias, {part});
    from_codes.quant = shapejit::LinearQuant(q);
    from_codes.codes = {{codes.data(), 0, scales.data()}};
    const shapejit::LinearGroup a(from_f32), b(from_codes);
    const shapejit::LinearInput in{x.data(), 2, k, 0};
    a.run(std::span(&in, 1), std::vector<shapejit::LinearOutput>{{y.data(), 0, 0, 0}});
    b.run(std::span(&in, 1), std::vector<shapejit::LinearOutput>{{y2.data(), 0, 0, 0}});
    CHECK(y == y2);  // the same codes either way
  }
}

// ---- Validation: every new rule, outputs and *out untouched ---------------------------------

struct ValidationFixture {
  std::vector<float> w = std::vector<float>(6 * 8, 0.5f);
  std::vector<float> bias = std::vector<float>(6, 0.0f);
  shapejit_linear_part_desc parts[2]{};
  std::vector<int8_t> codes = std::vector<int8_t>(6 * 8, 1);
  std::vector<float> scales = std::vector<float>(6, 0.1f);
  shapejit_linear_weight_codes entry{};
  shapejit_linear_group_ex_desc ex{};

  ValidationFixture() {
    parts[0].rows = 3;
    parts[1].row_begin = 3, parts[1].rows = 3;
    const shapejit_linear_group_desc g{SHAPEJIT_WEIGHTS_PACKED, w.data(), 6, 8, 8, bias.data(), 6, parts, 2};
    shapejit_linear_group_ex_init(&ex, &g);
    ex.quant = SHAPEJIT_LINEAR_QD8_QC8W;
    entry = {codes.data(), 8, scales.data()};
  }
  void use_codes() {
    ex.group.weight = nullptr;
    ex.codes = &entry;
    ex.num_codes = 1;
  }
};

void expect_create_error(const shapejit_linear_group_ex_desc& ex, const std::string& needle) {
  CAPTURE(needle);
  shapejit_linear_group* const untouched = reinterpret_cast<shapejit_linear_group*>(uintptr_t(0x1234));
  shapejit_linear_group* out = untouched;
  CHECK(shapejit_linear_group_create_ex(&ex, &out) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(out == untouched);
  const std::string msg = shapejit_last_error();
  CAPTURE(msg);
  CHECK(msg.find(needle) != std::string::npos);
}

TEST_CASE("quantized linear: build-time validation names the argument, value and rule") {
  {
    ValidationFixture f;
    f.ex.struct_size = 8;
    expect_create_error(f.ex, "desc.struct_size = 8");
  }
  {
    ValidationFixture f;
    std::memset(&f.ex.quant, 0, sizeof f.ex.quant);
    const int bad = 9;
    std::memcpy(&f.ex.quant, &bad, sizeof bad);
    expect_create_error(f.ex, "desc.quant = 9 is not a linear-group form");
  }
  {
    ValidationFixture f;
    f.ex.quant = SHAPEJIT_LINEAR_F32;
    f.ex.codes = &f.entry;
    f.ex.num_codes = 1;
    expect_create_error(f.ex, "but desc.quant is f32");
  }
  {
    ValidationFixture f;
    f.ex.num_codes = 1;
    expect_create_error(f.ex, "desc.num_codes = 1 but desc.codes is NULL");
  }
  {
    ValidationFixture f;
    f.w[13] = std::numeric_limits<float>::infinity();
    expect_create_error(f.ex, "desc.weight[1, 5] = inf is not finite");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.ex.group.weight = f.w.data();
    expect_create_error(f.ex, "must be NULL when the weights are given as codes");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.ex.num_codes = 2;
    expect_create_error(f.ex, "desc.num_codes = 2 but the packed form takes 1 entry");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.entry.stride = 7;
    expect_create_error(f.ex, "desc.codes[0].stride = 7 is less than K = 8");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.entry.codes = nullptr;
    expect_create_error(f.ex, "desc.codes[0].codes is NULL");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.entry.scales = nullptr;
    expect_create_error(f.ex, "desc.codes[0].scales is NULL");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.codes[2 * 8 + 3] = -128;
    expect_create_error(f.ex, "desc.codes[0].codes[2, 3] = -128 is outside [-127, 127]");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.ex.quant = SHAPEJIT_LINEAR_F32_QC4W;
    f.codes[9] = 8;
    expect_create_error(f.ex, "desc.codes[0].codes[1, 1] = 8 is outside [-8, 7]");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.scales[4] = -0.5f;
    expect_create_error(f.ex, "desc.codes[0].scales[4] = -0.5 must be finite and >= 0");
  }
  {
    ValidationFixture f;
    f.use_codes();
    f.scales[0] = std::numeric_limits<float>::quiet_NaN();
    expect_create_error(f.ex, "desc.codes[0].scales[0] = nan must be finite");
  }
  {
    // Separate form: one entry per part, each part's weight NULL.
    ValidationFixture f;
    shapejit_linear_part_desc sep[2] = {f.parts[0], f.parts[1]};
    sep[0].k = 8, sep[1].k = 8, sep[1].row_begin = 3;
    f.ex.group = {SHAPEJIT_WEIGHTS_SEPARATE, nullptr, 0, 0, 0, f.bias.data(), 6, sep, 2};
    shapejit_linear_weight_codes entries[2] = {f.entry, f.entry};
    f.ex.codes = entries;
    f.ex.num_codes = 1;
    expect_create_error(f.ex, "desc.num_codes = 1 but the separate form takes 2 entries");
    f.ex.num_codes = 2;
    sep[1].weight = f.w.data();
    expect_create_error(f.ex, "desc.parts[1].weight = ");
    sep[1].weight = nullptr;
    shapejit_linear_group* out = nullptr;
    REQUIRE(shapejit_linear_group_create_ex(&f.ex, &out) == SHAPEJIT_OK);
    shapejit_linear_group_destroy(out);
  }
  {
    // qd8: K above 65536 is rejected naming the part's k; the weight-only forms take it.
    ValidationFixture f;
    std::vector<float> big(size_t(65537), 0.0f);
    shapejit_linear_part_desc part{};
    part.rows = 1;
    f.ex.group = {SHAPEJIT_WEIGHTS_PACKED, big.data(), 1, 65537, 65537, nullptr, 0, &part, 1};
    expect_create_error(f.ex, "desc.parts[0].k = 65537 exceeds 65536");
    f.ex.quant = SHAPEJIT_LINEAR_F32_QC8W;
    shapejit_linear_group* out = nullptr;
    CHECK(shapejit_linear_group_create_ex(&f.ex, &out) == SHAPEJIT_OK);
    shapejit_linear_group_destroy(out);
  }
}

TEST_CASE("quantized linear: quantize_weights validation leaves codes and scales untouched") {
  std::vector<float> w(4 * 5, 1.0f);
  std::vector<int8_t> codes(20, 42);
  std::vector<float> scales(4, 7.0f);
  auto expect = [&](shapejit_status status, const std::string& needle) {
    CAPTURE(needle);
    CHECK(status == SHAPEJIT_INVALID_ARGUMENT);
    CHECK(std::string(shapejit_last_error()).find(needle) != std::string::npos);
    CHECK(std::all_of(codes.begin(), codes.end(), [](int8_t c) { return c == 42; }));
    CHECK(std::all_of(scales.begin(), scales.end(), [](float s) { return s == 7.0f; }));
  };
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_F32, w.data(), 4, 5, 5, codes.data(), scales.data()),
         "quant = 0 is not a quantized form");
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_QD8_QC8W, w.data(), -1, 5, 5, codes.data(), scales.data()),
         "rows = -1 must be >= 0");
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_QD8_QC8W, w.data(), 4, 0, 5, codes.data(), scales.data()),
         "k = 0 must be >= 1");
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_QD8_QC8W, w.data(), 4, 5, 4, codes.data(), scales.data()),
         "stride = 4 is less than k = 5");
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_QD8_QC8W, nullptr, 4, 5, 5, codes.data(), scales.data()),
         "w is NULL");
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_QD8_QC8W, w.data(), 4, 5, 5, nullptr, scales.data()),
         "codes is NULL");
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_QD8_QC8W, w.data(), 4, 5, 5, codes.data(), nullptr),
         "scales is NULL");
  w[17] = -std::numeric_limits<float>::infinity();
  expect(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_F32_QC4W, w.data(), 4, 5, 5, codes.data(), scales.data()),
         "w[3, 2] = -inf is not finite");
  CHECK(shapejit_linear_quantize_weights(SHAPEJIT_LINEAR_F32_QC4W, nullptr, 0, 5, 5, nullptr, nullptr) == SHAPEJIT_OK);
}

TEST_CASE("quantized linear: a non-finite qd8 input row fails the run before any output is written") {
  ValidationFixture f;
  shapejit_linear_group* handle = nullptr;
  REQUIRE(shapejit_linear_group_create_ex(&f.ex, &handle) == SHAPEJIT_OK);
  std::vector<float> x(4 * 8, 1.0f), x2(2 * 8, 1.0f);
  x2[1 * 8 + 6] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y0(4 * 3, sentinel()), y1(2 * 3, sentinel());
  shapejit_linear_group_io io[2] = {{x.data(), 4, 8, 8, y0.data(), 3, 0, 0}, {x2.data(), 2, 8, 8, y1.data(), 3, 0, 0}};
  CHECK(shapejit_linear_group_run(handle, io, 2) == SHAPEJIT_INVALID_ARGUMENT);
  const std::string msg = shapejit_last_error();
  CAPTURE(msg);
  CHECK(msg.find("io[1].x row 1 holds NaN at column 6") != std::string::npos);
  CHECK(all_sentinel(y0));
  CHECK(all_sentinel(y1));
  x2[1 * 8 + 6] = 3e38f, x2[1 * 8 + 7] = -3e38f;
  CHECK(shapejit_linear_group_run(handle, io, 2) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("io[1].x row 1: its max - min overflows") != std::string::npos);
  CHECK(all_sentinel(y0));
  // The weight-only forms take any input (NaN propagates, as in the f32 group).
  shapejit_linear_group_destroy(handle);
  f.ex.quant = SHAPEJIT_LINEAR_F32_QC8W;
  REQUIRE(shapejit_linear_group_create_ex(&f.ex, &handle) == SHAPEJIT_OK);
  CHECK(shapejit_linear_group_run(handle, io, 2) == SHAPEJIT_OK);
  CHECK(std::isnan(y1[0]) == false);
  shapejit_linear_group_destroy(handle);
}

}  // namespace

namespace {

TEST_CASE("quantized linear: large inputs quantize in parallel, with the serial bits and the first bad row") {
  const int64_t m = 700, k = 203;
  std::vector<float> x(size_t(m * k));
  std::mt19937_64 rng(test_seed(0xB16));
  for (float& v : x) v = draw(rng, 3.0f);
  std::vector<float> y(1);
  const shapejit_linear_group_io io{x.data(), m, k, k, y.data(), 1, 0, 0};
  auto snapshot = [&] {
    const auto q = shapejit::rt::quantize_run_inputs(std::span(&io, 1));
    std::vector<uint8_t> bytes(q[0].u, q[0].u + m * q[0].ldu);
    std::vector<float> scales(q[0].scale, q[0].scale + m);
    std::vector<int32_t> zeros(q[0].zero, q[0].zero + m);
    return std::tuple(bytes, scales, zeros);
  };
  REQUIRE(shapejit_set_num_threads(1) == SHAPEJIT_OK);
  const auto serial = snapshot();
  REQUIRE(shapejit_set_num_threads(2) == SHAPEJIT_OK);
  CHECK(snapshot() == serial);
  // Two bad rows in different tasks: the message names the first.
  x[size_t(650 * k + 3)] = std::numeric_limits<float>::infinity();
  x[size_t(40 * k + 100)] = -std::numeric_limits<float>::infinity();
  try {
    shapejit::rt::quantize_run_inputs(std::span(&io, 1));
    FAIL("no error");
  } catch (const shapejit::Error& e) {
    CHECK(std::string(e.what()).find("io[0].x row 40 holds -inf at column 100") != std::string::npos);
  }
  shapejit_set_num_threads(0);
}

}  // namespace
