// A hook that sees generated code being added to a runtime and run, so a test binary can say
// which ISAs executed generated code (tests/support/generated_code_report.hpp). The engine never
// installs an observer; without one, each event costs one atomic load and a branch per call
// (never per bag or tile).
#pragma once

#include <atomic>

#include "jit/isa.hpp"

namespace shapejit::jit {

/// What an observer is told.
enum class GeneratedCodeEvent : int {
  kKernelAdded = 0,  ///< a generated kernel was added to a JitRuntime (jit/runtime_add.cpp)
  kRun = 1,          ///< one call (API call or direct test call) executed generated code
};

/// Called on every event, from any thread; must be thread-safe and must not throw.
using GeneratedCodeObserver = void (*)(GeneratedCodeEvent event, Isa isa);

/// Installs `observer` for the whole process (nullptr removes it); returns the previous one.
GeneratedCodeObserver set_generated_code_observer(GeneratedCodeObserver observer);

namespace detail {
extern std::atomic<GeneratedCodeObserver> g_generated_code_observer;
}  // namespace detail

/// Tells the installed observer, if any, that `event` happened for `isa`.
inline void notify_generated_code(GeneratedCodeEvent event, Isa isa) {
  if (const GeneratedCodeObserver f = detail::g_generated_code_observer.load(std::memory_order_acquire))
    f(event, isa);
}

}  // namespace shapejit::jit
