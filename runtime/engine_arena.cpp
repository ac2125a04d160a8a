// The engine arena. Resizing drops the arena under a mutex (the next user creates the new one);
// callers take a shared_ptr copy before entering, so an arena being resized away stays alive
// until its calls finish.
//
// Out of memory. oneTBB runs its lazy set-ups under a do-once whose state an exception leaves
// "pending" for ever: every later attempt then spins in sched_yield. Two of them sit on the
// engine's first parallel call: the arena's initialisation inside execute() (which allocates
// through oneTBB's allocator) and oneTBB's process-wide read of the CPU mask (which allocates
// with operator new). So the engine initialises each arena itself, through the overload without
// the do-once (a failure throws and the next call starts over with a new arena), and has oneTBB
// read the CPU mask while the library loads, before any call can meet a failed allocation.
// tests/oom/first_call_test.cpp fails each operator-new allocation of a first parallel call in
// a fresh process (without the load-time read, one of them hangs the next call).
#include "runtime/engine_arena.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/last_error.hpp"
#include "runtime/tsan_sync.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

// See the file comment: oneTBB's CPU-mask read, done at load time rather than inside a call.
[[maybe_unused]] const int g_tbb_concurrency_at_load = tbb::info::default_concurrency();

// SHAPEJIT_NUM_THREADS as a thread count, or 0 when unset or unusable (reported once).
int env_threads() {
  const char* text = std::getenv("SHAPEJIT_NUM_THREADS");
  if (text == nullptr || *text == '\0') return 0;
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > kMaxEngineThreads) {
    std::fprintf(stderr,
                 "shapejit: SHAPEJIT_NUM_THREADS=%s is not an integer in [1, %d]; ignored\n", text,
                 kMaxEngineThreads);
    return 0;
  }
  return static_cast<int>(v);
}

// The CPUs in this thread's affinity mask (what oneTBB counts too), else the machine's.
int os_concurrency() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  const unsigned n = std::thread::hardware_concurrency();  // more CPUs than a cpu_set_t holds
  return std::clamp(static_cast<int>(n), 1, kMaxEngineThreads);
}

class Engine {
 public:
  Engine() : threads_(default_num_threads()) {}

  void resize(int n) {
    const int want = n <= 0 ? default_num_threads() : n;
    std::lock_guard lock(mutex_);
    if (want == threads_.load(std::memory_order_relaxed)) return;
    arena_.reset();  // its users keep it alive; the next arena() creates one of the new size
    threads_.store(want, std::memory_order_release);
  }

  int threads() const { return threads_.load(std::memory_order_acquire); }

  std::shared_ptr<tbb::task_arena> arena() {
    std::lock_guard lock(mutex_);
    if (!arena_) {
      const int n = threads_.load(std::memory_order_relaxed);
      auto fresh = std::make_shared<tbb::task_arena>(n);
      fresh->initialize(n);  // throws, leaving arena_ empty, when oneTBB cannot allocate
      arena_ = std::move(fresh);
    }
    return arena_;
  }

 private:
  std::mutex mutex_;
  std::atomic<int> threads_;
  std::shared_ptr<tbb::task_arena> arena_;  // null until a call needs it
};

// Never destroyed: worker threads of a still-running call may outlive static destruction.
Engine& engine() {
  static Engine* e = new Engine();
  return *e;
}

}  // namespace

int default_num_threads() {
  static const int n = [] {
    const int from_env = env_threads();
    return from_env > 0 ? from_env : std::min(os_concurrency(), kMaxEngineThreads);
  }();
  return n;
}

void set_engine_threads(int n) {
  if (n > kMaxEngineThreads)
    throw Error(Status::kInvalidArgument, "set_num_threads: n = " + std::to_string(n) +
                                              " exceeds the limit of " +
                                              std::to_string(kMaxEngineThreads) + " threads");
  engine().resize(n);
}

int engine_threads() { return engine().threads(); }

std::shared_ptr<tbb::task_arena> engine_arena() { return engine().arena(); }

EngineTasks::EngineTasks(size_t count) : arena_(engine_arena()), done_(count, 0) {}

namespace {

// The functor given to task_arena::execute. A worker may run it for the calling thread (when the
// arena has no free slot), and the tasks run on workers: both read this object on the calling
// thread's stack, so they read it only through pointers that ThreadSanitizer's fork edge orders
// (runtime/tsan_sync.hpp; no cost outside that build).
struct TaskRegion {
  ParallelRegionSync* sync;
  FunctionRef<void(size_t)>* task;
  std::vector<unsigned char>* done;
  std::atomic<bool>* task_threw;

  void operator()() const {
    const TaskRegion& self = *ParallelRegionSync::enter_execute(this);
    const ParallelRegionSync::Task execute_task(*self.sync);
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, self.done->size(), 1),
        [sync = self.sync, region = &self](const tbb::blocked_range<size_t>& r) {
          const ParallelRegionSync::Task range_task(*sync);
          const TaskRegion& shared = *ParallelRegionSync::after_acquire(region);
          for (size_t i = r.begin(); i != r.end(); ++i) {
            try {
              (*shared.task)(i);
            } catch (...) {
              shared.task_threw->store(true, std::memory_order_relaxed);
              throw;
            }
            (*shared.done)[i] = 1;
          }
        },
        tbb::simple_partitioner());
  }
};

}  // namespace

void EngineTasks::run(FunctionRef<void(size_t)> task) {
  std::atomic<bool> task_threw{false};
  try {
    ParallelRegionSync sync;  // fork/join edges for ThreadSanitizer (runtime/tsan_sync.hpp)
    const TaskRegion region_body{&sync, &task, &done_, &task_threw};
    const ParallelRegionSync::Region region(sync);
    arena_->execute(region_body);
  } catch (const std::exception&) {
    if (task_threw.load(std::memory_order_relaxed)) throw;
    // oneTBB failed, not a task: it allocates its tasks as it splits the range.
  }
  // Tasks oneTBB did not run (it ran out of memory, or its region was cancelled) run here. It
  // has waited for every task it started (the region's join is behind us), so none runs twice.
  for (size_t i = 0; i < done_.size(); ++i)
    if (!done_[i]) task(i);
}

}  // namespace shapejit::rt

namespace shapejit {

void set_num_threads(int n) { rt::set_engine_threads(n); }

int num_threads() { return rt::engine_threads(); }

}  // namespace shapejit

extern "C" shapejit_status shapejit_set_num_threads(int32_t n) {
  return shapejit::rt::guarded([&] { shapejit::rt::set_engine_threads(n); });
}

extern "C" int32_t shapejit_get_num_threads(void) {
  try {
    return shapejit::rt::engine_threads();
  } catch (...) {  // cannot fail in practice (first use allocates a few bytes); never throw into C
    return 1;
  }
}
