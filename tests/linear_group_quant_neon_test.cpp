// The AArch64 (NEON) kernels of the quantized GEMM forms (jit/a64/gemm_quant_ops.hpp) against
// a scalar computation written here from the contract (docs/quantized-linear-semantics.md,
// jit/gemm_kernel.hpp): on every host, the keys cross-emit within the register budget with the
// instructions of their variant (sdot for .dot, smlal without it, no fused multiply-add in a
// qd8 kernel) and objdump decodes the bytes; on AArch64 (natively or under qemu: QEMU_CPU=
// cortex-a72 has no dotprod, the default CPU has it), random keys run on panels written by
// pack_quant_panel, each buffer ending at a PROT_NONE page, and qd8 outputs with no activation
// or relu must equal the scalar computation bitwise (others: the f32 group's bound).
#include <doctest/doctest.h>

#include <asmjit/core.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(__aarch64__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "jit/gemm_quant_panel.hpp"
#include "jit/host_features.hpp"
#include "ref/linear_group.hpp"
#include "shapejit/shapejit.hpp"
#include "support/a64_support.hpp"
#include "support/embag_cases.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::Activation;
using shapejit::jit::GemmKey;
using shapejit::jit::GemmQuant;
using shapejit::jit::GemmStore;
using shapejit::jit::Isa;
using namespace shapejit::test::neon;

constexpr GemmQuant kForms[] = {GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w, GemmQuant::kF32Qc8w, GemmQuant::kF32Qc4w};

GemmKey qkey(GemmQuant quant, bool dot, int mr, int nc, int64_t k, bool bias = false,
             Activation act = Activation::kNone, bool scale = false, GemmStore store = GemmStore::kRowMajor,
             int prefetch = 0) {
  GemmKey key;
  key.isa = Isa::kNeon;
  key.quant = quant, key.dot = dot;
  key.mr = mr, key.nc = nc, key.k = k, key.bias = bias, key.act = act, key.scale = scale;
  key.store = store, key.prefetch = prefetch;
  return key;
}

shapejit::Status emit_status(const GemmKey& key) {
  try {
    asmjit::CodeHolder code;
    code.init(asmjit::Environment(asmjit::Arch::kAArch64));
    shapejit::jit::emit_gemm_kernel(key, code);
  } catch (const shapejit::Error& e) {
    return e.status();
  }
  return shapejit::Status::kOk;
}

}  // namespace

TEST_CASE("linear group quant neon: every form and variant emits at the largest mr of every width") {
  for (GemmQuant q : kForms)
    for (bool dot : {false, true}) {
      if (dot && !shapejit::jit::gemm_quantized_input(q)) continue;
      for (int nc : {1, 4, 7, 8, 12, 13, 16}) {
        const GemmKey probe = qkey(q, dot, 1, nc, 1);
        const int max_mr = shapejit::jit::gemm_max_mr(Isa::kNeon, probe.nv());
        for (Activation act : {Activation::kNone, Activation::kSilu}) {
          const GemmKey key = qkey(q, dot, max_mr, nc, 77, true, act, true);
          CAPTURE(key.name());
          CHECK(emit_status(key) == shapejit::Status::kOk);
        }
        CHECK(emit_status(qkey(q, dot, max_mr + 1, nc, 5)) == shapejit::Status::kUnsupported);
      }
    }
  // The dot variant is for the qd8 forms; qd8 keeps K <= 65536 (exact int32 accumulator).
  CHECK(emit_status(qkey(GemmQuant::kF32Qc8w, true, 1, 4, 8)) == shapejit::Status::kUnsupported);
  CHECK(emit_status(qkey(GemmQuant::kF32, true, 1, 4, 8)) == shapejit::Status::kUnsupported);
  CHECK(emit_status(qkey(GemmQuant::kQd8Qc8w, false, 1, 4, 65536)) == shapejit::Status::kOk);
  CHECK(emit_status(qkey(GemmQuant::kQd8Qc4w, true, 1, 4, 65537)) == shapejit::Status::kUnsupported);
  CHECK(emit_status(qkey(GemmQuant::kF32Qc4w, false, 1, 4, 65537)) == shapejit::Status::kOk);
  CHECK(emit_status(qkey(GemmQuant::kQd8Qc8w, true, 2, 14, 9, false, Activation::kNone, false, GemmStore::kTable)) ==
        shapejit::Status::kUnsupported);
}

