// NEON-specific checks of the AArch64 linear-group microkernel generator. On every host: keys
// cross-emit, the listing shows each epilogue's instructions, objdump decodes the bytes (when
// binutils for aarch64 is installed), and the register budget bounds mr. On AArch64 (natively
// or under qemu): kernels keep AAPCS64's callee-saved registers, SLEEF calls included, and give
// exact results on small-integer inputs. Accuracy against the reference over random groups is
// linear_group_jit_test's NEON battery.
#include <doctest/doctest.h>

#include <asmjit/core.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jit/gemm_codegen.hpp"
#include "jit/gemm_kernel.hpp"
#include "shapejit/shapejit.hpp"
#include "support/a64_support.hpp"
#include "support/embag_cases.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::Activation;
using shapejit::jit::GemmKey;
using shapejit::jit::GemmStore;
using shapejit::jit::Isa;
using namespace shapejit::test::neon;

GemmKey neon_gemm(int mr, int nc, int64_t k, bool bias = false, Activation act = Activation::kNone,
                  bool scale = false, GemmStore store = GemmStore::kRowMajor, int prefetch = 0) {
  GemmKey key;
  key.isa = Isa::kNeon;
  key.mr = mr, key.nc = nc, key.k = k, key.bias = bias, key.act = act, key.scale = scale;
  key.store = store, key.prefetch = prefetch;
  return key;
}

Emitted emit_key(const GemmKey& key) {
  return emit_a64([&](asmjit::CodeHolder& code) { shapejit::jit::emit_gemm_kernel(key, code); });
}

}  // namespace

