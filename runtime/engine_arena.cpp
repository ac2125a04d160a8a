// The engine arena. Resizing swaps in a new arena under a mutex; callers take a shared_ptr
// copy before entering, so an arena being resized away stays alive until its calls finish.
#include "runtime/engine_arena.hpp"

#include <oneapi/tbb/info.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "runtime/last_error.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

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

class Engine {
 public:
  Engine() : threads_(default_num_threads()), arena_(std::make_shared<tbb::task_arena>(threads_)) {}

  void resize(int n) {
    const int want = n <= 0 ? default_num_threads() : n;
    std::lock_guard lock(mutex_);
    if (want == threads_.load(std::memory_order_relaxed)) return;
    // The arena initialises lazily (on its first execute), so creating it here is cheap.
    arena_ = std::make_shared<tbb::task_arena>(want);
    threads_.store(want, std::memory_order_release);
  }

  int threads() const { return threads_.load(std::memory_order_acquire); }

  std::shared_ptr<tbb::task_arena> arena() {
    std::lock_guard lock(mutex_);
    return arena_;
  }

 private:
  std::mutex mutex_;
  std::atomic<int> threads_;
  std::shared_ptr<tbb::task_arena> arena_;
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
    return from_env > 0 ? from_env : std::max(1, tbb::info::default_concurrency());
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
