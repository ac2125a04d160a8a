// Which ISAs ran generated code in a test run. Every test binary's main
// (tests/main.cpp) counts, through the engine's observer hook (jit/generated_code_observer.hpp),
// the generated kernels added and the calls that executed generated code, per ISA, and ends
// with one line such as
//   generated code executed: avx2 9,830 runs (412 kernels generated); avx512 SKIPPED (host lacks
//   avx512f, ...); neon not this architecture
// SHAPEJIT_REQUIRE_ISAS=avx512,avx2,neon turns "no generated code of a listed ISA ran" into a
// failure. Under ctest each source file is its own process, so each one appends its counts to
// the file named by SHAPEJIT_ISA_TALLY and the closing ctest entry (shapejit_tests
// --isa-tally-check FILE, tests/CMakeLists.txt) sums them and applies the requirement.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "jit/isa.hpp"
#include "support/host_isas.hpp"

namespace shapejit::test {

/// Generated-code counts of one ISA.
struct IsaCounts {
  int64_t kernels = 0;  ///< generated kernels added to a JitRuntime
  int64_t runs = 0;     ///< calls that executed generated code
};

/// Counts per ISA (indexed by the Isa's value) and the processes they come from.
struct IsaTally {
  std::array<IsaCounts, 4> by_isa{};
  int processes = 1;
  IsaCounts& operator[](jit::Isa isa) { return by_isa[static_cast<size_t>(isa)]; }
  const IsaCounts& operator[](jit::Isa isa) const { return by_isa[static_cast<size_t>(isa)]; }
};

/// Installs the counting observer; main() calls it before running the tests.
void start_counting();
/// This process's counts so far.
IsaTally counted();

/// "generated code executed: ..." for `tally` on this host (`where` is inserted after
/// "executed", e.g. " in 23 test processes").
std::string summary_line(const IsaTally& tally, const std::string& where = "");

/// Applies SHAPEJIT_REQUIRE_ISAS (`required`, comma-separated; empty = no requirement) to
/// `tally`: one message per unmet or unknown entry, none when it holds.
std::vector<std::string> unmet_requirements(const IsaTally& tally, const std::string& required);

/// After the tests: prints this process's summary, then either appends the counts to
/// $SHAPEJIT_ISA_TALLY (the closing ctest entry applies the requirement) or applies
/// SHAPEJIT_REQUIRE_ISAS here. Returns the process's exit status given doctest's.
int finish_report(int doctest_status);

/// The closing ctest entry: sums the counts appended to `path`, prints the summary and applies
/// SHAPEJIT_REQUIRE_ISAS. Returns the exit status (0 when the requirement holds).
int check_tally_file(const std::string& path);

}  // namespace shapejit::test