TEST_CASE("linear group quant neon: cross-emitted kernels use their variant's instructions, qd8 without FMA") {
  struct Expect {
    GemmKey key;
    std::vector<std::string> present, absent;
  };
  const std::vector<Expect> cases{
      {qkey(GemmQuant::kQd8Qc8w, true, 5, 16, 768, true), {"sdot", "eor", "mls", "scvtf", "fmul", "fadd", "b.ne"},
       {"smlal", "fmla", "fmadd", "blr"}},
      {qkey(GemmQuant::kQd8Qc8w, false, 7, 9, 13, false, Activation::kRelu), {"tbl", "sxtl", "uxtl", "smlal", "smlal2", "mls", "fmax"},
       {"sdot", "fmla", "fadd"}},
      {qkey(GemmQuant::kQd8Qc4w, true, 3, 12, 40, true, Activation::kGelu, true, GemmStore::kTable, 4096),
       {"sdot", "shl", "sshr", "blr", "prfm"}, {"smlal", "fmla"}},
      {qkey(GemmQuant::kQd8Qc4w, false, 8, 5, 24, true), {"tbl", "shl", "sshr", "smlal2"}, {"sdot", "fmla"}},
      {qkey(GemmQuant::kF32Qc8w, false, 1, 16, 4096, true), {"sxtl", "sxtl2", "scvtf", "fmla", "fmul", "fadd", "b.ne"},
       {"sdot", "smlal"}},
      {qkey(GemmQuant::kF32Qc4w, false, 2, 11, 7, false, Activation::kSilu), {"shl", "sshr", "scvtf", "fmla", "blr"},
       {"sdot"}},
  };
  for (const Expect& e : cases) {
    CAPTURE(e.key.name());
    const Emitted out = emit_a64([&](asmjit::CodeHolder& code) { shapejit::jit::emit_gemm_kernel(e.key, code); });
    INFO("listing:\n" << out.listing);
    const std::vector<std::string> m = listing_mnemonics(out.listing);
    for (const std::string& p : e.present) CHECK_MESSAGE(has(m, p), "missing " << p);
    for (const std::string& a : e.absent) CHECK_MESSAGE(!has(m, a), "unexpected " << a);
    if (const auto decoded = objdump_a64(out.bytes)) {
      INFO("objdump:\n" << decoded->text);
      CHECK(decoded->words == out.bytes.size() / 4);
      CHECK(decoded->mnemonics == m);
    } else {
      MESSAGE("objdump comparison skipped: aarch64-linux-gnu-objdump not found (tools/install_deps.sh cross)");
    }
  }
}

#if defined(__aarch64__)

