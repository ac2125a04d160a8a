// Quantized GEMM microkernels (GemmQuant, jit/x86/gemm_quant_ops.hpp) called directly, against a
// scalar computation written here from the contract (jit/gemm_kernel.hpp, GemmKernelArgs; the
// rules of docs/quantized-linear-semantics.md):
//   qd8:  acc = sum_k (u - x_zero) * code exactly (int64 here, checked to fit in int32), then
//         f32(f32(float(acc) * f32(x_scale * wscale)) + bias): bitwise for none and relu; the
//         f32 group's bound (ref::reference_element of a one-term dot) for the other activations;
//   weight-only: acc = sum_k x * float(code) within the f32 group's bound (codes as weights),
//         then f32(f32(acc * wscale) + bias) and the activation, the bound carried through.
// Per variant (AVX2 and AVX-512BW without VNNI: int8 codes widened to 16 bits, int4 codes with
// vpmaddubsw; AVX-512 VNNI `dot`) on random keys: K off every group size (odd for int4), nc with
// tails, every mr up to gemm_max_mr, bias or not, every activation, scale, row-major and table
// stores, K in spans (k_split) or not. Inputs end at PROT_NONE pages (X rows readable exactly to
// gemm_padded_k bytes for qd8, K floats otherwise; the panels, scales and zero points), so a
// kernel reading past them faults; outputs sit in sentinels. Extreme codes (u = 0 and 255
// against codes -127/127 and -8/7, up to K = 65536) prove no step saturates. Variants the
// host cannot run are reported as skipped. SHAPEJIT_TEST_SEED replays a run;
// SHAPEJIT_QUANT_KERNEL_CASES sets the random keys per variant (default 400; fewer under Bochs).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <asmjit/x86.h>

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/gemm_quant_panel.hpp"
#include "jit/host_features.hpp"
#include "ref/linear_group.hpp"
#include "shapejit/shapejit.hpp"
#include "support/embag_jit_support.hpp"
#include "support/gemm_refusal.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::jit::GemmKernelArgs;
using shapejit::jit::GemmKey;
using shapejit::jit::GemmQuant;
using shapejit::jit::GemmStore;
using shapejit::jit::Isa;
using shapejit::test::embag_jit::PageEndArray;
using Rng = std::mt19937_64;

constexpr uint32_t kSentinelBits = 0x7FA5A5A5u;  // a NaN payload no kernel writes

