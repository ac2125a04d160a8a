// Linear-group JIT (packing, microkernels, driver) against the double-precision reference, with
// the acceptance bound of split-gemm-semantics.md (ref::reference_element / ref::accepted):
// random groups (M 0..300 with 1..8 often, K and N off the vector width and tile, K per part,
// every activation and layout, bias or not, scale, shared and separate inputs), each run on one
// and on two engine threads, which must agree bit for bit. Outputs sit in sentinel-filled
// buffers: every byte the part does not own must stay untouched. Seeded: the seed is printed and
// SHAPEJIT_TEST_SEED replays a run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "jit/gemm_kernel.hpp"
#include "ref/linear_group.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/linear_group/linear_group_exec.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "support/embag_cases.hpp"
#include "support/gemm_refusal.hpp"
#include "support/host_isas.hpp"
#include "support/k_split_kernels.hpp"

namespace {

using shapejit::jit::GemmKey;
using shapejit::jit::Isa;
using shapejit::rt::LinearPartPlan;
using Rng = std::mt19937_64;

using shapejit::test::host_has;

constexpr uint32_t kSentinelBits = 0x7FA5A5A5u;  // a NaN payload no kernel produces

float sentinel() {
  float f;
  std::memcpy(&f, &kSentinelBits, 4);
  return f;
}

bool is_sentinel(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b == kSentinelBits;
}

int64_t pick(Rng& rng, std::initializer_list<int64_t> v) {
  return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
}

int64_t uniform(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

std::vector<int64_t> divisors(int64_t v) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= v; ++i)
    if (v % i == 0) d.push_back(i);
  return d;
}

// One part of a case: its weights and epilogue, and its run arguments.
struct PartSpec {
  int64_t n = 1, k = 1, ldw = 1;
  int64_t w_off = 0;   // first float of W_p in Case::weights
  int64_t b_off = -1;  // first float of b_p in Case::bias, or -1
  shapejit_activation act = SHAPEJIT_ACTIVATION_NONE;
  float scale = 1.0f;
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t heads = 1;
  int input = 0;       // index into Case::inputs
  int64_t ldy = 0, batch = 0;
};

struct Input {
  std::vector<float> x;
  int64_t m = 0, k = 0, ldx = 0;
};

struct Case {
  std::vector<PartSpec> parts;
  std::vector<Input> inputs;
  std::vector<float> weights, bias;
  std::string text;  // printed on failure
};