namespace {

// `bytes` bytes that end right before a PROT_NONE page: a read past them faults.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    pages_ = (bytes + page - 1) / page + 1;
    map_ = mmap(nullptr, pages_ * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(map_ != MAP_FAILED);
    REQUIRE(mprotect(static_cast<char*>(map_) + (pages_ - 1) * page, page, PROT_NONE) == 0);
    data_ = static_cast<char*>(map_) + (pages_ - 1) * page - bytes;
    page_ = page;
  }
  ~GuardedBytes() { munmap(map_, pages_ * page_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(data_); }

 private:
  void* map_ = nullptr;
  char* data_ = nullptr;
  size_t pages_ = 0, page_ = 0;
};

double ulp(float v) {
  const float a = std::fabs(v);
  if (!(a >= 1.17549435e-38f)) return std::ldexp(1.0, -149);
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

bool transcendental(Activation a) { return a != Activation::kNone && a != Activation::kRelu; }

shapejit_activation c_act(Activation a) { return static_cast<shapejit_activation>(static_cast<int>(a)); }

// How the codes and inputs of a case are drawn: at random, or all at the extremes that make
// |acc| largest (u = 255 against x_zero 0 and codes at the top of their range, and the mirror).
enum class Fill { kRandom, kExtremeHigh, kExtremeLow };

struct Variant {
  std::string name;
  int64_t runs = 0;
};

std::string variant_name(const GemmKey& key) {
  std::string n;
  switch (key.quant) {
    case GemmQuant::kQd8Qc8w: n = "qd8-qc8w"; break;
    case GemmQuant::kQd8Qc4w: n = "qd8-qc4w"; break;
    case GemmQuant::kF32Qc8w: n = "f32-qc8w"; break;
    case GemmQuant::kF32Qc4w: n = "f32-qc4w"; break;
    case GemmQuant::kF32: n = "f32"; break;
  }
  if (shapejit::jit::gemm_quantized_input(key.quant)) n += key.dot ? " .dot (sdot)" : " widening (smlal)";
  return n;
}

// One kernel call on `panels` panels; every element is compared with the contract's scalar
// computation (bitwise for qd8 with none/relu). Returns "" or the first mismatches.
std::string run_case(const GemmKey& key, int64_t panels, Fill fill, std::mt19937_64& rng) {
  namespace jit = shapejit::jit;
  const bool qd8 = jit::gemm_quantized_input(key.quant);
  const bool int4 = jit::gemm_int4_weights(key.quant);
  const int code_max = int4 ? 7 : 127, code_min = int4 ? -8 : -127;
  const int64_t k = key.k, kp = jit::gemm_padded_k(key), nc = key.nc, mr = key.mr;
  const int64_t ncols = panels * nc;
  auto uni = [&](double lo, double hi) { return lo + (hi - lo) * double(rng() >> 11) * 0x1p-53; };

  // Weights: codes [ncols, k], scales, bias.
  std::vector<int8_t> codes(static_cast<size_t>(ncols * k));
  for (int8_t& c : codes) {
    switch (fill) {
      case Fill::kRandom: c = int8_t(code_min + int(rng() % uint64_t(code_max - code_min + 1))); break;
      case Fill::kExtremeHigh: c = int8_t(code_max); break;
      case Fill::kExtremeLow: c = int8_t(rng() % 2 ? code_min : -code_max); break;
    }
  }
  std::vector<float> wscale(static_cast<size_t>(ncols)), bias(static_cast<size_t>(ncols));
  for (int64_t c = 0; c < ncols; ++c) {
    wscale[size_t(c)] = rng() % 16 == 0 ? 0.0f : float(uni(1e-3, 0.1));
    bias[size_t(c)] = float(uni(-2.0, 2.0));
  }
  const int64_t panel_bytes = jit::gemm_panel_bytes(key);
  GuardedBytes panel_mem(size_t(panels * panel_bytes));
  for (int64_t p = 0; p < panels; ++p)
    jit::pack_quant_panel(key, codes.data() + p * nc * k, k, nc, wscale.data() + p * nc, bias.data() + p * nc,
                          panel_mem.as<char>() + p * panel_bytes);

  // Inputs: rows `lda` bytes apart, the last one readable exactly to kp bytes (qd8) or k floats.
  const int64_t row_bytes = qd8 ? kp : k * 4;
  const int64_t lda = row_bytes + int64_t(rng() % 3) * (qd8 ? 1 : 4);
  GuardedBytes x_mem(size_t((mr - 1) * lda + row_bytes));
  GuardedBytes xs_mem(size_t(mr * 4)), xz_mem(size_t(mr * 4));
  auto* xs = xs_mem.as<float>();
  auto* xz = xz_mem.as<int32_t>();
  for (int64_t r = 0; r < mr; ++r) {
    char* row = x_mem.as<char>() + r * lda;
    if (qd8) {
      auto* u = reinterpret_cast<uint8_t*>(row);
      for (int64_t kk = 0; kk < kp; ++kk) {
        uint8_t v = uint8_t(rng() % 256);
        if (fill == Fill::kExtremeHigh) v = 255;
        if (fill == Fill::kExtremeLow) v = 0;
        u[kk] = kk < k ? v : 0;  // the contract pads rows with zero codes
      }
      xz[r] = fill == Fill::kExtremeHigh ? 0 : fill == Fill::kExtremeLow ? 255 : int32_t(rng() % 256);
      xs[r] = float(uni(1e-3, 0.05));
    } else {
      auto* x = reinterpret_cast<float*>(row);
      for (int64_t kk = 0; kk < k; ++kk) x[kk] = float(uni(-1.0, 1.0));
    }
  }

  // Outputs: row-major with `ldc` floats per row (the last row ends at the guard), or through
  // offset tables (rows reversed, so the table really is read).
  const int64_t ldc = ncols + (key.store == GemmStore::kTable ? 0 : int64_t(rng() % 2) * 3);
  GuardedBytes y_mem(size_t(mr * ldc * 4));
  auto* y = y_mem.as<float>();
  const float sentinel = -12345.0f;
  for (int64_t i = 0; i < mr * ldc; ++i) y[i] = sentinel;
  std::vector<int64_t> row_off(static_cast<size_t>(mr)), col_off(static_cast<size_t>(panels * key.nv()));
  for (int64_t i = 0; i < mr; ++i) row_off[size_t(i)] = (mr - 1 - i) * ldc * 4;
  for (size_t j = 0; j < col_off.size(); ++j) col_off[j] = int64_t(j) * 16;

  jit::GemmKernelArgs args{};
  args.a = reinterpret_cast<const float*>(x_mem.as<char>());
  args.lda = lda;
  args.b = panel_mem.as<float>();
  args.panels = panels;
  args.c = y;
  args.ldc = ldc * 4;
  args.row_off = row_off.data();
  args.col_off = col_off.data();
  args.scale = key.scale ? float(uni(-1.5, 1.5)) : 1.0f;
  args.x_scale = xs;
  args.x_zero = xz;

  asmjit::JitRuntime rt;
  const auto kernel = jit::generate_gemm_kernel(key, rt);
  const ProbeFn probe = wrap_with_register_probe(rt, reinterpret_cast<const void*>(kernel.fn));
  REQUIRE(static_cast<bool>(probe));
  shapejit::test::note_direct_run(key.isa);
  probe(&args);
  std::ostringstream bad;
  const std::string report = take_probe_report();
  if (!report.empty()) bad << "callee-saved registers changed: " << report << "\n";

  int mismatches = 0;
  for (int64_t i = 0; i < mr && mismatches < 8; ++i)
    for (int64_t col = 0; col < ldc && mismatches < 8; ++col) {
      const int64_t at = key.store == GemmStore::kTable ? (mr - 1 - i) * ldc + col : i * ldc + col;
      const float got = y[at];
      if (col >= ncols) {
        if (std::memcmp(&got, &sentinel, 4) != 0) bad << "Y[" << i << ", " << col << "] written past the columns\n", ++mismatches;
        continue;
      }
      const int8_t* w = codes.data() + col * k;
      float pre = 0.0f;
      double bound = 0.0;
      if (qd8) {
        const auto* u = reinterpret_cast<const uint8_t*>(x_mem.as<char>() + i * lda);
        int64_t acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) acc += (int64_t(u[kk]) - xz[i]) * w[kk];
        if (acc != int64_t(int32_t(acc))) {
          bad << "acc " << acc << " does not fit int32 (test bug)\n", ++mismatches;
          continue;
        }
        const volatile float s = xs[i] * wscale[size_t(col)];  // each product rounded alone
        const volatile float prod = float(acc) * s;
        pre = key.bias ? prod + bias[size_t(col)] : prod;
      } else {
        const auto* x = reinterpret_cast<const float*>(x_mem.as<char>() + i * lda);
        double acc = 0.0, mag = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          acc += double(x[kk]) * double(w[kk]);
          mag += std::fabs(double(x[kk]) * double(w[kk]));
        }
        const double ws = wscale[size_t(col)];
        const double b = key.bias ? double(bias[size_t(col)]) : 0.0;
        pre = float(acc * ws + b);
        // f32 sums in any order (2 k eps of the magnitudes), the scaling and the bias roundings.
        bound = ws * (2.0 * double(k) * 0x1p-24 * mag + double(k + 1) * 0x1p-150) + ulp(float(acc * ws)) + ulp(pre);
      }
      const float act = shapejit::ref::activate(c_act(key.act), pre);
      if (key.act != Activation::kNone)
        bound = shapejit::ref::activation_gain(c_act(key.act)) * bound + ulp(act) +
                (transcendental(key.act) ? 8.0 * ulp(pre) : 0.0);
      const float want = key.scale ? act * args.scale : act;
      if (key.scale) bound = std::fabs(double(args.scale)) * bound + ulp(want);
      const bool exact = qd8 && !transcendental(key.act);
      const bool ok = exact ? std::memcmp(&got, &want, 4) == 0 : shapejit::ref::accepted(got, want, bound);
      if (!ok) {
        bad << "Y[" << i << ", " << col << "] = " << got << ", want " << want;
        if (exact) bad << " bitwise\n";
        else bad << " +- " << bound << "\n";
        ++mismatches;
      }
    }
  return bad.str();
}

}  // namespace