int64_t uniform(Rng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
float uniform_f(Rng& rng, float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

uint64_t seed() {
  const char* s = std::getenv("SHAPEJIT_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
}

int cases_per_variant() {
  const char* s = std::getenv("SHAPEJIT_QUANT_KERNEL_CASES");
  return s ? std::max(1, std::atoi(s)) : 400;
}

// One kernel variant: an ISA and whether it uses the 4-way int8 dot product.
struct Variant {
  Isa isa;
  bool dot;
  std::string name() const { return std::string(shapejit::jit::isa_name(isa)) + (dot ? ".dot" : ""); }
  // Why this host cannot run it, or "".
  std::string skip_reason() const {
    if (!shapejit::test::host_has(isa)) return shapejit::test::host_unsupported_reason(isa);
    if (dot && !shapejit::jit::host_has_int8_dot(shapejit::jit::host_features(), isa)) return "host lacks avx512vnni";
    return "";
  }
};

const Variant kVariants[] = {{Isa::kAvx2, false}, {Isa::kAvx512, false}, {Isa::kAvx512, true}};

shapejit_activation to_c(shapejit::Activation a) { return static_cast<shapejit_activation>(a); }

// Everything one call needs, inputs at page ends.
struct Problem {
  GemmKey key;
  int64_t panels = 1;
  int64_t lda = 0;  // bytes
  std::vector<int8_t> codes;      // [panels * nc][k]
  std::vector<float> wscale, bias;  // [panels * nc]
  std::vector<uint8_t> u;         // qd8: [mr][kp]
  std::vector<int32_t> x_zero;    // qd8: [mr]
  std::vector<float> x_scale;     // qd8: [mr]
  std::vector<float> x;           // weight-only: [mr][k]
  float scale = 1.0f;
  int64_t ldc = 0;                 // floats, row-major
  std::vector<int64_t> row_off;    // table: bytes
  std::vector<int64_t> col_off;    // table: bytes, panels * nv

  bool qd8() const { return shapejit::jit::gemm_quantized_input(key.quant); }
  int64_t cols() const { return panels * key.nc; }
  std::string describe() const {
    std::ostringstream s;
    s << key.name() << " panels=" << panels << " lda=" << lda << " scale=" << scale;
    return s.str();
  }
};

int code_limit(GemmQuant q) { return shapejit::jit::gemm_int4_weights(q) ? 7 : 127; }
int code_min(GemmQuant q) { return shapejit::jit::gemm_int4_weights(q) ? -8 : -127; }

// Fills the data of p (key and panels already chosen). `extreme`: codes at the ends of their
// range and inputs at 0 or 255.
void make_data(Problem& p, Rng& rng, bool extreme) {
  const GemmKey& key = p.key;
  const int64_t k = key.k, kp = shapejit::jit::gemm_padded_k(key), cols = p.cols();
  p.codes.resize(size_t(cols * k));
  for (auto& c : p.codes) {
    const int lo = code_min(key.quant), hi = code_limit(key.quant);
    if (extreme) c = int8_t(rng() % 2 ? hi : (rng() % 2 ? lo : -hi));
    else c = int8_t(rng() % 5 == 0 ? (rng() % 2 ? hi : lo) : uniform(rng, lo, hi));
  }
  if (extreme && rng() % 2) std::fill(p.codes.begin(), p.codes.end(), int8_t(code_limit(key.quant)));
  p.wscale.resize(size_t(cols));
  p.bias.resize(size_t(cols));
  for (auto& s : p.wscale) s = rng() % 17 == 0 ? 0.0f : uniform_f(rng, 1e-4f, 0.05f);
  for (auto& b : p.bias) b = uniform_f(rng, -2.0f, 2.0f) + 1e-3f;  // never -0.0
  const int64_t mr = key.mr;
  if (p.qd8()) {
    p.lda = kp + uniform(rng, 0, 3) * (rng() % 2 ? 1 : 64);
    p.u.assign(size_t(mr * kp), 0);
    p.x_zero.resize(size_t(mr));
    p.x_scale.resize(size_t(mr));
    for (int64_t r = 0; r < mr; ++r) {
      for (int64_t kk = 0; kk < k; ++kk)
        p.u[size_t(r * kp + kk)] = extreme ? uint8_t(rng() % 2 ? 255 : 0) : uint8_t(rng() % 7 == 0 ? (rng() % 2) * 255 : uniform(rng, 0, 255));
      if (extreme && rng() % 2) std::fill(p.u.begin() + r * kp, p.u.begin() + r * kp + k, uint8_t(255));
      p.x_zero[size_t(r)] = int32_t(extreme ? (rng() % 2) * 255 : uniform(rng, 0, 255));
      p.x_scale[size_t(r)] = uniform_f(rng, 1e-3f, 0.1f);
    }
  } else {
    p.lda = (k + uniform(rng, 0, 5)) * 4;
    p.x.resize(size_t(mr * k));
    for (auto& v : p.x) v = uniform_f(rng, -1.0f, 1.0f);
  }
  p.scale = rng() % 2 ? uniform_f(rng, -2.0f, 2.0f) : 0.5f;
}

// The contract's value of Y[r, c] (global column c) and its bound (0: bitwise).
struct Expected {
  float value;
  double bound;
};

// ref::reference_element of a one-term dot pre * 1 with the key's activation and scale: the f32
// group's activation and scale and their bound.
shapejit::ref::ElementRef activated(const GemmKey& key, float pre, float scale) {
  const float one = 1.0f;
  shapejit::ref::LinearPartView v;
  v.x = &pre, v.m = 1, v.k = 1, v.ldx = 1;
  v.w = &one, v.n = 1, v.ldw = 1;
  v.activation = to_c(key.act);
  v.scale = key.scale ? scale : 1.0f;
  return shapejit::ref::reference_element(v, 0, 0);
}

Expected expected(const Problem& p, int64_t r, int64_t c) {
  const GemmKey& key = p.key;
  const int64_t k = key.k;
  const float b = key.bias ? p.bias[size_t(c)] : 0.0f;
  const int8_t* code = &p.codes[size_t(c * k)];
  if (p.qd8()) {
    const int64_t kp = shapejit::jit::gemm_padded_k(key);
    int64_t acc = 0;
    for (int64_t kk = 0; kk < k; ++kk) acc += (int64_t(p.u[size_t(r * kp + kk)]) - p.x_zero[size_t(r)]) * code[kk];
    REQUIRE(acc == int64_t(int32_t(acc)));
    const float s = p.x_scale[size_t(r)] * p.wscale[size_t(c)];
    float pre = float(int32_t(acc)) * s;
    if (key.bias) pre = pre + b;
    const bool exact = key.act == shapejit::Activation::kNone || key.act == shapejit::Activation::kRelu;
    if (exact) {  // computed here: the one-term dot below would turn a -0 pre-activation into +0
      const float act = shapejit::ref::activate(to_c(key.act), pre);
      return {key.scale ? act * p.scale : act, 0.0};
    }
    const shapejit::ref::ElementRef e = activated(key, pre, p.scale);
    return {e.value, e.bound};
  }
  // Weight-only: the f32 dot within the f32 group's bound (act none, scale 1), then the
  // contract's epilogue in f32, each rounding adding one ulp to what the activation receives.
  std::vector<float> w(static_cast<size_t>(k));
  for (int64_t kk = 0; kk < k; ++kk) w[size_t(kk)] = float(code[kk]);
  shapejit::ref::LinearPartView v;
  v.x = &p.x[size_t(r * k)], v.m = 1, v.k = k, v.ldx = k;
  v.w = w.data(), v.n = 1, v.ldw = k;
  const shapejit::ref::ElementRef dot = shapejit::ref::reference_element(v, 0, 0);
  const float ws = p.wscale[size_t(c)];
  const float scaled = dot.value * ws;
  const float pre = key.bias ? scaled + b : scaled;
  auto ulp = [](float f) { return double(std::nextafter(std::fabs(f), INFINITY)) - double(std::fabs(f)); };
  const double pre_bound = dot.bound * double(ws) + 2 * ulp(scaled) + 2 * ulp(pre);
  const shapejit::ref::ElementRef e = activated(key, pre, p.scale);
  const double gain = shapejit::ref::activation_gain(to_c(key.act)) * (key.scale ? std::fabs(double(p.scale)) : 1.0);
  return {e.value, e.bound + gain * pre_bound};
}

// Generates, runs and checks p; returns "" or the first failure.
std::string run_and_check(Problem& p, asmjit::JitRuntime& rt) {
  const GemmKey& key = p.key;
  const auto gen = shapejit::jit::generate_gemm_kernel(key, rt);
  REQUIRE(static_cast<bool>(gen.fn));
  const int64_t mr = key.mr, nc = key.nc, nv = key.nv(), lanes = key.lanes(), k = key.k;
  const int64_t kp = shapejit::jit::gemm_padded_k(key), cols = p.cols();
  // Panels, written by the one panel writer, ending at a protected page.
  const int64_t pb = shapejit::jit::gemm_panel_bytes(key);
  PageEndArray<std::byte> panels(size_t(p.panels * pb));
  for (int64_t i = 0; i < p.panels; ++i)
    shapejit::jit::pack_quant_panel(key, &p.codes[size_t(i * nc * k)], k, nc, &p.wscale[size_t(i * nc)],
                                    &p.bias[size_t(i * nc)], panels.data() + i * pb);
  // X rows: the last one readable exactly to kp bytes (qd8) or k floats.
  const int64_t row_bytes = p.qd8() ? kp : k * 4;
  PageEndArray<std::byte> xmem(size_t((mr - 1) * p.lda + row_bytes));
  std::memset(xmem.data(), 0xEE, xmem.size());  // garbage between rows
  // Kernels that read the codes signed (gemm_signed_input) get q = u - 128: the top bit flipped.
  const std::byte flip{uint8_t(shapejit::jit::gemm_signed_input(key.isa, key.quant, key.dot) ? 0x80 : 0)};
  for (int64_t r = 0; r < mr; ++r) {
    if (p.qd8()) {
      std::memcpy(xmem.data() + r * p.lda, &p.u[size_t(r * kp)], size_t(kp));
      for (int64_t c = 0; c < kp; ++c) xmem.data()[r * p.lda + c] ^= flip;
    } else {
      std::memcpy(xmem.data() + r * p.lda, &p.x[size_t(r * k)], size_t(k * 4));
    }
  }
  PageEndArray<float> xs(static_cast<size_t>(mr));
  PageEndArray<std::byte> xz(size_t(mr * 4));
  if (p.qd8()) {
    std::memcpy(xs.data(), p.x_scale.data(), size_t(mr * 4));
    std::memcpy(xz.data(), p.x_zero.data(), size_t(mr * 4));
  }
  // Output in sentinels; table stores scatter the rows and the column vectors.
  const bool table = key.store == GemmStore::kTable;
  std::vector<float> out;
  std::vector<int64_t> row_off, col_off;
  const int64_t pad = 16;
  if (table) {
    const int64_t vecs = p.panels * nv;
    for (int64_t v = 0; v < vecs; ++v) col_off.push_back((v * 2 + 1) * lanes * 4);  // gaps between vectors
    for (int64_t r = 0; r < mr; ++r) row_off.push_back(int64_t(mr - 1 - r) * (vecs * 2 + 1) * lanes * 4);
    out.resize(size_t(mr * (vecs * 2 + 1) * lanes + pad));
  } else {
    p.ldc = cols + (cols % 3);
    out.resize(size_t((mr - 1) * p.ldc + cols + pad));
  }
  float sentinel;
  std::memcpy(&sentinel, &kSentinelBits, 4);
  std::fill(out.begin(), out.end(), sentinel);
  // Row offsets, then column offsets ending at a protected page.
  PageEndArray<std::byte> offs(std::max<size_t>(1, row_off.size() + col_off.size()) * 8);
  // (row-major stores have no tables: memcpy's pointers must not be null even for 0 bytes)
  if (!row_off.empty()) std::memcpy(offs.data(), row_off.data(), row_off.size() * 8);
  if (!col_off.empty()) std::memcpy(offs.data() + row_off.size() * 8, col_off.data(), col_off.size() * 8);
  const int64_t* row_off_mem = reinterpret_cast<const int64_t*>(offs.data());
  const int64_t* col_off_mem = reinterpret_cast<const int64_t*>(offs.data() + row_off.size() * 8);

  GemmKernelArgs args{};
  args.a = reinterpret_cast<const float*>(xmem.data());
  args.lda = p.lda;
  args.b = reinterpret_cast<const float*>(panels.data());
  args.panels = p.panels;
  args.c = out.data();
  args.ldc = p.ldc * 4;
  args.row_off = table ? row_off_mem : nullptr;
  args.col_off = table ? col_off_mem : nullptr;
  args.scale = p.scale;
  args.x_scale = p.qd8() ? xs.data() : nullptr;
  args.x_zero = p.qd8() ? reinterpret_cast<const int32_t*>(xz.data()) : nullptr;
  gen.fn(&args);
  shapejit::test::note_direct_run(key.isa);
  rt.release(gen.fn);

  std::vector<char> owned(out.size(), 0);
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t panel = c / nc, pc = c % nc;
      const int64_t at = table ? (row_off[size_t(r)] + col_off[size_t(panel * nv + pc / lanes)]) / 4 + pc % lanes
                               : r * p.ldc + c;
      owned[size_t(at)] = 1;
      const float y = out[size_t(at)];
      const Expected e = expected(p, r, c);
      uint32_t yb, eb;
      std::memcpy(&yb, &y, 4);
      std::memcpy(&eb, &e.value, 4);
      // Bitwise, except that relu of a -0 pre-activation (a negative sum times a zero scale) may
      // keep its sign, as the f32 kernels' vmaxps does (the reference writes +0).
      const bool relu_zero = key.act == shapejit::Activation::kRelu && y == 0.0f && e.value == 0.0f;
      const bool ok = e.bound == 0.0 ? (yb == eb || relu_zero) : shapejit::ref::accepted(y, e.value, e.bound);
      if (!ok) {
        std::ostringstream s;
        s << p.describe() << ": Y[" << r << ", " << c << "] = " << y << " (0x" << std::hex << yb << std::dec
          << "), expected " << e.value << " (0x" << std::hex << eb << std::dec << ") within " << e.bound;
        if (p.qd8())
          s << " (x_zero " << p.x_zero[size_t(r)] << ", x_scale " << p.x_scale[size_t(r)] << ", wscale "
            << p.wscale[size_t(c)] << ")";
        if (p.qd8()) {
          int64_t acc = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            acc += (int64_t(p.u[size_t(r * kp + kk)]) - p.x_zero[size_t(r)]) * p.codes[size_t(c * k + kk)];
          s << " acc " << acc;
        }
        return s.str();
      }
    }
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &out[i], 4);
    if (!owned[i] && b != kSentinelBits) return p.describe() + ": wrote float " + std::to_string(i) + " it does not own";
  }
  return "";
}