float random_value(Rng& rng, bool specials, float magnitude = 1.0f) {
  if (specials && uniform(rng, 0, 199) == 0) {
    const float s[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
    return s[uniform(rng, 0, 4)];
  }
  return std::uniform_real_distribution<float>(-magnitude, magnitude)(rng);
}

// Shapes off the vector widths (8, 16) and the panel widths (16, 48) on purpose.
Case make_case(Rng& rng, int64_t number, bool specials) {
  Case c;
  const int64_t parts = uniform(rng, 1, 4);
  const bool shared = uniform(rng, 0, 2) == 0;  // F1: all parts read one input
  const bool packed = uniform(rng, 0, 1) == 0;  // rows of one weight (same K) or separate
  const bool decode = uniform(rng, 0, 2) == 0;
  const int64_t k_all = pick(rng, {1, 3, 7, 16, 17, 31, 33, 48, 64, 100, 129, 257});
  // Inputs of magnitude 4 drive the activations far into their tails (and exp past overflow).
  const float magnitude = uniform(rng, 0, 3) == 0 ? 4.0f : 1.0f;
  int64_t budget = 4'000'000;  // multiply-adds per case, to bound the reference's time
  for (int64_t p = 0; p < parts; ++p) {
    PartSpec s;
    s.k = packed || shared ? k_all : pick(rng, {1, 5, 8, 12, 16, 23, 40, 65, 96, 130});
    s.n = pick(rng, {1, 2, 7, 8, 15, 16, 17, 24, 32, 40, 47, 48, 49, 63, 64, 80, 96, 97, 100, 144, 150, 200});
    s.act = static_cast<shapejit_activation>(uniform(rng, 0, 4));
    s.scale = pick(rng, {0, 1, 2}) == 0 ? 1.0f : pick(rng, {0, 1}) ? 0.125f : -1.75f;
    s.layout = static_cast<shapejit_layout>(uniform(rng, 0, 2));
    if (s.layout != SHAPEJIT_LAYOUT_ROW_MAJOR) {
      const std::vector<int64_t> d = divisors(s.n);
      s.heads = d[size_t(uniform(rng, 0, int64_t(d.size()) - 1))];
    }
    s.input = shared ? 0 : int(p);
    c.parts.push_back(s);
  }
  // Inputs: M 0..300, often 1..8 (decode) and 0.
  const size_t num_inputs = shared ? 1 : size_t(parts);
  for (size_t i = 0; i < num_inputs; ++i) {
    Input in;
    in.k = c.parts[shared ? 0 : i].k;
    in.m = decode ? uniform(rng, 1, 8) : pick(rng, {0, 1, 3, 9, 13, 17, 40, 64, 100, 129, 300});
    int64_t n_sum = 0;
    for (const PartSpec& s : c.parts)
      if (s.input == int(i)) n_sum += s.n;
    while (in.m > 1 && in.m * in.k * n_sum > budget / int64_t(num_inputs)) in.m /= 2;
    in.ldx = in.k + pick(rng, {0, 0, 1, 5, 16});
    in.x.resize(size_t(std::max<int64_t>(in.m * in.ldx, 1)));
    for (float& v : in.x) v = random_value(rng, specials, magnitude);
    c.inputs.push_back(in);
  }
  for (PartSpec& s : c.parts) {
    const int64_t m = c.inputs[size_t(s.input)].m;
    s.ldy = s.n + pick(rng, {0, 0, 1, 3, 17});
    if (s.layout != SHAPEJIT_LAYOUT_ROW_MAJOR) {
      const std::vector<int64_t> d = divisors(std::max<int64_t>(m, 1));
      s.batch = d[size_t(uniform(rng, 0, int64_t(d.size()) - 1))];
    }
  }
  // Weights: packed form = one [sum n, K] buffer with a row stride; else one buffer per part.
  const int64_t ld_packed = k_all + pick(rng, {0, 3});
  for (PartSpec& s : c.parts) {
    s.ldw = packed ? ld_packed : s.k + pick(rng, {0, 2});
    s.w_off = int64_t(c.weights.size());
    c.weights.resize(c.weights.size() + size_t(s.n * s.ldw));
  }
  for (float& v : c.weights) v = random_value(rng, specials, magnitude);
  const bool has_bias = uniform(rng, 0, 3) != 0;
  for (PartSpec& s : c.parts) {
    if (!has_bias) continue;
    s.b_off = int64_t(c.bias.size());
    for (int64_t j = 0; j < s.n; ++j) c.bias.push_back(random_value(rng, specials));
  }

  std::ostringstream os;
  os << "case #" << number << " magnitude " << magnitude << (shared ? " shared-input" : "") << (packed ? " packed" : " separate") << ":";
  for (const PartSpec& s : c.parts) {
    const Input& in = c.inputs[size_t(s.input)];
    os << " [m" << in.m << " k" << s.k << " ldx" << in.ldx << " n" << s.n << " act" << int(s.act) << " scale"
       << s.scale << (s.b_off >= 0 ? " bias" : "") << " layout" << int(s.layout) << " heads" << s.heads
       << " batch" << s.batch << " ldy" << s.ldy << "]";
  }
  c.text = os.str();
  return c;
}

// The part as the reference sees it.
shapejit::ref::LinearPartView view_of(const Case& c, const PartSpec& s, float* y) {
  const Input& in = c.inputs[size_t(s.input)];
  shapejit::ref::LinearPartView v;
  v.x = in.x.data();
  v.m = in.m;
  v.k = s.k;
  v.ldx = in.ldx;
  v.w = c.weights.data() + s.w_off;
  v.n = s.n;
  v.ldw = s.ldw;
  v.bias = s.b_off >= 0 ? c.bias.data() + s.b_off : nullptr;
  v.activation = s.act;
  v.scale = s.scale;
  v.layout = s.layout;
  v.heads = s.heads;
  v.batch = s.batch;
  v.y = y;
  v.ldy = s.ldy;
  return v;
}

int64_t output_floats(const Case& c, const PartSpec& s) {
  const int64_t m = c.inputs[size_t(s.input)].m;
  const int64_t body = s.layout == SHAPEJIT_LAYOUT_ROW_MAJOR ? (m > 0 ? (m - 1) * s.ldy + s.n : 0) : m * s.n;
  return body + 37;  // a tail of sentinels after the last element
}

// Runs the case on `threads` engine threads; returns every part's output buffer.
std::vector<std::vector<float>> run_case(const Case& c, const shapejit::rt::PackedGroup& g, int threads) {
  std::vector<std::vector<float>> out;
  std::vector<shapejit_linear_group_io> io;
  for (const PartSpec& s : c.parts) out.emplace_back(size_t(output_floats(c, s)), sentinel());
  for (size_t p = 0; p < c.parts.size(); ++p) {
    const PartSpec& s = c.parts[p];
    const Input& in = c.inputs[size_t(s.input)];
    io.push_back({in.x.data(), in.m, in.k, in.ldx, out[p].data(), s.ldy, s.batch, s.batch > 0 ? in.m / s.batch : 0});
  }
  // One thread takes the default path (small calls part by part), two threads the blocked,
  // parallel path even for small calls: both must give the same bits.
  shapejit::rt::set_engine_threads(threads);
  shapejit::rt::LinearExecOptions options;
  if (threads > 1) options.inline_flops = 0;
  shapejit::rt::run_packed_group(g, io, options);
  shapejit::rt::set_engine_threads(0);
  return out;
}

shapejit::rt::PackedGroup pack_case(const Case& c, Isa isa) {
  std::vector<LinearPartPlan> w;
  for (const PartSpec& s : c.parts)
    w.push_back({c.weights.data() + s.w_off, s.ldw, s.n, s.k, s.b_off >= 0 ? c.bias.data() + s.b_off : nullptr,
                 s.act, s.scale, s.layout, s.heads});
  return shapejit::rt::pack_linear_group(w, isa);
}

// Checks one part's output against the reference; returns the number of failures (the first
// few are reported with their element).
int check_part(const Case& c, size_t p, const std::vector<float>& y) {
  const PartSpec& s = c.parts[p];
  const shapejit::ref::LinearPartView v = view_of(c, s, nullptr);
  std::vector<char> owned(y.size(), 0);
  int failures = 0;
  for (int64_t r = 0; r < v.m; ++r)
    for (int64_t col = 0; col < v.n; ++col) {
      const int64_t at = shapejit::ref::output_offset(v, r, col);
      owned[size_t(at)] = 1;
      const shapejit::ref::ElementRef e = shapejit::ref::reference_element(v, r, col);
      if (shapejit::ref::accepted(y[size_t(at)], e.value, e.bound)) continue;
      if (++failures <= 3)
        FAIL_CHECK(c.text << ": part " << p << " Y[" << r << ", " << col << "] = " << y[size_t(at)] << ", reference "
                          << e.value << " +- " << e.bound);
    }
  for (size_t i = 0; i < y.size(); ++i)
    if (!owned[i] && !is_sentinel(y[i]) && ++failures <= 3)
      FAIL_CHECK(c.text << ": part " << p << " wrote float " << i << " outside its output");
  return failures;
}

void run_battery(Isa isa, uint64_t seed, int64_t cases, bool specials) {
  int64_t checked = 0;
  for (int64_t i = 0; i < cases; ++i) {
    Rng rng(seed ^ (uint64_t(i) * 0x9E3779B97F4A7C15ull) ^ (specials ? 0x5bd1e995u : 0u));
    const Case c = make_case(rng, i, specials);
    CAPTURE(c.text);
    const shapejit::rt::PackedGroup g = pack_case(c, isa);
    const auto one = run_case(c, g, 1);
    const auto two = run_case(c, g, 2);
    for (size_t p = 0; p < c.parts.size(); ++p) {
      CHECK_MESSAGE(std::memcmp(one[p].data(), two[p].data(), one[p].size() * 4) == 0,
                    c.text << ": part " << p << " differs between 1 and 2 threads");
      if (check_part(c, p, one[p]) > 0) {
        std::string names;
        for (const GemmKey& k : g.keys()) names.append(1, ' ').append(k.name());
        MESSAGE("kernels:" << names << " (replay: SHAPEJIT_TEST_SEED=" << seed << ")");
      }
      const PartSpec& s = c.parts[p];
      checked += c.inputs[size_t(s.input)].m * s.n;
    }
  }
  MESSAGE(std::string(isa_name(isa)) << ": " << cases << " groups, " << checked << " elements checked");
}

uint64_t battery_seed() { return shapejit::test::test_seed(0x5eed'4a11'9e33ull); }

// Fixed groups: the seed's tiny shapes, decode with weights streamed past the caches, a padded
// input copy (rows aliasing in L1), and shared-input groups whose panel blocks span parts.
// An input of m rows of k values (no specials), ldx apart.
Input random_input(Rng& rng, int64_t m, int64_t k, int64_t ldx) {
  Input in;
  in.m = m, in.k = k, in.ldx = ldx;
  in.x.resize(size_t(m * ldx));
  for (float& v : in.x) v = random_value(rng, false);
  return in;
}

void run_fixed_shapes(Isa isa) {
  struct Shape {
    int64_t m, k, n, ldx, parts;
  };
  const Shape shapes[] = {{5, 16, 16, 16, 1},      {7, 16, 16, 16, 2},       {8, 1280, 100, 1280, 1},
                          {3, 1024, 1000, 1024, 1}, {130, 200, 700, 203, 1}, {1, 4096, 96, 4096, 1},
                          {2, 4096, 600, 4096, 1},  {50, 512, 300, 512, 3},  {8, 257, 1000, 260, 3}};
  Rng rng(battery_seed());
  for (const Shape& sh : shapes) {
    Case c;
    c.inputs.push_back(random_input(rng, sh.m, sh.k, sh.ldx));
    for (int64_t p = 0; p < sh.parts; ++p) {
      PartSpec s;
      s.n = sh.n, s.k = sh.k, s.ldw = sh.k, s.ldy = sh.n;
      s.w_off = int64_t(c.weights.size()), s.b_off = int64_t(c.bias.size());
      s.scale = p == 0 ? 0.125f : 1.0f;
      c.weights.resize(c.weights.size() + size_t(sh.n * sh.k));
      c.bias.resize(c.bias.size() + size_t(sh.n));
      c.parts.push_back(s);
    }
    for (float& v : c.weights) v = random_value(rng, false);
    for (float& v : c.bias) v = random_value(rng, false);
    c.text = "fixed m" + std::to_string(sh.m) + " k" + std::to_string(sh.k) + " n" + std::to_string(sh.n) + " x" +
             std::to_string(sh.parts);
    CAPTURE(c.text);
    const shapejit::rt::PackedGroup g = pack_case(c, isa);
    const auto one = run_case(c, g, 1);
    const auto two = run_case(c, g, 2);
    for (size_t p = 0; p < c.parts.size(); ++p) {
      CHECK(std::memcmp(one[p].data(), two[p].data(), one[p].size() * 4) == 0);
      CHECK(check_part(c, p, one[p]) == 0);
    }
  }
}

// k-split kernels (GemmKey::k_split) swapped into packed groups: the runtime picks them only for
// streamed f32 parts where the ISA measured a gain (jit::gemm_stream_split), but every x86 key
// may name one, so each split the registers allow runs here on small parts (K off every span
// and step, tails, table stores, every epilogue) against the reference bound.
void run_k_split_shapes(Isa isa) {
  struct Shape {
    int64_t m, k, n, ldx;
    shapejit_layout layout;
    int64_t heads;
  };
  const Shape shapes[] = {{1, 300, 40, 300, SHAPEJIT_LAYOUT_ROW_MAJOR, 1},
                          {2, 1031, 37, 1031, SHAPEJIT_LAYOUT_ROW_MAJOR, 1},
                          {3, 517, 64, 520, SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST, 4},
                          {1, 4099, 23, 4099, SHAPEJIT_LAYOUT_ROW_MAJOR, 1}};
  Rng rng(battery_seed() ^ 0x6b73);
  int64_t kernels = 0;
  for (const Shape& sh : shapes)
    for (int split = 2; split <= 8; ++split) {
      Case c;
      c.inputs.push_back(random_input(rng, sh.m, sh.k, sh.ldx));
      PartSpec s;
      s.n = sh.n, s.k = sh.k, s.ldw = sh.k, s.ldy = sh.n, s.layout = sh.layout, s.heads = sh.heads, s.batch = sh.m;
      s.b_off = split % 2 ? 0 : -1;
      s.act = static_cast<shapejit_activation>(split % 5);
      s.scale = split % 3 ? 1.0f : -0.5f;
      c.parts.push_back(s);
      c.weights.resize(size_t(sh.n * sh.k));
      c.bias.resize(size_t(sh.n));
      for (float& v : c.weights) v = random_value(rng, false);
      for (float& v : c.bias) v = random_value(rng, false);
      shapejit::rt::PackedGroup g = pack_case(c, isa);
      kernels += shapejit::test::use_k_split(g, split);
      std::string names;
      for (const GemmKey& key : g.keys())
        if (key.k_split > 1) names.append(1, ' ').append(key.name());
      c.text = "k_split " + std::to_string(split) + " m" + std::to_string(sh.m) + " k" + std::to_string(sh.k) +
               " n" + std::to_string(sh.n) + ":" + names;
      CAPTURE(c.text);
      const auto one = run_case(c, g, 1);
      const auto two = run_case(c, g, 2);
      CHECK(std::memcmp(one[0].data(), two[0].data(), one[0].size() * 4) == 0);
      CHECK(check_part(c, 0, one[0]) == 0);
    }
  MESSAGE(std::string(isa_name(isa)) << ": " << kernels << " k-split kernels checked");
  CHECK(kernels > 0);
}

}  // namespace

