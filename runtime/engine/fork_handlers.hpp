// What the engine does around fork() (docs/fork.md). A fork copies the process's memory but only
// the forking thread: a lock another thread held stays held in the child for ever, and work
// another thread had in flight (a kernel being compiled, a parallel call on oneTBB's workers)
// never finishes there. The engine's pthread_atfork handlers therefore
//   prepare: take the engine's locks, always in this order: engine creation, engine (arena),
//            kernel caches' creation, the embedding-bag kernel cache, the GEMM
//            kernel cache, jitdump writer;
//   parent:  release them (reverse order);
//   child:   reset what belonged to threads the child does not have (the cache drops compilations
//            in flight, which the child compiles again, and stops adding code to the JIT memory it
//            shares with the parent; the engine stops using oneTBB when the parent had started it)
//            and give every lock a fresh state: constructed again over the held one, not unlocked,
//            because glibc records a write-locked rwlock's owner by thread id, which the forking
//            thread does not keep in the child (unlocking there corrupts the lock).
// No engine code path takes one of these locks while holding another, so the order cannot
// deadlock with a running call. Locks not in the list need nothing: statistics are atomics, the
// last error is per thread, the perf map is written without a lock, glibc resets malloc and stdio.
#pragma once

namespace shapejit::rt {

/// Registers the handlers once per process; later calls return at once. Called while the library
/// loads (before any thread of ours exists), so that no lazily created engine state can be
/// caught half made by a fork. Throws std::bad_alloc when pthread_atfork cannot register them.
bool install_fork_handlers();

// Each component's part, called only by the handlers, in the order above.
void engine_fork_prepare();
void engine_fork_parent();
void engine_fork_child();
void kernel_cache_fork_prepare();
void kernel_cache_fork_parent();
void kernel_cache_fork_child();
// perf_jitdump_fork_*: runtime/profiling/perf_jitdump.hpp

}  // namespace shapejit::rt