constexpr GemmQuant kForms[] = {GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w, GemmQuant::kF32Qc8w, GemmQuant::kF32Qc4w};

// A random key of `form` for the variant.
GemmKey random_key(Rng& rng, const Variant& v, GemmQuant form) {
  GemmKey key;
  key.isa = v.isa;
  key.quant = form;
  key.dot = v.dot;
  const int64_t lanes = key.lanes();
  const int nv_full = shapejit::jit::isa_traits(v.isa).gemm_panel_vectors;
  const int nv = int(uniform(rng, 1, nv_full));
  key.nc = int(rng() % 3 == 0 ? nv * lanes : uniform(rng, (nv - 1) * lanes + 1, nv * lanes));
  const int max_mr = shapejit::jit::gemm_max_mr(v.isa, key.nv(), form, v.dot);
  key.mr = int(uniform(rng, 1, max_mr));
  static const int64_t kSmall[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63};
  key.k = rng() % 2 ? kSmall[rng() % 14] : uniform(rng, 1, 700);
  key.bias = rng() % 2;
  key.act = static_cast<shapejit::Activation>(uniform(rng, 0, 4));
  if (rng() % 3 == 0) key.act = shapejit::Activation::kNone;
  key.scale = rng() % 3 == 0;
  key.store = (key.tail() == 0 && rng() % 3 == 0) ? GemmStore::kTable : GemmStore::kRowMajor;
  if (rng() % 5 == 0) key.prefetch = 256;
  // k split (GemmKey::k_split): the int32 sets of the qd8 forms are added as integers.
  const int splits = shapejit::jit::gemm_accumulator_budget(v.isa, key.nv(), form, v.dot) / (key.mr * key.nv());
  if (rng() % 4 == 0 && splits >= 2) {
    key.k_split = int(uniform(rng, 2, std::min(splits, 8)));
    key.k = std::max<int64_t>(key.k, 16 * key.k_split + uniform(rng, 0, 300));
  }
  return key;
}

}  // namespace

