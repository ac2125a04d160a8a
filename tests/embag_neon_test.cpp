// NEON-specific checks of the AArch64 embedding-bag generator. On every host: kernels
// cross-emit, the listing shows the instructions each feature needs, and (when binutils for
// aarch64 is installed) objdump decodes the bytes into the same instruction sequence. On AArch64
// (natively or under qemu): kernels keep AAPCS64's callee-saved registers, and the API runs
// generated NEON kernels. The bitwise differential suites (embag_jit_test, embag_jit_rules_test,
// embag_api_test, guard_page_test) include NEON through host_isas() and the ISA selection.
#include <doctest/doctest.h>
#include <unistd.h>

#include <asmjit/core.h>
#include <asmjit/arm/a64assembler.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "jit/a64/embag_emitter.hpp"
#include "jit/embag_codegen.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/kernel_cache.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"
#include "support/embag_jit_support.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using namespace shapejit::test::embag_jit;

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

struct Emitted {
  std::string listing;
  std::vector<uint8_t> bytes;
};

// Cross-emits `key` for AArch64 (whatever the host), with the listing and the flat code.
Emitted emit_a64(const EmbagKey& key) {
  asmjit::CodeHolder code;
  code.init(asmjit::Environment(asmjit::Arch::kAArch64));
  asmjit::StringLogger logger;
  code.setLogger(&logger);
  shapejit::jit::emit_embag_kernel(key, code);
  code.flatten();
  code.resolveUnresolvedLinks();
  const asmjit::CodeBuffer& buf = code.textSection()->buffer();
  return {logger.data(), std::vector<uint8_t>(buf.data(), buf.data() + buf.size())};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) out.push_back(line);
  return out;
}

std::string first_word(const std::string& line) {
  const size_t b = line.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return line.substr(b, line.find_first_of(" \t", b) - b);
}

// Mnemonics of asmjit's listing in order: labels and `align` dropped, and a hand-encoded
// `.word` counted as the instruction its comment line names (prfm).
std::vector<std::string> listing_mnemonics(const std::string& listing) {
  std::vector<std::string> m;
  for (const std::string& line : lines_of(listing)) {
    const std::string w = first_word(line);
    if (w.empty() || w.back() == ':' || w == "align" || w == ".word") continue;
    m.push_back(w);
  }
  return m;
}

bool has(const std::vector<std::string>& mnemonics, const std::string& m) {
  for (const std::string& x : mnemonics)
    if (x == m) return true;
  return false;
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
      {neon_key(13, Mode::kMax), {"fcmgt", "bit", "sxtl", "sxtl2", "dup"}, {"fmax", "fmaxnm"}},
      {neon_key(13, Mode::kMax, false, true, DType::kI32, DType::kI32), {"fcmgt", "bit"}, {"sxtl"}},
      {neon_key(64, Mode::kSum, false, false, DType::kI64, DType::kI64, 0), {"fadd"}, {"prfm"}},
  };
  for (const Expect& e : cases) {
    CAPTURE(e.key.name());
    const Emitted out = emit_a64(e.key);
    const std::vector<std::string> m = listing_mnemonics(out.listing);
    INFO("listing:\n" << out.listing);
    for (const std::string& p : e.present) CHECK_MESSAGE(has(m, p), "missing " << p);
    for (const std::string& a : e.absent) CHECK_MESSAGE(!has(m, a), "unexpected " << a);
    CHECK(!has(m, "vaddps"));
    CHECK(out.bytes.size() % 4 == 0);
  }
  // Narrow kernels stay in caller-saved registers; wide max kernels take v8-v15 and save d8-d15.
  const std::string narrow = emit_a64(neon_key(20, Mode::kMax)).listing;
  CHECK(narrow.find("d8") == std::string::npos);
  const std::string wide = emit_a64(neon_key(4100, Mode::kMax)).listing;
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
  EmbagKey f16 = neon_key(8, Mode::kSum);
  f16.table = DType::kF16;
  CHECK(status_of(f16, asmjit::Arch::kAArch64) == shapejit::Status::kUnsupported);
}