TEST_CASE("linear group quant neon: random keys vs the contract's scalar computation, guard pages") {
  const uint64_t seed = shapejit::test::test_seed(0x9a28);
  const bool dotprod = shapejit::jit::host_features().dotprod;
  const std::string variants = dotprod ? "yes (both qd8 variants run)" : "no (the widening variant only)";
  MESSAGE("seed " << seed << "; host dotprod: " << variants);
  std::mt19937_64 rng(seed);
  std::map<std::string, int64_t> runs;
  const int64_t cases = shapejit::test::test_case_count(240);
  for (int64_t n = 0; n < cases; ++n) {
    const GemmQuant q = kForms[rng() % 4];
    const bool dot = shapejit::jit::gemm_quantized_input(q) && dotprod && rng() % 2 == 0;
    const int nc = int(1 + rng() % 16);
    const int nv = (nc + 3) / 4;
    const int mr = int(1 + rng() % uint64_t(shapejit::jit::gemm_max_mr(Isa::kNeon, nv)));
    const int64_t k = rng() % 5 == 0 ? int64_t(200 + rng() % 1800) : int64_t(1 + rng() % 200);
    const GemmStore store = nc % 4 == 0 && rng() % 3 == 0 ? GemmStore::kTable : GemmStore::kRowMajor;
    const GemmKey key = qkey(q, dot, mr, nc, k, rng() % 2 == 0, static_cast<Activation>(rng() % 5), rng() % 3 == 0,
                             store, rng() % 4 == 0 ? 512 : 0);
    const int64_t panels = int64_t(1 + rng() % 3);
    const Fill fill = rng() % 8 == 0 ? (rng() % 2 ? Fill::kExtremeHigh : Fill::kExtremeLow) : Fill::kRandom;
    CAPTURE(n);
    CAPTURE(key.name());
    CAPTURE(panels);
    CAPTURE(int(fill));
    const std::string bad = run_case(key, panels, fill, rng);
    CHECK_MESSAGE(bad.empty(), bad);
    ++runs[variant_name(key)];
  }
  std::string summary;
  for (const auto& [name, count] : runs) summary += "  " + name + ": " + std::to_string(count) + " kernels\n";
  MESSAGE("variants executed:\n" << summary);
  CHECK(runs.size() == (dotprod ? 6u : 4u));
}

TEST_CASE("linear group quant neon: the largest accumulators, K = 65536, stay exact in both variants") {
  const bool dotprod = shapejit::jit::host_features().dotprod;
  std::mt19937_64 rng(shapejit::test::test_seed(0x9a29));
  for (GemmQuant q : {GemmQuant::kQd8Qc8w, GemmQuant::kQd8Qc4w})
    for (bool dot : {false, true}) {
      if (dot && !dotprod) {
        MESSAGE(variant_name(qkey(q, dot, 1, 4, 1)) << " SKIPPED: host lacks dotprod");
        continue;
      }
      for (Fill fill : {Fill::kExtremeHigh, Fill::kExtremeLow}) {
        const GemmKey key = qkey(q, dot, 2, 5, 65536, true);
        CAPTURE(key.name());
        const std::string bad = run_case(key, 1, fill, rng);
        CHECK_MESSAGE(bad.empty(), bad);
      }
    }
}

#endif  // __aarch64__
