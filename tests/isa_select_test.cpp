// ISA selection: best supported candidate of the host's family, SHAPEJIT_ISA as a cap, a
// reason for every candidate passed over, and the RAII pin tests use.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "jit/host_features.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.hpp"

namespace {

using shapejit::jit::Isa;
using shapejit::rt::HostFeatures;
using shapejit::rt::select_isa;

HostFeatures x86_avx512() {
  HostFeatures h;
  h.x86 = h.avx2 = h.fma = h.f16c = h.avx512f = h.avx512bw = h.avx512dq = h.avx512vl = true;
  h.os_avx_state = h.os_avx512_state = true;
  return h;
}

HostFeatures x86_avx2() {
  HostFeatures h;
  h.x86 = h.avx2 = h.fma = h.f16c = true;
  h.os_avx_state = true;
  return h;
}

// What the host-feature rule answered during static initialisation, before main: doctest::skip
// decorators and globals like this one ask that early, and asmjit 1.9's CpuInfo::host() (which
// selection once used) answered "no features" for the rest of the process after an early call.
struct EarlyAnswers {
  HostFeatures features = shapejit::rt::detect_host_features();
  HostFeatures fresh = shapejit::jit::read_host_features();
  Isa selected = shapejit::rt::process_isa_selection().isa;
  bool runs[4] = {shapejit::rt::host_supports(Isa::kScalar), shapejit::rt::host_supports(Isa::kAvx2),
                  shapejit::rt::host_supports(Isa::kAvx512), shapejit::rt::host_supports(Isa::kNeon)};
};
const EarlyAnswers g_early;

HostFeatures arm_neon() {
  HostFeatures h;
  h.arm = h.asimd = true;
  return h;
}

}  // namespace

TEST_CASE("isa: the best ISA the host supports, with reasons for those passed over") {
  auto s = select_isa(x86_avx512(), std::nullopt);
  CHECK(s.isa == Isa::kAvx512);
  CHECK(s.reasons == std::vector<std::string>{"avx512: selected"});
  CHECK(s.cap_note.empty());

  s = select_isa(x86_avx2(), std::nullopt);
  CHECK(s.isa == Isa::kAvx2);
  CHECK(s.reasons == std::vector<std::string>{
                         "avx512: host lacks avx512f, avx512bw, avx512dq, avx512vl", "avx2: selected"});

  HostFeatures no_bw = x86_avx512();
  no_bw.avx512bw = false;
  s = select_isa(no_bw, std::nullopt);
  CHECK(s.isa == Isa::kAvx2);
  CHECK(s.reasons.front() == "avx512: host lacks avx512bw");

  HostFeatures no_fma = x86_avx2();
  no_fma.fma = false;
  s = select_isa(no_fma, std::nullopt);
  CHECK(s.isa == Isa::kScalar);
  CHECK(s.reasons[1] == "avx2: host lacks fma");
  CHECK(s.reasons[2] == "scalar: selected");

  CHECK(select_isa(arm_neon(), std::nullopt).isa == Isa::kNeon);
  CHECK(select_isa(HostFeatures{}, std::nullopt).isa == Isa::kScalar);  // unknown architecture
  HostFeatures arm_bare;
  arm_bare.arm = true;
  s = select_isa(arm_bare, std::nullopt);
  CHECK(s.isa == Isa::kScalar);
  CHECK(s.reasons.front() == "neon: host lacks asimd");
}

TEST_CASE("isa: SHAPEJIT_ISA caps the choice but never raises it") {
  auto s = select_isa(x86_avx512(), "avx2");
  CHECK(s.isa == Isa::kAvx2);
  CHECK(s.reasons.front() == "avx512: capped by SHAPEJIT_ISA=avx2");
  CHECK(s.to_string() == "isa avx2 (avx512: capped by SHAPEJIT_ISA=avx2; avx2: selected)");

  CHECK(select_isa(x86_avx2(), "avx512").isa == Isa::kAvx2);  // a cap is not a request
  CHECK(select_isa(x86_avx512(), "scalar").isa == Isa::kScalar);
  CHECK(select_isa(arm_neon(), "scalar").isa == Isa::kScalar);
  CHECK(select_isa(arm_neon(), "neon").isa == Isa::kNeon);
  CHECK(select_isa(x86_avx512(), "").isa == Isa::kAvx512);  // empty = unset
}

TEST_CASE("isa: an unknown or foreign SHAPEJIT_ISA is ignored with a note") {
  auto s = select_isa(x86_avx512(), "avx1024");
  CHECK(s.isa == Isa::kAvx512);
  CHECK(s.cap_note == "SHAPEJIT_ISA=avx1024 is not one of avx512|avx2|neon|scalar; ignored");
  CHECK(s.to_string().find("ignored") != std::string::npos);

  s = select_isa(x86_avx2(), "neon");
  CHECK(s.isa == Isa::kAvx2);
  CHECK(s.cap_note.find("another CPU family") != std::string::npos);
  s = select_isa(arm_neon(), "avx2");
  CHECK(s.isa == Isa::kNeon);
  CHECK_FALSE(s.cap_note.empty());
}

TEST_CASE("isa: the OS must enable the register state an ISA uses (XCR0)") {
  HostFeatures h = x86_avx512();
  h.os_avx512_state = false;  // e.g. a kernel booted without AVX-512 state support
  auto s = select_isa(h, std::nullopt);
  CHECK(s.isa == Isa::kAvx2);
  CHECK(s.reasons.front() == "avx512: the OS has not enabled the opmask and zmm register state (XCR0)");
  h.os_avx_state = false;
  s = select_isa(h, std::nullopt);
  CHECK(s.isa == Isa::kScalar);
  CHECK(s.reasons[1] == "avx2: the OS has not enabled the ymm register state (XCR0)");
  // Missing CPU features are named first: the OS state only matters on a CPU that has them.
  HostFeatures avx2_only = x86_avx2();
  avx2_only.os_avx_state = false;
  CHECK(shapejit::rt::isa_unsupported_reason(avx2_only, Isa::kAvx512) ==
        "host lacks avx512f, avx512bw, avx512dq, avx512vl");
}

