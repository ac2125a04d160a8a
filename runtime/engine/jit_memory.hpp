// Where generated code lives: JIT runtimes whose code is never writable and executable at the
// same time (W^X). asmjit 1.9's default JitAllocator maps its blocks read-write-execute, so
// every JitRuntime the engine creates comes from make_jit_runtime() instead.
#pragma once

#include <asmjit/core.h>

#include <memory>

namespace shapejit::rt {

/// How a runtime keeps code W^X.
enum class CodeMemoryScheme {
  kAuto,              ///< dual mapping when this process can create one and the perf map
                      ///< (SHAPEJIT_PERF_MAP, runtime/profiling/perf_map.hpp) is off, else write-then-protect
  kDualMapping,       ///< asmjit's dual mapping: one memfd mapped r-x (run) and rw- (written)
  kWriteThenProtect,  ///< each kernel in its own pages: mapped rw-, written, then made r-x
};

/// A JitRuntime following `scheme` (kAuto: the probed choice). A dual-mapped runtime falls back
/// to write-then-protect for any kernel whose dual mapping fails (memfd refused by a sandbox,
/// /dev/shm mounted noexec), so adding code never fails only because of the scheme.
std::unique_ptr<asmjit::JitRuntime> make_jit_runtime(CodeMemoryScheme scheme = CodeMemoryScheme::kAuto);

/// True when this process can create a dual mapping (probed once with one page).
bool dual_mapping_available();

/// The scheme kAuto resolves to in this process.
CodeMemoryScheme default_code_memory_scheme();

}  // namespace shapejit::rt
