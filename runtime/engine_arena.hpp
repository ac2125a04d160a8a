// The engine's own oneTBB task arena: its size is the engine's thread count, set through
// shapejit_set_num_threads()/set_num_threads() or SHAPEJIT_NUM_THREADS.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <memory>

namespace shapejit::rt {

/// Upper bound accepted by set_num_threads (an arena reserves a slot per thread).
inline constexpr int kMaxEngineThreads = 1024;

/// SHAPEJIT_NUM_THREADS when it is an integer in [1, kMaxEngineThreads] (other values are
/// ignored with one message on stderr), else oneTBB's default concurrency (the CPUs this
/// process may run on).
int default_num_threads();

/// Resizes the engine (n <= 0 restores the default). Safe while other threads run calls: they
/// finish in the arena they entered, which lives until its last user lets go. Throws
/// Error(kInvalidArgument) when n > kMaxEngineThreads.
void set_engine_threads(int n);

/// The engine's thread count (1 = every call runs on the calling thread).
int engine_threads();

/// The current arena. Holding the pointer keeps that arena alive across a concurrent resize.
std::shared_ptr<tbb::task_arena> engine_arena();

}  // namespace shapejit::rt