TEST_CASE("isa: AVX-512 code needs AVX2 and FMA too (VEX forms, SLEEF's avx512f functions)") {
  HostFeatures h = x86_avx512();
  h.fma = false;
  CHECK(shapejit::rt::isa_unsupported_reason(h, Isa::kAvx512) == "host lacks fma");
  CHECK(select_isa(h, std::nullopt).isa == Isa::kScalar);
  CHECK(shapejit::jit::isa_requirement(Isa::kAvx512) ==
        "x86-64 with avx512f, avx512bw, avx512dq, avx512vl, avx2, fma, f16c; OS-enabled ymm, opmask and zmm state");
  CHECK(shapejit::jit::isa_requirement(Isa::kScalar) == "any host");
}

TEST_CASE("isa: both x86 ISAs need F16C (f16 tables and outputs are widened and rounded with it)") {
  for (HostFeatures h : {x86_avx512(), x86_avx2()}) {
    h.f16c = false;
    CHECK(select_isa(h, std::nullopt).isa == Isa::kScalar);
  }
  HostFeatures h = x86_avx2();
  h.f16c = false;
  CHECK(shapejit::rt::isa_unsupported_reason(h, Isa::kAvx2) == "host lacks f16c");
}

TEST_CASE("isa: answers during static initialisation equal the answers after main") {
  const HostFeatures now = shapejit::jit::read_host_features();
  CHECK(g_early.fresh == now);
  CHECK(g_early.features == now);
  CHECK(shapejit::rt::detect_host_features() == now);
  const char* cap = std::getenv("SHAPEJIT_ISA");
  CHECK(g_early.selected == select_isa(now, cap ? std::optional<std::string_view>(cap) : std::nullopt).isa);
  CHECK(g_early.selected == shapejit::rt::process_isa_selection().isa);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    CAPTURE(shapejit::jit::isa_name(isa));
    CHECK(g_early.runs[static_cast<int>(isa)] == shapejit::rt::isa_unsupported_reason(now, isa).empty());
  }
#if defined(__x86_64__)
  CHECK(now.x86);
#elif defined(__aarch64__)
  CHECK(now.arm);
  CHECK(now.asimd);
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
TEST_CASE("isa: the rule agrees with the compiler's own cpuid probe (which checks XCR0 too)") {
  // libgcc's __builtin_cpu_supports reports avx2/fma only with the OS's ymm state enabled, and the
  // AVX-512 features only with its opmask and zmm state: an independent reading of the same rule.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  CHECK(shapejit::jit::host_runs(Isa::kAvx2) == avx2);
  CHECK(shapejit::jit::host_runs(Isa::kAvx512) == avx512);
}
#endif

TEST_CASE("isa: unsupported reasons name every missing feature or the wrong family") {
  CHECK(shapejit::rt::isa_unsupported_reason(x86_avx512(), Isa::kAvx512).empty());
  CHECK(shapejit::rt::isa_unsupported_reason(x86_avx512(), Isa::kScalar).empty());
  CHECK(shapejit::rt::isa_unsupported_reason(x86_avx512(), Isa::kNeon) == "host is not AArch64");
  CHECK(shapejit::rt::isa_unsupported_reason(arm_neon(), Isa::kAvx2) == "host is not x86-64");
  HostFeatures h = x86_avx512();
  h.avx512dq = h.avx512vl = false;
  CHECK(shapejit::rt::isa_unsupported_reason(h, Isa::kAvx512) == "host lacks avx512dq, avx512vl");
}

TEST_CASE("isa: the process selection is this host's, capped by the environment") {
  const HostFeatures host = shapejit::rt::detect_host_features();
  const char* cap = std::getenv("SHAPEJIT_ISA");
  const auto expect = select_isa(host, cap ? std::optional<std::string_view>(cap) : std::nullopt);
  const auto& actual = shapejit::rt::process_isa_selection();
  MESSAGE("host: " << actual.to_string());
  CHECK(actual.isa == expect.isa);
  CHECK(actual.reasons == expect.reasons);
  CHECK(shapejit::rt::host_supports(actual.isa));
  CHECK(shapejit::rt::host_supports(Isa::kScalar));
#if defined(__x86_64__)
  CHECK(host.x86);
  CHECK_FALSE(shapejit::rt::host_supports(Isa::kNeon));
#elif defined(__aarch64__)
  CHECK(host.arm);
  CHECK_FALSE(shapejit::rt::host_supports(Isa::kAvx2));
#endif
}

TEST_CASE("isa: ScopedIsaOverride pins, nests and restores; it refuses what the host lacks") {
  const Isa before = shapejit::rt::selected_isa();
  {
    shapejit::rt::ScopedIsaOverride pin(Isa::kScalar);
    CHECK(shapejit::rt::selected_isa() == Isa::kScalar);
    {
      shapejit::rt::ScopedIsaOverride inner(before);
      CHECK(shapejit::rt::selected_isa() == before);
    }
    CHECK(shapejit::rt::selected_isa() == Isa::kScalar);
  }
  CHECK(shapejit::rt::selected_isa() == before);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (shapejit::rt::host_supports(isa)) continue;
    CAPTURE(shapejit::jit::isa_name(isa));
    CHECK_THROWS_AS(shapejit::rt::ScopedIsaOverride{isa}, shapejit::Error);
    CHECK(shapejit::rt::selected_isa() == before);
  }
}
