// NEON-specific checks of the AArch64 embedding-bag generator. On every host: kernels
// cross-emit, the listing shows the instructions each feature needs, and (when binutils for
// aarch64 is installed) objdump decodes the bytes into the same instruction sequence. On AArch64
// (natively or under qemu): kernels keep AAPCS64's callee-saved registers, and the API runs
// generated NEON kernels. The bitwise differential suites (embag_jit_test, embag_jit_rules_test,
// embag_api_test, guard_page_test) include NEON through host_isas() and the ISA selection; the
// table dtypes have their own battery in embag_neon_dtype_test.cpp.
#include <doctest/doctest.h>

#include <asmjit/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "jit/a64/embag_emitter.hpp"
#include "jit/a64/prefetch.hpp"
#include "jit/embag_codegen.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "shapejit/shapejit.h"
#include "support/a64_support.hpp"
#include "support/embag_cases.hpp"
#include "support/embag_jit_support.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using namespace shapejit::test::embag_jit;
using namespace shapejit::test::neon;

EmbagKey neon_key(int64_t dim, Mode mode, bool weighted = false, bool padding = false,
                  DType index = DType::kI64, DType offset = DType::kI64, int prefetch = 16) {
  EmbagKey k;
  k.isa = Isa::kNeon;
  k.dim = dim;
  k.mode = mode;
  k.weighted = weighted;
  k.padding = padding;
  k.index = index;
  k.offset = offset;
  k.prefetch = prefetch;
  return k;
}

// Cross-emits `key` for AArch64 (whatever the host), with the listing and the flat code.
Emitted emit_key(const EmbagKey& key) {
  return emit_a64([&](asmjit::CodeHolder& code) { shapejit::jit::emit_embag_kernel(key, code); });
}

}  // namespace

TEST_CASE("embag neon: prfm pldl1keep is encoded by hand as binutils encodes it") {
  // Reference words from aarch64-linux-gnu-objdump (binutils 2.40) and the Arm ARM (PRFM imm).
  CHECK(shapejit::jit::encode_prfm_pldl1keep(1, 64) == 0xF9802020u);    // prfm pldl1keep, [x1, #64]
  CHECK(shapejit::jit::encode_prfm_pldl1keep(9, 0) == 0xF9800120u);     // prfm pldl1keep, [x9]
  CHECK(shapejit::jit::encode_prfm_pldl1keep(9, 32760) == 0xF9BFFD20u); // prfm pldl1keep, [x9, #32760]
  for (int64_t bad : {-8, 4, 32768})
    CHECK_THROWS_AS(shapejit::jit::encode_prfm_pldl1keep(9, bad), shapejit::Error);
}

