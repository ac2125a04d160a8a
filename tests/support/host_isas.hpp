// Which ISAs the tests can run generated code for, and the note a test makes when it calls
// generated code directly. Header-only, so any test binary can use it without linking the report
// (support/generated_code_report.hpp), which counts these notes.
#pragma once

#include <string>
#include <vector>

#include "jit/generated_code_observer.hpp"
#include "jit/host_features.hpp"
#include "jit/isa.hpp"

namespace shapejit::test {

/// The host runs generated code for `isa`: the engine's rule (jit/host_features.hpp), which is
/// safe during static initialisation, where doctest::skip decorators call this.
inline bool host_has(jit::Isa isa) { return isa != jit::Isa::kScalar && jit::host_runs(isa); }

/// The ISAs with a generator that the host runs, best first (jit/isa.hpp's table).
inline std::vector<jit::Isa> host_isas() {
  std::vector<jit::Isa> isas;
  for (jit::Isa isa : jit::generated_isas())
    if (host_has(isa)) isas.push_back(isa);
  return isas;
}

/// Why the host does not run generated `isa` code ("host lacks avx512f, ..."), or "".
inline std::string host_unsupported_reason(jit::Isa isa) {
  if (isa == jit::Isa::kScalar) return "scalar has no generated code";
  return jit::isa_unsupported_reason(jit::host_features(), isa);
}

/// Records that a test called generated `isa` code directly (the API paths report their own
/// calls). One call of run_and_compare or of a kernel is one run.
inline void note_direct_run(jit::Isa isa) {
  jit::notify_generated_code(jit::GeneratedCodeEvent::kRun, isa);
}

}  // namespace shapejit::test