TEST_CASE("gemm key: canonical names round-trip and malformed names are rejected") {
  GemmKey k;
  k.isa = Isa::kAvx2, k.mr = 6, k.nc = 13, k.k = 768, k.bias = true, k.act = shapejit::Activation::kGeluTanh;
  k.scale = true, k.store = shapejit::jit::GemmStore::kTable, k.prefetch = 8192;
  CHECK(k.name() == "gemm.avx2.6x13.k768.bias.gelu_tanh.scale.tab.pf8192");
  REQUIRE(shapejit::jit::parse_gemm_key(k.name()).has_value());
  CHECK(*shapejit::jit::parse_gemm_key(k.name()) == k);
  CHECK(GemmKey{}.name() == "gemm.avx512.8x48.k1");
  for (const char* bad : {"gemm.avx512.8x48", "gemm.avx512.8x48.k0", "gemm.avx512.8x048.k5", "gemm.sse.8x48.k5",
                          "gemm.avx512.8x48.k5.scale.bias", "gemm.avx512.8x48.k5.relu.relu", "embag.avx512.8x48.k5"})
    CHECK_MESSAGE(!shapejit::jit::parse_gemm_key(bad).has_value(), bad);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kAvx512, 3) == 8);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kAvx2, 2) == 6);
  k.k_split = 4, k.prefetch = 0;
  CHECK(k.name() == "gemm.avx2.6x13.k768.bias.gelu_tanh.scale.tab.ks4");
  REQUIRE(shapejit::jit::parse_gemm_key(k.name()).has_value());
  CHECK(*shapejit::jit::parse_gemm_key(k.name()) == k);
  for (const char* bad : {"gemm.avx2.1x16.k768.ks1", "gemm.avx2.1x16.k768.ks", "gemm.avx2.1x16.k768.ks4.pf64"})
    CHECK_MESSAGE(!shapejit::jit::parse_gemm_key(bad).has_value(), bad);
}