TEST_CASE("quantized GEMM kernels: random keys against the contract's scalar computation") {
  const uint64_t s = seed();
  MESSAGE("seed " << s << " (SHAPEJIT_TEST_SEED replays)");
  asmjit::JitRuntime rt;
  for (const Variant& v : kVariants) {
    if (const std::string why = v.skip_reason(); !why.empty()) {
      MESSAGE("variant " << v.name() << " SKIPPED: " << why);
      continue;
    }
    Rng rng(s ^ (uint64_t(v.isa) * 0x9E3779B97F4A7C15ull) ^ uint64_t(v.dot));
    int64_t runs = 0;
    const int n = cases_per_variant();
    for (int i = 0; i < n; ++i) {
      for (GemmQuant form : kForms) {
        if (v.dot && !shapejit::jit::gemm_quantized_input(form)) continue;
        Problem p;
        p.key = random_key(rng, v, form);
        p.panels = uniform(rng, 1, 3);
        make_data(p, rng, rng() % 8 == 0);
        const std::string err = run_and_check(p, rt);
        CAPTURE(i);
        REQUIRE_MESSAGE(err.empty(), err);
        ++runs;
      }
    }
    MESSAGE("variant " << v.name() << " executed " << runs << " random kernels");
  }
}

TEST_CASE("quantized GEMM kernels: extreme codes and inputs up to K = 65536 do not saturate") {
  Rng rng(seed());
  asmjit::JitRuntime rt;
  for (const Variant& v : kVariants) {
    if (const std::string why = v.skip_reason(); !why.empty()) {
      MESSAGE("variant " << v.name() << " SKIPPED: " << why);
      continue;
    }
    for (GemmQuant form : {GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w}) {
      for (int64_t k : {int64_t(3), int64_t(8), int64_t(257), int64_t(4099), int64_t(65536)}) {
        Problem p;
        p.key.isa = v.isa, p.key.quant = form, p.key.dot = v.dot, p.key.k = k;
        p.key.nc = int(p.key.lanes() * shapejit::jit::isa_traits(v.isa).gemm_panel_vectors) - 3;
        p.key.mr = shapejit::jit::gemm_max_mr(v.isa, p.key.nv(), form, v.dot);
        p.key.bias = true;
        make_data(p, rng, true);
        if (k == 65536) {  // the contract's largest K at its largest sum: every u 255, every code max
          std::fill(p.u.begin(), p.u.end(), uint8_t(255));
          std::fill(p.codes.begin(), p.codes.end(), int8_t(code_limit(form)));
          std::fill(p.x_zero.begin(), p.x_zero.end(), 0);
        }
        std::string err = run_and_check(p, rt);
        REQUIRE_MESSAGE(err.empty(), err);
        if (k != 65536) continue;
        // The same magnitude through negative signs: every u 0 (q = -128, the code AVX2's sign
        // step takes as |q| = 128), every code at its minimum, the zero point at its top.
        std::fill(p.u.begin(), p.u.end(), uint8_t(0));
        std::fill(p.codes.begin(), p.codes.end(), int8_t(code_min(form)));
        std::fill(p.x_zero.begin(), p.x_zero.end(), 255);
        err = run_and_check(p, rt);
        REQUIRE_MESSAGE(err.empty(), err);
      }
    }
    MESSAGE("variant " << v.name() << ": extreme cases pass");
  }
}

