// The one rule for "can this host run code for an ISA": which CPU features and which OS-enabled
// register state each ISA needs, and the running host's answers. The engine's ISA selection,
// the JIT's pre-generation check, jitdump, the tests and the benchmarks all ask here.
#pragma once

#include <string>

#include "jit/isa.hpp"

namespace shapejit::jit {

/// The CPU facts the rule looks at; a plain struct so tests can pose any host.
struct HostFeatures {
  bool x86 = false;  ///< x86-64 family (candidates avx512, avx2, scalar)
  bool arm = false;  ///< AArch64 family (candidates neon, scalar)
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool os_avx_state = false;     ///< OSXSAVE set and XCR0 enables the xmm and ymm state
  bool os_avx512_state = false;  ///< XCR0 also enables the opmask and zmm state
  bool asimd = false;
  // Optional extensions a kernel variant may use (GemmKey::dot); no ISA requires them.
  bool avx512vnni = false;  ///< vpdpbusd (CPUID.7.0:ECX bit 11)
  bool dotprod = false;     ///< AArch64 sdot/udot (HWCAP_ASIMDDP)
  // A tuning fact, not a capability: where a measured choice differs between vendors' cores.
  bool intel = false;  ///< x86-64 vendor GenuineIntel (CPUID leaf 0)

  bool operator==(const HostFeatures&) const = default;
};

/// Reads this CPU's features now (cpuid and xgetbv on x86-64, the auxiliary vector on
/// AArch64). Safe at any time, static initialisation included: it touches no global.
HostFeatures read_host_features();

/// read_host_features(), read once per process.
const HostFeatures& host_features();

/// Why `host` cannot run code for `isa` ("host lacks avx512bw, avx512vl"), or "" when it can.
/// kScalar (plain C++) runs everywhere.
std::string isa_unsupported_reason(const HostFeatures& host, Isa isa);

/// What `isa` needs, for listings: "x86-64 with avx2, fma, f16c; OS-enabled ymm state".
std::string isa_requirement(Isa isa);

/// True when this host can run code for `isa` (kScalar always).
bool host_runs(Isa isa);

/// True when this host can run `isa`'s 4-way int8 dot product (the GemmKey::dot variant):
/// AVX-512 with VNNI, NEON with dotprod.
bool host_has_int8_dot(const HostFeatures& host, Isa isa);

/// The CPU's name as it reports it ("AMD EPYC 7B13"), or "" when it gives none.
std::string host_cpu_name();

}  // namespace shapejit::jit
