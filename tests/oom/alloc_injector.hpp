// Counting replacements of the global operator new (every form: plain, array, nothrow, aligned)
// that can be told to fail one allocation. They are linked only into shapejit_oom_tests: replacing
// operator new changes it for the whole executable, so no other suite may share it.
//
// What they reach: every allocation made through operator new by any thread of the process while
// armed (the engine's vectors and strings, the kernel cache, asmjit's C++ objects, oneTBB's own
// `new`, libstdc++). What they do not reach: malloc called directly (asmjit's zones and code
// buffers, oneTBB's task and arena memory, which goes through tbbmalloc or malloc) and mmap.
#pragma once

#include <cstdint>

namespace shapejit::test::oom {

/// What one armed stretch saw.
struct AllocCount {
  int64_t allocations = 0;  ///< operator new calls (including the one made to fail)
  bool fired = false;       ///< whether the failure was injected
};

/// Whether one allocation fails or every one from then on (memory that stays exhausted).
enum class FailureMode { kOnce, kPersistent };

/// Starts counting the allocations of every thread; the fail_at-th (1-based) then fails (and,
/// when persistent, every later one): the throwing forms throw std::bad_alloc, the nothrow forms
/// return nullptr. fail_at = 0 only counts.
void arm(int64_t fail_at, FailureMode mode = FailureMode::kOnce);

/// Stops counting and failing; returns what happened since arm().
AllocCount disarm();

/// Arms on construction, disarms on destruction (so a failing CHECK cannot leave it armed).
class ScopedFailure {
 public:
  explicit ScopedFailure(int64_t fail_at, FailureMode mode = FailureMode::kOnce) { arm(fail_at, mode); }
  ~ScopedFailure() { finish(); }
  ScopedFailure(const ScopedFailure&) = delete;
  ScopedFailure& operator=(const ScopedFailure&) = delete;
  /// Disarms now (idempotent) and returns the count.
  AllocCount finish();

 private:
  bool done_ = false;
  AllocCount result_;
};

}  // namespace shapejit::test::oom