TEST_CASE("quantized GEMM kernels: tiles and what the x86 generator refuses") {
  using shapejit::jit::gemm_max_mr;
  // The tiles the packing gets from gemm_max_mr at the ISA's panel width.
  CHECK(gemm_max_mr(Isa::kAvx2, 2, GemmQuant::kQd8Qc8w, false) == 5);  // by sign: 3 temporaries
  CHECK(gemm_max_mr(Isa::kAvx2, 2, GemmQuant::kQd8Qc4w, false) == 4);
  CHECK(gemm_max_mr(Isa::kAvx2, 2, GemmQuant::kF32Qc8w, false) == 6);
  CHECK(gemm_max_mr(Isa::kAvx512, 3, GemmQuant::kQd8Qc8w, false) == 7);
  CHECK(gemm_max_mr(Isa::kAvx512, 3, GemmQuant::kQd8Qc8w, true) == 8);
  CHECK(gemm_max_mr(Isa::kAvx512, 3, GemmQuant::kQd8Qc4w, true) == 8);
  CHECK(gemm_max_mr(Isa::kAvx512, 3, GemmQuant::kF32Qc4w, false) == 8);

  auto refused = [](const GemmKey& key) { return shapejit::test::gemm_key_refused(key); };
  GemmKey key;
  key.isa = Isa::kAvx2, key.mr = 4, key.nc = 16, key.k = 64, key.quant = GemmQuant::kQd8Qc8w;
  CHECK_FALSE(refused(key));
  key.dot = true;  // AVX2 has no vpdpbusd
  CHECK(refused(key));
  key.dot = false, key.k = 65537;  // past the exact int32 accumulator
  CHECK(refused(key));
  key.k = 64, key.mr = 6;  // past the register budget of this form
  CHECK(refused(key));
  key.isa = Isa::kAvx512, key.mr = 8, key.nc = 48, key.quant = GemmQuant::kF32Qc8w, key.dot = true;
  CHECK(refused(key));  // dot is for the qd8 forms
}

