// The check of runtime/engine/worker_start_check.hpp. The probe threads block on a read lock the checker
// holds for writing, so they are all alive (their stacks all mapped) at the same time, as oneTBB's
// workers would be; releasing the lock lets them end.
#include "runtime/engine/worker_start_check.hpp"

#include <oneapi/tbb/global_control.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/engine/engine_arena.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

void* wait_for_release(void* lock) {
  auto* gate = static_cast<pthread_rwlock_t*>(lock);
  pthread_rwlock_rdlock(gate);
  pthread_rwlock_unlock(gate);
  return nullptr;
}

}  // namespace

int workers_for_arena(int threads) {
  const auto bound = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return std::max(0, std::min(threads, static_cast<int>(std::min<size_t>(bound, kMaxEngineThreads))) - 1);
}

void check_worker_threads_can_start(int workers) {
  if (workers <= 0) return;
  workers = std::min(workers, kMaxEngineThreads - 1);
  const size_t stack_bytes = tbb::global_control::active_value(tbb::global_control::thread_stack_size);
  pthread_attr_t attr;
  if (int e = pthread_attr_init(&attr); e != 0)
    throw Error(Status::kOutOfMemory, std::string("starting the engine's threads: pthread_attr_init: ") + std::strerror(e));
  int error = pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_rwlock_t gate = PTHREAD_RWLOCK_INITIALIZER;
  pthread_rwlock_wrlock(&gate);
  pthread_t started[kMaxEngineThreads];
  int count = 0;
  while (error == 0 && count < workers) {
    error = pthread_create(&started[count], &attr, wait_for_release, &gate);
    if (error == 0) ++count;
  }
  pthread_rwlock_unlock(&gate);
  for (int i = 0; i < count; ++i) pthread_join(started[i], nullptr);
  pthread_attr_destroy(&attr);
  pthread_rwlock_destroy(&gate);
  if (error != 0)
    throw Error(Status::kOutOfMemory,
                "starting the engine's threads: worker " + std::to_string(count + 1) + " of " +
                    std::to_string(workers) + " cannot start with a stack of " + std::to_string(stack_bytes >> 10) +
                    " KiB (" + std::strerror(error) + "); the call did not run, and the next one tries again");
}

}  // namespace shapejit::rt