TEST_CASE("embag neon: cross-emitted kernels use the instructions of each feature") {
  struct Expect {
    EmbagKey key;
    std::vector<std::string> present, absent;
  };
  const std::vector<Expect> cases{
      {neon_key(20, Mode::kSum), {"ldp", "fadd", "prfm", "ret", "str"}, {"fmla", "fdiv", "fcmgt", "ld1"}},
      {neon_key(7, Mode::kSum, true), {"fmla", "ld1", "st1"}, {"fadd"}},   // 3-column tail: lane moves
      {neon_key(6, Mode::kMean, false, false, DType::kI32, DType::kI32), {"scvtf", "fdiv", "ldrsw"}, {}},
      // int64 ids: 32-bit id lanes zero-extended at the store (uxtl), and the restart on an id
      // >= 2^31 (tst) into the bag body with 64-bit lanes (sxtl of the compare mask).
      {neon_key(13, Mode::kMax), {"fcmgt", "bit", "sxtl", "sxtl2", "dup", "tst", "uxtl", "uxtl2"}, {"fmax", "fmaxnm"}},
      // int32 indices with int64 outputs: ids fit 32-bit lanes, no restart path.
      {neon_key(13, Mode::kMax, false, false, DType::kI32, DType::kI64), {"uxtl", "bit"}, {"sxtl", "tst"}},
      {neon_key(13, Mode::kMax, false, true, DType::kI32, DType::kI32), {"fcmgt", "bit"}, {"sxtl"}},
      {neon_key(64, Mode::kSum, false, false, DType::kI64, DType::kI64, 0), {"fadd"}, {"prfm"}},
  };
  for (const Expect& e : cases) {
    CAPTURE(e.key.name());
    const Emitted out = emit_key(e.key);
    const std::vector<std::string> m = listing_mnemonics(out.listing);
    INFO("listing:\n" << out.listing);
    for (const std::string& p : e.present) CHECK_MESSAGE(has(m, p), "missing " << p);
    for (const std::string& a : e.absent) CHECK_MESSAGE(!has(m, a), "unexpected " << a);
    CHECK(!has(m, "vaddps"));
    CHECK(out.bytes.size() % 4 == 0);
  }
  // With prefetch the bag loop exists twice (the skeleton's unclamped copy, then the clamped one):
  // the clamp (csel) appears in one copy only, the prefetches in both.
  {
    const std::vector<std::string> m = listing_mnemonics(emit_key(neon_key(8, Mode::kSum)).listing);
    const auto count = [&](const std::string& name) { return std::count(m.begin(), m.end(), name); };
    CHECK(count("csel") == 1);
    CHECK(count("fadd") == 2 * 2);
  }
  // Narrow kernels stay in caller-saved registers; wide max kernels take v8-v15 and save d8-d15.
  const std::string narrow = emit_key(neon_key(20, Mode::kMax)).listing;
  CHECK(narrow.find("d8") == std::string::npos);
  const std::string wide = emit_key(neon_key(4100, Mode::kMax)).listing;
  CHECK(wide.find("stp d8, d9") != std::string::npos);
  CHECK(wide.find("ldp d8, d9") != std::string::npos);
}