TEST_CASE("quantized GEMM kernels: the f32 zero-point correction rounds the int32 accumulator's bits") {
  // AVX2 kernels whose k-loop sum fits 2^24 (gemm_x86_exact_f32_correction) subtract
  // x_zero * colsum with one FMA in f32; past the bound they keep vpmulld. At both sides of it,
  // with extreme codes and inputs (the k-loop sum at its largest, and accumulators past 2^24
  // whose f32 rounding is often a tie) and zero points all over [0, 255], every output must be
  // the contract's bit for bit (expected() rounds the exact int64 accumulator once).
  using shapejit::jit::gemm_x86_exact_f32_correction;
  GemmKey bound;
  bound.isa = Isa::kAvx2, bound.quant = GemmQuant::kQd8Qc8w, bound.k = 1032;
  CHECK(gemm_x86_exact_f32_correction(bound));  // 1032 * 128 * 127 <= 2^24
  bound.k = 1033;                                 // padded to 1036
  CHECK_FALSE(gemm_x86_exact_f32_correction(bound));
  bound.quant = GemmQuant::kQd8Qc4w, bound.k = 8224;  // 8224 * 255 * 8 <= 2^24
  CHECK(gemm_x86_exact_f32_correction(bound));
  bound.k = 8225;
  CHECK_FALSE(gemm_x86_exact_f32_correction(bound));
  bound.isa = Isa::kAvx512, bound.k = 16;
  CHECK_FALSE(gemm_x86_exact_f32_correction(bound));  // AVX-512 keeps its int32 correction

  const Variant& avx2 = kVariants[0];
  REQUIRE(avx2.isa == Isa::kAvx2);
  if (const std::string why = avx2.skip_reason(); !why.empty()) {
    MESSAGE("AVX2 SKIPPED: " << why);
    return;
  }
  Rng rng(seed() ^ 0xF3A);
  asmjit::JitRuntime rt;
  int64_t runs = 0;
  for (GemmQuant form : {GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w}) {
    const int64_t edge = form == GemmQuant::kQd8Qc8w ? 1032 : 8224;
    for (int64_t k : {int64_t(1), int64_t(16), edge - 5, edge - 1, edge, edge + 1, edge + 9})
      for (int trial = 0; trial < 6; ++trial) {
        Problem p;
        p.key.isa = Isa::kAvx2, p.key.quant = form, p.key.k = k;
        p.key.nc = int(uniform(rng, 1, 16));
        p.key.mr = int(uniform(rng, 1, shapejit::jit::gemm_max_mr(Isa::kAvx2, p.key.nv(), form, false)));
        p.key.bias = trial % 2 == 0;
        p.panels = uniform(rng, 1, 2);
        make_data(p, rng, true);
        for (auto& z : p.x_zero) z = int32_t(uniform(rng, 0, 255));
        if (trial < 2) {
          // The k loop's largest sum: by sign (int8 codes) every q = -128 (u = 0), with int4
          // codes every u = 255, against codes at their minimum; trial 1 makes it odd (its last
          // product odd), so past 2^24 it would not be exact in f32.
          const bool by_sign = form == GemmQuant::kQd8Qc8w;
          std::fill(p.u.begin(), p.u.end(), uint8_t(by_sign ? 0 : 255));
          std::fill(p.codes.begin(), p.codes.end(), int8_t(code_min(form)));
          if (trial == 1)
            for (int64_t r = 0; r < p.key.mr; ++r) {
              if (by_sign) p.u[size_t(r * shapejit::jit::gemm_padded_k(p.key) + k - 1)] = 255;  // q = 127
              else
                for (int64_t c = 0; c < p.cols(); ++c) p.codes[size_t(c * k + k - 1)] = 7;
            }
        }
        const std::string err = run_and_check(p, rt);
        REQUIRE_MESSAGE(err.empty(), err);
        ++runs;
      }
  }
  MESSAGE(runs << " kernels at the bound of the f32 correction");
}