TEST_CASE("embag neon: objdump decodes the emitted bytes into asmjit's instruction sequence") {
  // binutils-aarch64-linux-gnu comes with g++-aarch64-linux-gnu (tools/install_deps.sh cross).
  if (std::system("command -v aarch64-linux-gnu-objdump >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: aarch64-linux-gnu-objdump not found (apt-get install binutils-aarch64-linux-gnu)");
    return;
  }
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("shapejit_neon_" + std::to_string(getpid()) + ".bin");
  for (const EmbagKey& key : {neon_key(7, Mode::kSum, true, true, DType::kI32, DType::kI64, 3),
                              neon_key(13, Mode::kMax, false, true), neon_key(6, Mode::kMean),
                              neon_key(1100, Mode::kMax, false, false, DType::kI32, DType::kI32)}) {
    CAPTURE(key.name());
    const Emitted out = emit_a64(key);
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(out.bytes.data()),
                                                std::streamsize(out.bytes.size()));
    const std::string cmd = "aarch64-linux-gnu-objdump -D -b binary -m aarch64 " + file.string();
    FILE* pipe = popen(cmd.c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::string text;
    std::array<char, 4096> chunk{};
    while (size_t n = fread(chunk.data(), 1, chunk.size(), pipe)) text.append(chunk.data(), n);
    REQUIRE(pclose(pipe) == 0);
    // objdump lines: "  offset:\tword \tmnemonic\toperands"; alignment padding decodes as nop.
    std::vector<std::string> decoded;
    size_t words = 0;
    for (const std::string& line : lines_of(text)) {
      const size_t t1 = line.find('\t');
      if (line.find(':') == std::string::npos || t1 == std::string::npos) continue;
      const size_t t2 = line.find('\t', t1 + 1);
      if (t2 == std::string::npos) continue;
      ++words;
      const std::string m = first_word(line.substr(t2 + 1));
      if (m != "nop") decoded.push_back(m);
    }
    const std::vector<std::string> listed = listing_mnemonics(out.listing);
    INFO("asmjit:\n" << out.listing << "\nobjdump:\n" << text);
    CHECK(words == out.bytes.size() / 4);
    CHECK(!has(decoded, ".inst"));
    CHECK(!has(decoded, "udf"));
    CHECK(decoded == listed);
  }
  std::filesystem::remove(file);
}

#if defined(__aarch64__)

namespace {

// Registers AAPCS64 makes callee-saved: x19-x28 and the low halves of v8-v15 (d8-d15).
constexpr int kSavedGp = 10, kSavedFp = 8;
std::array<uint64_t, kSavedGp + kSavedFp> g_after{};

uint64_t pattern(int r) { return 0x5EED000000000000ull ^ (uint64_t(r) * 0x0101010101ull) ^ (uint64_t(r) << 40); }

// A `void(const EmbagKernelArgs*)` wrapper around `kernel`: it loads a distinct pattern into
// x19-x28 and d8-d15, calls the kernel with the same argument, and stores what those registers
// hold afterwards into g_after (restoring the caller's values itself).
shapejit::jit::EmbagKernelFn wrap_with_register_probe(asmjit::JitRuntime& rt, shapejit::jit::EmbagKernelFn kernel) {
  using namespace asmjit;
  CodeHolder code;
  code.init(rt.environment());
  a64::Assembler a(&code);
  const int frame = 16 + 8 * (kSavedGp + kSavedFp);  // x29/x30 + the saved registers = 160
  a.stp(a64::x29, a64::x30, a64::ptr_pre(a64::sp, -frame));
  a.mov(a64::x29, a64::sp);
  for (int i = 0; i < kSavedGp; i += 2) a.stp(a64::x(19 + i), a64::x(20 + i), a64::ptr(a64::sp, 16 + 8 * i));
  for (int i = 0; i < kSavedFp; i += 2)
    a.stp(a64::d(8 + i), a64::d(9 + i), a64::ptr(a64::sp, 16 + 8 * (kSavedGp + i)));
  for (int i = 0; i < kSavedGp; ++i) a.mov(a64::x(19 + i), Imm(pattern(19 + i)));
  for (int i = 0; i < kSavedFp; ++i) {
    a.mov(a64::x9, Imm(pattern(8 + i)));
    a.fmov(a64::d(8 + i), a64::x9);
  }
  a.mov(a64::x16, Imm(reinterpret_cast<uint64_t>(kernel)));
  a.blr(a64::x16);  // x0 still holds the argument
  a.mov(a64::x9, Imm(reinterpret_cast<uint64_t>(g_after.data())));
  for (int i = 0; i < kSavedGp; ++i) a.str(a64::x(19 + i), a64::ptr(a64::x9, 8 * i));
  for (int i = 0; i < kSavedFp; ++i) a.str(a64::d(8 + i), a64::ptr(a64::x9, 8 * (kSavedGp + i)));
  for (int i = 0; i < kSavedGp; i += 2) a.ldp(a64::x(19 + i), a64::x(20 + i), a64::ptr(a64::sp, 16 + 8 * i));
  for (int i = 0; i < kSavedFp; i += 2)
    a.ldp(a64::d(8 + i), a64::d(9 + i), a64::ptr(a64::sp, 16 + 8 * (kSavedGp + i)));
  a.ldp(a64::x29, a64::x30, a64::ptr_post(a64::sp, frame));
  a.ret(a64::x30);
  shapejit::jit::EmbagKernelFn fn = nullptr;
  REQUIRE(rt.add(&fn, &code) == kErrorOk);
  return fn;
}

}  // namespace

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
      const auto probe = wrap_with_register_probe(rt, kernel.fn);
      g_after.fill(0);
      const std::string diff = run_and_compare(p, probe, std::nullopt);
      INFO(p.describe() << "\nseed " << seed);
      CHECK_MESSAGE(diff.empty(), diff);
      for (int i = 0; i < kSavedGp; ++i) CHECK_MESSAGE(g_after[size_t(i)] == pattern(19 + i), "x" << 19 + i);
      for (int i = 0; i < kSavedFp; ++i)
        CHECK_MESSAGE(g_after[size_t(kSavedGp + i)] == pattern(8 + i), "d" << 8 + i);
      rt.release(probe);
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
