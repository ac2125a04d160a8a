// Checking, before oneTBB tries, that the engine's worker threads can start. oneTBB starts its
// workers lazily, inside the first parallel region that wants them, and never retries a start that
// failed (pthread_create refused for want of address space for the stack, RLIMIT_AS, or of a
// thread, RLIMIT_NPROC): the worker stays "starting" for the life of the process, so every later
// call runs without it, even once memory is back (measured with oneTBB 2021.8 under RLIMIT_AS:
// the failing call completed on its own thread and no later call ever got a worker). The engine
// therefore starts an arena only after this check, and a failed check fails that call alone.
#pragma once

namespace shapejit::rt {

/// The worker threads an arena of `threads` threads makes oneTBB start: threads - 1, capped by
/// oneTBB's own bound on parallelism (tbb::global_control::max_allowed_parallelism).
int workers_for_arena(int threads);

/// Starts `workers` threads with oneTBB's worker stack size (tbb::global_control::
/// thread_stack_size), all alive at once, then lets them end and joins them. Throws
/// Error(kOutOfMemory) naming the thread and the reason when one cannot start. glibc keeps the
/// stacks of joined threads for reuse, so oneTBB's own starts right after find them ready.
/// Allocates nothing through operator new (tests/oom/first_call_test.cpp fails each of those).
void check_worker_threads_can_start(int workers);

}  // namespace shapejit::rt