TEST_CASE("gemm key: streamed parts' k split follows the ISA, the form and the register budget") {
  using shapejit::jit::gemm_stream_split;
  GemmKey k;
  k.isa = Isa::kAvx2, k.mr = 1, k.nc = 16, k.k = 4096;
  CHECK(gemm_stream_split(k) == shapejit::jit::isa_traits(Isa::kAvx2).gemm_stream_split);
  k.mr = 6;  // 12 accumulators fill AVX2's budget: no room for a second set
  CHECK(gemm_stream_split(k) == 1);
  k.mr = 1, k.k = 100;  // spans shorter than 64 k
  CHECK(gemm_stream_split(k) == 1);
  k.k = 4096, k.quant = shapejit::jit::GemmQuant::kQd8Qc8w;
  CHECK(gemm_stream_split(k) == 1);
  k.quant = shapejit::jit::GemmQuant::kF32, k.isa = Isa::kNeon, k.nc = 16;
  CHECK(gemm_stream_split(k) == 1);
  // What the generators refuse: a split past the registers, a K without one step per span, NEON.
  using shapejit::test::gemm_key_refused;
  const auto refused = [](const GemmKey& key, asmjit::Arch arch) { return gemm_key_refused(key, arch); };
  GemmKey x;
  x.isa = Isa::kAvx2, x.mr = 1, x.nc = 16, x.k = 64, x.k_split = 6;
  CHECK_FALSE(refused(x, asmjit::Arch::kX64));
  x.k_split = 7;  // 14 accumulators
  CHECK(refused(x, asmjit::Arch::kX64));
  x.k_split = 4, x.k = 3;
  CHECK(refused(x, asmjit::Arch::kX64));
  x.k_split = 9, x.k = 4096;
  CHECK(refused(x, asmjit::Arch::kX64));
  x.isa = Isa::kNeon, x.k_split = 2;
  CHECK(refused(x, asmjit::Arch::kAArch64));
}

