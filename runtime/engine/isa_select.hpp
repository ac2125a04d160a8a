// Which instruction set the engine generates code for: the best one the host runs, capped by
// SHAPEJIT_ISA, with a reason for every candidate that was passed over. Every function here may
// be called during static initialisation.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit/host_features.hpp"
#include "jit/isa.hpp"

namespace shapejit::rt {

/// The CPU facts selection looks at (the one host-feature rule lives in jit/host_features.hpp).
using jit::HostFeatures;

/// The running CPU's features (cpuid/xgetbv or the auxiliary vector, read once per process;
/// safe during static initialisation).
HostFeatures detect_host_features();

/// Why `host` cannot run code for `isa` ("host lacks avx512bw, avx512vl"), or "" when it can.
using jit::isa_unsupported_reason;

/// The outcome of selection: the ISA and one line per candidate considered, best first.
struct IsaSelection {
  jit::Isa isa = jit::Isa::kScalar;
  std::vector<std::string> reasons;  ///< "avx512: host lacks avx512f", "avx2: selected", ...
  std::string cap_note;              ///< why SHAPEJIT_ISA was ignored ("" when it was honoured)

  /// One line: "isa avx2 (avx512: capped by SHAPEJIT_ISA=avx2; avx2: selected)".
  std::string to_string() const;
};

/// Pure selection: the best candidate of the host's family that `host` supports and that is not
/// above `cap` (the text of SHAPEJIT_ISA; nullopt or "" = no cap). An unknown name, or one of
/// the other family (neon on x86), is ignored and explained in cap_note, never an error: a
/// stray environment variable must not break a server, but it is reported once on stderr.
IsaSelection select_isa(const HostFeatures& host, std::optional<std::string_view> cap);

/// The process's selection: this host, capped by SHAPEJIT_ISA, computed once. The cap note is
/// printed to stderr once; with SHAPEJIT_VERBOSE=1 every candidate's reason is printed too.
const IsaSelection& process_isa_selection();

/// The ISA kernels are generated for: a ScopedIsaOverride's pin, else process_isa_selection().
jit::Isa selected_isa();

/// True when this host can run code for `isa` (kScalar always).
bool host_supports(jit::Isa isa);

/// Pins selected_isa() to one ISA for its lifetime (tests, comparisons). Process-wide and
/// nestable (the destructor restores the previous pin). Throws Error(kUnsupported) when the
/// host cannot run `isa`, so a test never executes code its CPU lacks.
class ScopedIsaOverride {
 public:
  explicit ScopedIsaOverride(jit::Isa isa);
  ~ScopedIsaOverride();
  ScopedIsaOverride(const ScopedIsaOverride&) = delete;
  ScopedIsaOverride& operator=(const ScopedIsaOverride&) = delete;

 private:
  int previous_;
};

}  // namespace shapejit::rt
