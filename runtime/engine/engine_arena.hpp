// The engine's own oneTBB task arena: its size is the engine's thread count, set through
// shapejit_set_num_threads()/set_num_threads() or SHAPEJIT_NUM_THREADS; and EngineTasks, the
// one way a call runs tasks on it.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <cstddef>
#include <memory>

#include "runtime/engine/function_ref.hpp"

namespace shapejit::rt {

/// Upper bound accepted by set_num_threads (an arena reserves a slot per thread).
inline constexpr int kMaxEngineThreads = 1024;

/// SHAPEJIT_NUM_THREADS when it is an integer in [1, kMaxEngineThreads] (other values are
/// ignored with one message on stderr), else the CPUs this process may run on (its affinity
/// mask, asked of the OS: oneTBB is not consulted, so the query cannot fail).
int default_num_threads();

/// The most threads an engine arena runs at once: oneTBB's default concurrency (the CPUs of the
/// process's affinity mask as oneTBB read them at load time), capped at kMaxEngineThreads. oneTBB
/// gives a larger arena no more workers than that (and warns once on stderr), so the PyTorch
/// extension refuses an explicit count above it and caps the count it follows from torch.
int runnable_threads();

/// Resizes the engine (n <= 0 restores the default). Safe while other threads run calls: they
/// finish in the arena they entered, which lives until its last user lets go. Throws
/// Error(kInvalidArgument) when n > kMaxEngineThreads.
void set_engine_threads(int n);

/// The engine's thread count (1 = every call runs on the calling thread).
int engine_threads();

/// The current arena, initialised: throws std::bad_alloc when oneTBB cannot set it up (nothing
/// is kept of the attempt; the next call tries again). Holding the pointer keeps that arena
/// alive across a concurrent resize. Null in a process forked after the engine had started
/// oneTBB, which must not be entered there: the caller then runs its work on its own thread.
std::shared_ptr<tbb::task_arena> engine_arena();

/// Tasks 0..count-1 of one call, to run on the engine arena. Everything the run needs from the
/// engine (the initialised arena) is acquired by the constructor, so a call can allocate all it
/// needs before its first write and then run without failing half way.
///
/// One runner per thread (at most one per task; the calling thread is one of them) claims the
/// tasks in index order from a shared counter, the next one whenever it finishes one: a call
/// costs one fork and one join however many tasks it has, and a thread that starts late
/// (a worker waking up, or descheduled on a loaded machine) takes fewer tasks instead of
/// holding the others up. Callers order tasks largest first, so the last to be claimed are
/// small.
class EngineTasks {
 public:
  /// Throws std::bad_alloc when the arena cannot be had; nothing ran then.
  explicit EngineTasks(size_t count);

  /// Runs task(i) once for every i. With one runner (a 1-thread engine, or one task) they all
  /// run on the calling thread in order, without entering the arena. oneTBB allocates while it
  /// forks; if that fails (or the region is cancelled) the calling thread claims and runs what
  /// is left, so the run still completes, with the same result when each task writes only its
  /// own outputs. An exception thrown by a task reaches the caller; no task is claimed after it
  /// (tasks already running finish).
  void run(FunctionRef<void(size_t)> task);

  /// run(task) behind gates: gate(g) for every g < gates first, claimed in order by the same
  /// runners in the same region (one fork for both phases), and task(i) only once every gate
  /// has returned true. A runner left without a gate to claim waits (spinning) for those the
  /// others hold, so no task starts before the last gate has passed. A gate that returns false
  /// stops the run: no task runs, and run returns false. A gate's exception is handled like a
  /// task's (no task runs). Gates may only read what tasks write.
  bool run(size_t gates, FunctionRef<bool(size_t)> gate, FunctionRef<void(size_t)> task);

 private:
  std::shared_ptr<tbb::task_arena> arena_;  // null: one runner, no arena
  size_t count_;
  int runners_;
};

}  // namespace shapejit::rt
