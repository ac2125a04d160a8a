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
//
// Fork (runtime/engine/fork_handlers.hpp, docs/fork.md). A forked child has none of oneTBB's worker
// threads, but oneTBB's copied state says they exist: an arena the parent used waits in the
// child for ever for workers (or for slots held by threads that are gone), and a new arena gets no
// worker at all and runs on the calling thread, after touching scheduler state another thread may
// have been changing when the fork copied it. So a child of a process whose engine had started
// oneTBB runs every call on the calling thread (the same results; oneTBB offers nothing better
// there), and never enters oneTBB. A child forked before the engine's first arena uses oneTBB as
// usual.
#include "runtime/engine/engine_arena.hpp"

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
#include <new>
#include <string>
#include <thread>

#include "runtime/engine/fork_handlers.hpp"
#include "runtime/engine/last_error.hpp"
#include "runtime/engine/tsan_sync.hpp"
#include "runtime/engine/worker_start_check.hpp"
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
    if (tbb_inherited_) return nullptr;  // a forked child: see the file comment
    if (!arena_) {
      const int n = threads_.load(std::memory_order_relaxed);
      // Before oneTBB tries to start them (runtime/engine/worker_start_check.hpp): a refused start
      // throws here, costing this call only.
      const int workers = workers_for_arena(n);
      if (workers > workers_checked_) {
        check_worker_threads_can_start(workers - workers_checked_);  // oneTBB keeps the others
        workers_checked_ = workers;
      }
      tbb_started_ = true;  // even a failed start may leave oneTBB state a child must not use
      auto fresh = std::make_shared<tbb::task_arena>(n);
      fresh->initialize(n);  // throws, leaving arena_ empty, when oneTBB cannot allocate
      arena_ = std::move(fresh);
    }
    return arena_;
  }

  // The fork handlers' part (runtime/engine/fork_handlers.hpp).
  void lock_for_fork() { mutex_.lock(); }
  void unlock_in_parent() { mutex_.unlock(); }
  void reset_in_child() {
    if (tbb_started_) {
      tbb_inherited_ = true;
      // Never destroyed: its destructor would wait in oneTBB for threads the child lacks.
      if (arena_) abandoned_arena_ = std::move(arena_);
    }
    new (&mutex_) std::mutex();  // fresh, as every lock in the child (fork_handlers.hpp)
  }

 private:
  std::mutex mutex_;
  std::atomic<int> threads_;
  std::shared_ptr<tbb::task_arena> arena_;  // null until a call needs it
  int workers_checked_ = 0;     // oneTBB workers known to start (it keeps them once started)
  bool tbb_started_ = false;    // this process (or the parent it was forked from) created an arena
  bool tbb_inherited_ = false;  // forked after that: calls never enter oneTBB
  std::shared_ptr<tbb::task_arena> abandoned_arena_;  // the parent's arena, kept alive and unused
};

// Created under a mutex the fork handlers take, so a fork never copies a half-made engine (a
// function-local static would leave its guard taken in the child). Never destroyed: worker
// threads of a still-running call may outlive static destruction.
std::atomic<Engine*> g_engine{nullptr};
std::mutex g_engine_creation;

Engine& engine() {
  if (Engine* e = g_engine.load(std::memory_order_acquire)) [[likely]] return *e;
  install_fork_handlers();  // normally done at load time (below); this retries a failure
  std::lock_guard lock(g_engine_creation);
  if (g_engine.load(std::memory_order_relaxed) == nullptr) g_engine.store(new Engine(), std::memory_order_release);
  return *g_engine.load(std::memory_order_relaxed);
}

// While the library loads, before any thread of the engine exists (runtime/engine/fork_handlers.hpp).
[[maybe_unused]] const bool g_fork_handlers_at_load = [] {
  try {
    return install_fork_handlers();
  } catch (const std::bad_alloc&) {  // engine() tries again, where a failure becomes a status
    return false;
  }
}();

}  // namespace

int default_num_threads() {
  static const int n = [] {
    const int from_env = env_threads();
    return from_env > 0 ? from_env : std::min(os_concurrency(), kMaxEngineThreads);
  }();
  return n;
}

int runnable_threads() { return std::clamp(g_tbb_concurrency_at_load, 1, kMaxEngineThreads); }

void set_engine_threads(int n) {
  if (n > kMaxEngineThreads)
    throw Error(Status::kInvalidArgument, "set_num_threads: n = " + std::to_string(n) +
                                              " exceeds the limit of " +
                                              std::to_string(kMaxEngineThreads) + " threads");
  engine().resize(n);
}

int engine_threads() { return engine().threads(); }

std::shared_ptr<tbb::task_arena> engine_arena() { return engine().arena(); }

void engine_fork_prepare() {
  g_engine_creation.lock();
  if (Engine* e = g_engine.load(std::memory_order_relaxed)) e->lock_for_fork();
}

void engine_fork_parent() {
  if (Engine* e = g_engine.load(std::memory_order_relaxed)) e->unlock_in_parent();
  g_engine_creation.unlock();
}

void engine_fork_child() {
  if (Engine* e = g_engine.load(std::memory_order_relaxed)) e->reset_in_child();
  new (&g_engine_creation) std::mutex();
}