TEST_CASE("linear group neon: 4-float vectors and a register budget of 32 bound the tile") {
  CHECK(shapejit::jit::gemm_lanes(Isa::kNeon) == 4);
  CHECK(neon_gemm(1, 13, 5).nv() == 4);
  CHECK(neon_gemm(1, 13, 5).tail() == 1);
  // mr * nv accumulators + nv weights + mr X registers <= 32.
  CHECK(shapejit::jit::gemm_max_mr(Isa::kNeon, 4) == 5);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kNeon, 3) == 7);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kNeon, 2) == 8);
  CHECK(shapejit::jit::gemm_max_mr(Isa::kNeon, 1) == 8);
  auto status_of = [](const GemmKey& key, asmjit::Arch arch) {
    try {
      asmjit::CodeHolder code;
      code.init(asmjit::Environment(arch));
      shapejit::jit::emit_gemm_kernel(key, code);
    } catch (const shapejit::Error& e) {
      return e.status();
    }
    return shapejit::Status::kOk;
  };
  CHECK(status_of(neon_gemm(5, 16, 9), asmjit::Arch::kAArch64) == shapejit::Status::kOk);
  CHECK(status_of(neon_gemm(6, 16, 9), asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
  CHECK(status_of(neon_gemm(1, 17, 9), asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
  CHECK(status_of(neon_gemm(2, 14, 9, false, Activation::kNone, false, GemmStore::kTable), asmjit::Arch::kAArch64) ==
        shapejit::Status::kUnsupported);
  CHECK(status_of(neon_gemm(5, 16, 9), asmjit::Arch::kX64) == shapejit::Status::kUnsupported);
}

TEST_CASE("linear group neon: cross-emitted microkernels use the instructions of each epilogue") {
  struct Expect {
    GemmKey key;
    std::vector<std::string> present, absent;
  };
  const std::vector<Expect> cases{
      {neon_gemm(5, 16, 768, true), {"fmla", "ldp", "subs", "b.ne", "ret"}, {"blr", "fmax", "prfm", "fmul"}},
      {neon_gemm(3, 15, 7, false, Activation::kGelu, true), {"blr", "fmul", "fadd", "st1", "dup"}, {"fdiv"}},
      {neon_gemm(4, 16, 40, true, Activation::kSilu, false, GemmStore::kTable, 8192), {"prfm", "fneg", "fdiv", "blr"}, {}},
      {neon_gemm(8, 5, 3, false, Activation::kRelu), {"fmax", "str"}, {"blr"}},
      {neon_gemm(2, 8, 33, false, Activation::kGeluTanh), {"blr", "fmul", "fadd"}, {"fdiv"}},
  };
  for (const Expect& e : cases) {
    CAPTURE(e.key.name());
    const Emitted out = emit_key(e.key);
    INFO("listing:\n" << out.listing);
    const std::vector<std::string> m = listing_mnemonics(out.listing);
    for (const std::string& p : e.present) CHECK_MESSAGE(has(m, p), "missing " << p);
    for (const std::string& a : e.absent) CHECK_MESSAGE(!has(m, a), "unexpected " << a);
    // Calls clobber x30: kernels that call SLEEF save it in the prologue.
    CHECK((out.listing.find("x30, [sp") != std::string::npos) == has(m, "blr"));
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

// One kernel call on `panels` packed panels of small integers (exact in f32), straight and
// through the register probe; the outputs, and the probe's record, are checked.
void run_probed(const GemmKey& key, int64_t panels, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto small = [&] { return float(int64_t(rng() % 7) - 3); };
  const int64_t width = shapejit::jit::gemm_panel_width(key), panel_floats = shapejit::jit::gemm_panel_bytes(key) / 4;
  const int64_t lda = key.k + 3, ncols = panels * key.nc, ldc = ncols + 5;
  std::vector<float> x(size_t(key.mr * lda));
  for (float& v : x) v = small();
  // 64-byte aligned panels: k rows of `width` floats, the bias row, zero padding past nc.
  std::vector<float> storage(size_t(panels * panel_floats + 16), 0.0f);
  float* packed = storage.data() + (16 - (reinterpret_cast<uintptr_t>(storage.data()) / 4) % 16) % 16;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t r = 0; r < key.k + (key.bias ? 1 : 0); ++r)
      for (int64_t c = 0; c < key.nc; ++c) packed[p * panel_floats + r * width + c] = small();
  std::vector<int64_t> row_off(size_t(key.mr)), col_off(size_t(panels * key.nv()));
  for (int64_t i = 0; i < key.mr; ++i) row_off[size_t(i)] = i * ldc * 4;
  for (size_t j = 0; j < col_off.size(); ++j) col_off[j] = int64_t(j) * 16;

  std::vector<float> direct(size_t(key.mr * ldc), -7.0f), probed = direct;
  shapejit::jit::GemmKernelArgs args{};
  args.a = x.data();
  args.lda = lda * 4;
  args.b = packed;
  args.panels = panels;
  args.ldc = ldc * 4;
  args.row_off = row_off.data();
  args.col_off = col_off.data();
  args.scale = 0.5f;

  asmjit::JitRuntime rt;
  const auto kernel = shapejit::jit::generate_gemm_kernel(key, rt);
  const ProbeFn probe = wrap_with_register_probe(rt, reinterpret_cast<const void*>(kernel.fn));
  REQUIRE(static_cast<bool>(probe));
  args.c = direct.data();
  shapejit::test::note_direct_run(key.isa);
  kernel.fn(&args);
  args.c = probed.data();
  probe(&args);
  const std::string report = take_probe_report();
  CHECK_MESSAGE(report.empty(), report);
  CHECK(std::memcmp(direct.data(), probed.data(), direct.size() * 4) == 0);
  if (key.act != Activation::kNone && key.act != Activation::kRelu) return;
  // Small integers: every sum is exact, so the result is known to the bit.
  for (int64_t i = 0; i < key.mr; ++i)
    for (int64_t col = 0; col < ldc; ++col) {
      float want = -7.0f;
      if (col < ncols) {
        const int64_t p = col / key.nc, c = col % key.nc;
        const float* panel = packed + p * panel_floats;
        float sum = key.bias ? panel[key.k * width + c] : 0.0f;
        for (int64_t kk = 0; kk < key.k; ++kk) sum += x[size_t(i * lda + kk)] * panel[kk * width + c];
        if (key.act == Activation::kRelu) sum = sum > 0.0f ? sum : 0.0f;
        want = key.scale ? sum * 0.5f : sum;
      }
      CHECK_MESSAGE(direct[size_t(i * ldc + col)] == want, "Y[" << i << ", " << col << "]");
    }
}

}  // namespace

TEST_CASE("linear group neon: kernels keep AAPCS64's callee-saved registers, SLEEF calls included") {
  const uint64_t seed = shapejit::test::test_seed(0x6e0a);
  MESSAGE("seed " << seed);
  run_probed(neon_gemm(5, 16, 768, true), 3, seed);                       // v8-v12 in the tile
  run_probed(neon_gemm(8, 8, 37, true, Activation::kRelu, true), 2, seed);  // 8 row pointers
  run_probed(neon_gemm(3, 15, 7, false, Activation::kGelu, true), 2, seed);  // x19-x22, x30
  run_probed(neon_gemm(4, 16, 40, true, Activation::kSilu, false, GemmStore::kTable, 8192), 2, seed);
  run_probed(neon_gemm(5, 16, 64, true, Activation::kNone, true, GemmStore::kTable), 4, seed);
  run_probed(neon_gemm(2, 6, 3), 1, seed);
}

#endif  // __aarch64__
