// The process whose very first parallel call meets a failed allocation (issue 10, item 3): run as
// a child of shapejit_oom_tests, so that oneTBB initialises for the first time inside that call.
#pragma once

#include <cstdint>

namespace shapejit::test::oom {

/// Environment variable naming the child's scenario, k and failure mode:
/// "<embag|linear> <k> <once|persistent>".
inline constexpr const char* kFirstCallEnv = "SHAPEJIT_OOM_FIRST_CALL";

/// Exit codes of the child.
enum FirstCallExit : int {
  kFirstCallFailed = 0,   ///< the injected failure fired and every check passed
  kFirstCallCheckFailed = 1,
  kFirstCallClean = 3,    ///< the call made fewer than k allocations (the sweep is complete)
};

/// Runs the child: the scenario's first call with allocation k failing, then a clean call.
int run_first_call_child(const char* spec);

}  // namespace shapejit::test::oom