TEST_CASE("linear group jit: k-split kernels on every x86 ISA against the reference" *
          doctest::skip(!host_has(Isa::kAvx2))) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    if (!host_has(isa)) {
      MESSAGE(isa_name(isa) << " SKIPPED: this host cannot run it");
      continue;
    }
    run_k_split_shapes(isa);
  }
}

TEST_CASE("linear group jit avx512: random groups vs the reference, 1 and 2 threads" *
          doctest::skip(!host_has(Isa::kAvx512))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  run_battery(Isa::kAvx512, battery_seed(), shapejit::test::test_case_count(150), false);
}

TEST_CASE("linear group jit avx2: random groups vs the reference, 1 and 2 threads" *
          doctest::skip(!host_has(Isa::kAvx2))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  run_battery(Isa::kAvx2, battery_seed(), shapejit::test::test_case_count(150), false);
}

TEST_CASE("linear group jit neon: random groups vs the reference, 1 and 2 threads" *
          doctest::skip(!host_has(Isa::kNeon))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  run_battery(Isa::kNeon, battery_seed(), shapejit::test::test_case_count(150), false);
}

TEST_CASE("linear group jit: NaN and infinities propagate through every epilogue" *
          doctest::skip(!host_has(Isa::kAvx2) && !host_has(Isa::kNeon))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon})
    if (host_has(isa)) run_battery(isa, battery_seed(), shapejit::test::test_case_count(20), true);
}

TEST_CASE("linear group jit: fixed shapes (tiny cross-attention, decode, panel blocks, padded input)" *
          doctest::skip(!host_has(Isa::kAvx2) && !host_has(Isa::kNeon))) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon})
    if (host_has(isa)) run_fixed_shapes(isa);
}
