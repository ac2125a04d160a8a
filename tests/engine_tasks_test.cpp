// EngineTasks, the one way a call runs tasks on the engine arena: each task exactly once, a
// task's exception reaches the caller, and tasks oneTBB does not run (here: a region cancelled
// from outside, the same path as oneTBB running out of memory part way) run on the calling
// thread, so a call never returns with some of its outputs unwritten.
#include <doctest/doctest.h>
#include <oneapi/tbb/task.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "runtime/engine_arena.hpp"

namespace {

using shapejit::rt::EngineTasks;

struct EngineThreads {
  explicit EngineThreads(int n) { shapejit::rt::set_engine_threads(n); }
  ~EngineThreads() { shapejit::rt::set_engine_threads(0); }
};

bool each_once(const std::vector<std::atomic<int>>& runs) {
  return std::all_of(runs.begin(), runs.end(), [](const std::atomic<int>& r) { return r.load() == 1; });
}

}  // namespace

TEST_CASE("EngineTasks: every task runs exactly once, on 1 to 4 threads") {
  for (int threads = 1; threads <= 4; ++threads) {
    EngineThreads engine(threads);
    std::vector<std::atomic<int>> runs(37);
    EngineTasks tasks(runs.size());
    tasks.run([&](size_t i) { runs[i].fetch_add(1); });
    CAPTURE(threads);
    CHECK(each_once(runs));
  }
}

TEST_CASE("EngineTasks: an exception thrown by a task reaches the caller") {
  EngineThreads engine(2);
  EngineTasks tasks(16);
  CHECK_THROWS_AS(tasks.run([](size_t i) {
                    if (i == 5) throw std::runtime_error("task 5");
                  }),
                  std::runtime_error);
}

TEST_CASE("EngineTasks: tasks oneTBB skips still run, once each, on the calling thread") {
  for (int threads : {1, 2, 4}) {
    EngineThreads engine(threads);
    std::vector<std::atomic<int>> runs(64);
    EngineTasks tasks(runs.size());
    // The first task cancels the region: oneTBB then skips the tasks it has not started, as it
    // stops when it cannot allocate more of them.
    tasks.run([&](size_t i) {
      if (i == 0) tbb::task::current_context()->cancel_group_execution();
      runs[i].fetch_add(1);
    });
    CAPTURE(threads);
    CHECK(each_once(runs));
  }
}