EngineTasks::EngineTasks(size_t count) : count_(count), runners_(1) {
  if (count < 2 || engine_threads() < 2) return;
  arena_ = engine_arena();
  if (!arena_) return;  // a forked child that may not use oneTBB: the calling thread runs them all
  // The arena's own size: the engine may have been resized since engine_threads().
  runners_ = static_cast<int>(std::min<size_t>(count, static_cast<size_t>(arena_->max_concurrency())));
  if (runners_ < 2) arena_.reset();
}

namespace {

// One spin of a runner waiting for another's gate: the core's spin-wait hint.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The gates, then the tasks of one run, each handed out in index order. Claims need only
// atomicity: what the tasks read and write is ordered by the region's fork and join. A task is
// claimed only after the count of passed gates has reached them all (gates only read, so that
// count orders nothing else).
class TaskQueue {
 public:
  TaskQueue(size_t gates, size_t count) : gates_(gates), count_(count) {}
  /// The next unclaimed gate, or gates once all are claimed or the run stopped.
  size_t claim_gate() {
    if (stopped()) return gates_;
    return std::min(next_gate_.fetch_add(1, std::memory_order_relaxed), gates_);
  }
  void gate_passed() { passed_.fetch_add(1, std::memory_order_release); }
  /// Waits until every gate has passed (true) or the run stopped (false). The gates the others
  /// hold are running (a claim is followed by the gate's run), so the wait ends; it yields the
  /// core after a while, for a runner descheduled on a loaded host.
  bool wait_for_gates() const {
    for (unsigned spins = 0; passed_.load(std::memory_order_acquire) < gates_; ++spins) {
      if (stopped()) return false;
      if (spins < 4096) spin_pause();
      else std::this_thread::yield();
    }
    return true;
  }
  /// The next unclaimed task, or count once all are claimed or the run stopped.
  size_t claim() {
    if (stopped()) return count_;
    return std::min(next_.fetch_add(1, std::memory_order_relaxed), count_);
  }
  void fail() {
    failed_.store(true, std::memory_order_relaxed);
    stop();
  }
  void stop() { stopped_.store(true, std::memory_order_relaxed); }
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  size_t gates() const { return gates_; }
  size_t count() const { return count_; }

 private:
  std::atomic<size_t> next_gate_{0}, passed_{0}, next_{0};
  std::atomic<bool> stopped_{false}, failed_{false};
  size_t gates_, count_;
};

// Claims and runs gates, then (once every gate has passed) tasks, until none is left; a failed
// gate or an exception stops every runner's claims.
void drain(TaskQueue& queue, FunctionRef<bool(size_t)>& gate, FunctionRef<void(size_t)>& task) {
  try {
    for (size_t g = queue.claim_gate(); g < queue.gates(); g = queue.claim_gate()) {
      if (!gate(g)) {
        queue.fail();
        return;
      }
      queue.gate_passed();
    }
    if (!queue.wait_for_gates()) return;
    for (size_t i = queue.claim(); i < queue.count(); i = queue.claim()) task(i);
  } catch (...) {
    queue.stop();
    throw;
  }
}

// The functor given to task_arena::execute: `runners` runners, the calling thread running the
// first. A worker may run this functor for the calling thread (when the arena has no free
// slot), and the runners run on workers: both read this object on the calling thread's stack,
// so they read it only through pointers that ThreadSanitizer's fork edge orders
// (runtime/engine/tsan_sync.hpp; no cost outside that build).
struct TaskRegion {
  ParallelRegionSync* sync;
  FunctionRef<bool(size_t)>* gate;
  FunctionRef<void(size_t)>* task;
  TaskQueue* queue;
  int runners;

  void operator()() const {
    const TaskRegion& self = *ParallelRegionSync::enter_execute(this);
    const ParallelRegionSync::Task execute_task(*self.sync);
    // static_partitioner: one range of one runner per thread, offered to that thread's slot.
    // The blocked_range form, which copies the body into oneTBB's tasks: the index form keeps a
    // reference to it on this thread's stack, which the runners would read before their edge.
    tbb::parallel_for(
        tbb::blocked_range<int>(0, self.runners, 1),
        [sync = self.sync, region = &self](const tbb::blocked_range<int>& runners) {
          const ParallelRegionSync::Task runner(*sync);
          const TaskRegion& shared = *ParallelRegionSync::after_acquire(region);
          for (int r = runners.begin(); r != runners.end(); ++r) drain(*shared.queue, *shared.gate, *shared.task);
        },
        tbb::static_partitioner());
  }
};

}  // namespace

void EngineTasks::run(FunctionRef<void(size_t)> task) {
  run(0, [](size_t) { return true; }, task);
}

bool EngineTasks::run(size_t gates, FunctionRef<bool(size_t)> gate, FunctionRef<void(size_t)> task) {
  TaskQueue queue(gates, count_);
  if (arena_) {
    try {
      ParallelRegionSync sync;  // fork/join edges for ThreadSanitizer (runtime/engine/tsan_sync.hpp)
      const TaskRegion region_body{&sync, &gate, &task, &queue, runners_};
      const ParallelRegionSync::Region region(sync);
      arena_->execute(region_body);
    } catch (const std::exception&) {
      if (queue.stopped()) throw;
      // oneTBB failed, not a task: it allocates the runners' tasks as it forks.
    }
  }
  // One runner; or what oneTBB did not run (it ran out of memory, or the region was
  // cancelled). The region's join is behind us, so no other runner claims any more.
  drain(queue, gate, task);
  return !queue.failed();
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
