// The host-feature rule (host_features.hpp). Detection asks the CPU and the OS directly rather
// than through asmjit::CpuInfo::host(): asmjit 1.9 keeps its answer in a namespace-scope global
// that is constructed (zeroed) in static-initialisation order, so a query made before that
// constructor runs (a doctest::skip decorator, a global in a test) leaves every later answer
// empty for the whole process. A function-local static has no such order.
#include "jit/host_features.hpp"

#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define SHAPEJIT_X86_CPUID 1
#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#define SHAPEJIT_A64_HWCAP 1
#endif

namespace shapejit::jit {
namespace {

// One feature the rule asks for, and the name a reason uses for it.
struct Need {
  bool HostFeatures::*have;
  const char* name;
};

// What an ISA needs: its architecture, CPU features and OS-enabled register state. AVX-512
// kernels also carry VEX-encoded AVX2/FMA instructions (and call SLEEF's avx512f functions,
// built with them), hence avx2 and fma in its list; both x86 ISAs widen and round f16 tables
// and outputs with F16C (vcvtph2ps / vcvtps2ph; every AVX2 CPU has it). GCC's __builtin_cpu_supports applies the
// same OS checks (libgcc's cpuinfo: AVX, AVX2 and FMA only with XCR0's SSE and YMM bits; AVX-512
// only with OPMASK, ZMM and HI_ZMM as well). Constant data: usable before and after main.
struct Rule {
  bool HostFeatures::*family;
  const char* family_name;
  std::span<const Need> cpu, os;
};

constexpr Need kAvx512Cpu[] = {{&HostFeatures::avx512f, "avx512f"}, {&HostFeatures::avx512bw, "avx512bw"},
                               {&HostFeatures::avx512dq, "avx512dq"}, {&HostFeatures::avx512vl, "avx512vl"},
                               {&HostFeatures::avx2, "avx2"},         {&HostFeatures::fma, "fma"},
                               {&HostFeatures::f16c, "f16c"}};
constexpr Need kAvx512Os[] = {{&HostFeatures::os_avx_state, "ymm"},
                              {&HostFeatures::os_avx512_state, "opmask and zmm"}};
constexpr Need kAvx2Cpu[] = {{&HostFeatures::avx2, "avx2"}, {&HostFeatures::fma, "fma"},
                             {&HostFeatures::f16c, "f16c"}};
constexpr Need kAvx2Os[] = {{&HostFeatures::os_avx_state, "ymm"}};
constexpr Need kNeonCpu[] = {{&HostFeatures::asimd, "asimd"}};

constexpr Rule kAvx512Rule{&HostFeatures::x86, "x86-64", kAvx512Cpu, kAvx512Os};
constexpr Rule kAvx2Rule{&HostFeatures::x86, "x86-64", kAvx2Cpu, kAvx2Os};
constexpr Rule kNeonRule{&HostFeatures::arm, "AArch64", kNeonCpu, {}};

const Rule* rule_of(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return &kAvx512Rule;
    case Isa::kAvx2: return &kAvx2Rule;
    case Isa::kNeon: return &kNeonRule;
    case Isa::kScalar: return nullptr;
  }
  return nullptr;
}

// "a, b" of the names in `needs` that `host` lacks (all of them when host is null).
std::string join_missing(const HostFeatures* host, std::span<const Need> needs) {
  std::string s;
  for (const Need& n : needs) {
    if (host != nullptr && host->*n.have) continue;
    if (!s.empty()) s += ", ";
    s += n.name;
  }
  return s;
}

#if defined(SHAPEJIT_X86_CPUID)
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return uint64_t{hi} << 32 | lo;
}
#endif

}  // namespace

HostFeatures read_host_features() {
  HostFeatures f;
#if defined(__x86_64__)
  f.x86 = true;
#if defined(SHAPEJIT_X86_CPUID)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) != 0) {
    char vendor[12];  // EBX, EDX, ECX
    std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
    f.intel = std::memcmp(vendor, "GenuineIntel", 12) == 0;
  }
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  f.fma = (c & bit_FMA) != 0;
  f.f16c = (c & bit_F16C) != 0;
  const bool osxsave = (c & bit_OSXSAVE) != 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) != 0) {
    f.avx2 = (b & bit_AVX2) != 0;
    f.avx512f = (b & bit_AVX512F) != 0;
    f.avx512dq = (b & bit_AVX512DQ) != 0;
    f.avx512bw = (b & bit_AVX512BW) != 0;
    f.avx512vl = (b & bit_AVX512VL) != 0;
    f.avx512vnni = (c & (1u << 11)) != 0;
  }
  if (osxsave) {  // xgetbv faults unless the OS set CR4.OSXSAVE, which this bit reports
    constexpr uint64_t kSseYmm = 0x6, kOpmaskZmm = 0xE0;
    const uint64_t xcr0 = read_xcr0();
    f.os_avx_state = (xcr0 & kSseYmm) == kSseYmm;
    f.os_avx512_state = f.os_avx_state && (xcr0 & kOpmaskZmm) == kOpmaskZmm;
  }
#endif
#elif defined(__aarch64__)
  f.arm = true;
#if defined(SHAPEJIT_A64_HWCAP)
  f.asimd = (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#if defined(HWCAP_ASIMDDP)
  f.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#else
  f.asimd = true;  // no way to ask; Advanced SIMD is part of every AArch64 ABI we build for
#endif
#endif
  return f;
}

const HostFeatures& host_features() {
  static const HostFeatures features = read_host_features();
  return features;
}

std::string isa_unsupported_reason(const HostFeatures& host, Isa isa) {
  const Rule* rule = rule_of(isa);
  if (rule == nullptr) return "";
  if (!(host.*rule->family)) return std::string("host is not ") + rule->family_name;
  if (std::string missing = join_missing(&host, rule->cpu); !missing.empty()) return "host lacks " + missing;
  if (std::string missing = join_missing(&host, rule->os); !missing.empty())
    return "the OS has not enabled the " + missing + " register state (XCR0)";
  return "";
}

bool host_has_int8_dot(const HostFeatures& host, Isa isa) {
  if (!isa_unsupported_reason(host, isa).empty()) return false;
  if (isa == Isa::kAvx512) return host.avx512vnni;
  if (isa == Isa::kNeon) return host.dotprod;
  return false;
}

std::string isa_requirement(Isa isa) {
  const Rule* rule = rule_of(isa);
  if (rule == nullptr) return "any host";
  std::string s = std::string(rule->family_name) + " with " + join_missing(nullptr, rule->cpu);
  if (!rule->os.empty()) s += "; OS-enabled " + join_missing(nullptr, rule->os) + " state";
  return s;
}

bool host_runs(Isa isa) { return isa_unsupported_reason(host_features(), isa).empty(); }

std::string host_cpu_name() {
#if defined(SHAPEJIT_X86_CPUID)
  unsigned regs[12] = {};
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000004u) return "";
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
  char text[sizeof regs + 1] = {};
  std::memcpy(text, regs, sizeof regs);
  std::string name(text);
  const size_t first = name.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return name.substr(first, name.find_last_not_of(' ') - first + 1);
#else
  return "";
#endif
}

}  // namespace shapejit::jit