TEST_CASE("embag neon: an x86-64 CodeHolder or a non-NEON key is refused with Unsupported") {
  auto status_of = [](const EmbagKey& key, asmjit::Arch arch) {
    try {
      asmjit::CodeHolder code;
      code.init(asmjit::Environment(arch));
      shapejit::jit::emit_embag_kernel_a64(key, code);
    } catch (const shapejit::Error& e) {
      return e.status();
    }
    return shapejit::Status::kOk;
  };
  CHECK(status_of(neon_key(8, Mode::kSum), asmjit::Arch::kAArch64) == shapejit::Status::kOk);
  CHECK(status_of(neon_key(8, Mode::kSum), asmjit::Arch::kX64) == shapejit::Status::kUnsupported);
  CHECK(status_of(neon_key(0, Mode::kSum), asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
  CHECK(status_of(neon_key(8, Mode::kMax, true), asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
  EmbagKey avx = neon_key(8, Mode::kSum);
  avx.isa = Isa::kAvx2;
  CHECK(status_of(avx, asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
  EmbagKey f16 = neon_key(8, Mode::kSum);  // f16 tables output f16: an f32 output is undefined
  f16.table = DType::kF16;
  f16.out = DType::kF32;
  CHECK(status_of(f16, asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
}

TEST_CASE("embag neon: objdump decodes the emitted bytes into asmjit's instruction sequence") {
  for (const EmbagKey& key : {neon_key(7, Mode::kSum, true, true, DType::kI32, DType::kI64, 3),
                              neon_key(13, Mode::kMax, false, true), neon_key(6, Mode::kMean),
                              neon_key(1100, Mode::kMax, false, false, DType::kI32, DType::kI32)}) {
    CAPTURE(key.name());
    const Emitted out = emit_key(key);
    const auto decoded = objdump_a64(out.bytes);
    if (!decoded) {  // binutils-aarch64-linux-gnu comes with g++-aarch64-linux-gnu
      MESSAGE("skipped: aarch64-linux-gnu-objdump not found (tools/install_deps.sh cross)");
      return;
    }
    INFO("asmjit:\n" << out.listing << "\nobjdump:\n" << decoded->text);
    CHECK(decoded->words == out.bytes.size() / 4);
    CHECK(!has(decoded->mnemonics, ".inst"));
    CHECK(!has(decoded->mnemonics, "udf"));
    CHECK(decoded->mnemonics == listing_mnemonics(out.listing));
  }
}

#if defined(__aarch64__)

TEST_CASE("embag neon: kernels keep AAPCS64's callee-saved x19-x28 and d8-d15") {
  const uint64_t seed = shapejit::test::test_seed(0xAA9C5);
  asmjit::JitRuntime rt;
  int64_t number = 0;
  // Wide max kernels use v8-v15 (and save them); the others must not touch them at all.
  for (const EmbagKey& key : {neon_key(4100, Mode::kMax), neon_key(1100, Mode::kMax, false, true, DType::kI32),
                              neon_key(300, Mode::kSum, true, true), neon_key(129, Mode::kMean, false, true),
                              neon_key(13, Mode::kMax, false, false, DType::kI32, DType::kI32)}) {
    for (int rep = 0; rep < 3; ++rep, ++number) {
      CAPTURE(key.name());
      CAPTURE(number);
      JitProblem p;
      p.key = key;
      Rng rng(mix(seed ^ uint64_t(number)));
      make_problem(p, rng);
      const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
      const ProbeFn probe = wrap_with_register_probe(rt, reinterpret_cast<const void*>(kernel.fn));
      REQUIRE(static_cast<bool>(probe));
      const std::string diff =
          run_and_compare(p, reinterpret_cast<shapejit::jit::EmbagKernelFn>(probe), std::nullopt);
      INFO(p.describe() << "\nseed " << seed);
      CHECK_MESSAGE(diff.empty(), diff);
      const std::string report = take_probe_report();
      CHECK_MESSAGE(report.empty(), report);
      rt.release(reinterpret_cast<void*>(probe));
      rt.release(kernel.fn);
    }
  }
  take_tolerated_nan_payloads();
}

TEST_CASE("embag neon: the API runs generated NEON kernels on AArch64") {
  // The selection picks neon here (unless SHAPEJIT_ISA caps it); a call of a new shape must then
  // compile a kernel (the scalar path compiles none), and match the reference.
  if (const char* cap = std::getenv("SHAPEJIT_ISA"); cap && std::string(cap) != "neon") {
    MESSAGE("skipped: SHAPEJIT_ISA=" << cap);
    return;
  }
  shapejit::rt::EmbagKernelCache& cache = shapejit::rt::embag_kernel_cache();
  const int64_t before = cache.stats().compilations;
  std::vector<float> table(5 * 77);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(int(i * 37 % 101) - 50) * 0.25f;
  const std::vector<int64_t> indices{4, 0, 3, 3, 1, 2}, offsets{0, 2, 2};
  shapejit_embedding_bag_args a{};
  a.weight = table.data();
  a.weight_dtype = SHAPEJIT_F32;
  a.num_rows = 5;
  a.dim = 77;
  a.row_stride = 77;
  a.indices = indices.data();
  a.index_dtype = SHAPEJIT_I64;
  a.num_indices = int64_t(indices.size());
  a.offsets = offsets.data();
  a.offset_dtype = SHAPEJIT_I64;
  a.num_offsets = int64_t(offsets.size());
  a.mode = SHAPEJIT_MAX;
  shapejit_embedding_bag_shapes s{};
  REQUIRE(shapejit_embedding_bag_output_shapes(&a, &s) == SHAPEJIT_OK);
  shapejit::test::GuardedOutputs got(s, 0x5A), want(s, 0xA5);
  REQUIRE(got.run(a) == SHAPEJIT_OK);
  CHECK(cache.stats().compilations > before);
  shapejit::ref::embedding_bag(a, want.data(shapejit::test::EmbagOutput::kOutput),
                               want.data(shapejit::test::EmbagOutput::kOffset2bag),
                               want.data(shapejit::test::EmbagOutput::kBagSize),
                               want.data(shapejit::test::EmbagOutput::kMaxIndices));
  EmbagKey key = neon_key(77, Mode::kMax);
  CHECK(first_difference(key, want, got) == "");
}

#endif  // __aarch64__
