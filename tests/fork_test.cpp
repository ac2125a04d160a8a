// fork() while the engine works (docs/fork.md): the parent forks hundreds of times while other
// threads compile kernels of new shapes (so compilations are in flight at the fork) and one
// thread runs multi-thread calls (so oneTBB's workers are busy at the fork). Every child makes
// single- and multi-thread calls on shapes the parent had cached, on the shapes being compiled
// when it was forked and on shapes new to everyone, checks each result against the reference and
// exits; a child that does not exit within kChildTimeout has hung (it is killed and counted).
// The parent's own results are checked too: with dual-mapped code memory a child adding code
// where the parent also adds it would overwrite the parent's kernels.
// Skipped in sanitizer builds (see kAllocatorForkSafe).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"
#include "support/large_embag_call.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;
using shapejit::test::LargeEmbagCall;

// The sanitizers' allocators of this toolchain (GCC 12's AddressSanitizer, clang 14's
// ThreadSanitizer) do not hold their own locks across fork(): a child forked while another thread
// allocated can wait for ever inside the sanitizer's malloc (ASan: 3 of 60 forks hung; TSan: 1 of
// 300; each examined stack waited on a lock of the sanitizer's allocator, glibc's malloc resets its
// own). Those builds cannot run this test reliably, so they skip it; the release build runs it.
#if !defined(__has_feature)
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || __has_feature(address_sanitizer) || \
    __has_feature(thread_sanitizer)
constexpr bool kAllocatorForkSafe = false;
#else
constexpr bool kAllocatorForkSafe = true;
#endif

constexpr int kDefaultForks = 300;
constexpr auto kChildTimeout = std::chrono::seconds(20);

// SHAPEJIT_FORK_TEST_FORKS overrides the number of forks (longer hunts for rare hangs).
int forks() {
  if (const char* text = std::getenv("SHAPEJIT_FORK_TEST_FORKS"); text && *text) return std::max(1, std::atoi(text));
  return kDefaultForks;
}
constexpr int kCompilers = 2;        // threads compiling new shapes while the parent forks
constexpr int kChildrenAtOnce = 4;   // children alive at a time
constexpr int kCachedCases = 8;      // shapes compiled before the first fork
constexpr int kNewCases = 64;        // shapes only children ask for

// A case with its reference outputs.
struct Expected {
  EmbagCase c;
  std::unique_ptr<GuardedOutputs> want;
};

std::unique_ptr<Expected> make_expected(uint64_t seed, int64_t number) {
  shapejit::test::EmbagCaseOptions o;
  o.max_dim = 300;  // many distinct kernels, each quick to run
  o.max_table_elements = 1 << 14;
  o.max_indices = 256;
  o.max_output_elements = 1 << 13;
  auto e = std::make_unique<Expected>();
  e->c = shapejit::test::make_embag_case(seed, number, o);
  const shapejit_embedding_bag_args a = e->c.to_args();
  e->want = std::make_unique<GuardedOutputs>(shapejit::ref::embedding_bag_shapes(a), 0x5A);
  shapejit::ref::embedding_bag(a, e->want->data(EmbagOutput::kOutput), e->want->data(EmbagOutput::kOffset2bag),
                               e->want->data(EmbagOutput::kBagSize), e->want->data(EmbagOutput::kMaxIndices));
  return e;
}

// "" when the engine reproduces the reference, else what went wrong.
std::string run_and_compare(const Expected& e) {
  const shapejit_embedding_bag_args a = e.c.to_args();
  GuardedOutputs got(shapejit::ref::embedding_bag_shapes(a), 0xCD);
  if (got.run(a) != SHAPEJIT_OK) return e.c.summary() + ": " + shapejit_last_error();
  if (std::string d = shapejit::test::first_output_difference(*e.want, got, SHAPEJIT_F32); !d.empty())
    return e.c.summary() + ": " + d;
  return "";
}

std::string run_and_compare(const LargeEmbagCall& call) {
  GuardedOutputs got(call.shapes(), 0xCD);
  if (got.run(call.args()) != SHAPEJIT_OK) return std::string("large call: ") + shapejit_last_error();
  if (std::string d = call.difference(got); !d.empty()) return "large call: " + d;
  return "";
}

// What the children read from the memory they inherit.
struct Shared {
  std::vector<std::unique_ptr<Expected>> cached, fresh;
  LargeEmbagCall large{64, 2048, 0xF02C};
  // The case each compiler is running (null between cases): the child asks for it too, so it
  // asks for a key whose compilation was in flight when it was forked, if one was.
  std::atomic<const Expected*> compiling[kCompilers] = {};
};

// The child: single- then multi-thread calls of every kind; returns its exit status.
int child(const Shared& s, int fork_number) {
  for (int threads : {1, 2}) {
    if (shapejit_set_num_threads(threads) != SHAPEJIT_OK) {
      std::fprintf(stderr, "fork %d: set_num_threads(%d): %s\n", fork_number, threads, shapejit_last_error());
      return 2;
    }
    std::vector<const Expected*> cases;
    for (const auto& slot : s.compiling)
      if (const Expected* e = slot.load()) cases.push_back(e);
    cases.push_back(s.cached[size_t(fork_number) % s.cached.size()].get());
    cases.push_back(s.fresh[size_t(2 * fork_number + threads) % s.fresh.size()].get());
    for (const Expected* e : cases)
      if (std::string d = run_and_compare(*e); !d.empty()) {
        std::fprintf(stderr, "fork %d, %d threads: %s\n", fork_number, threads, d.c_str());
        return 1;
      }
    if (std::string d = run_and_compare(s.large); !d.empty()) {
      std::fprintf(stderr, "fork %d, %d threads: %s\n", fork_number, threads, d.c_str());
      return 1;
    }
  }
  return 0;
}

struct Child {
  pid_t pid;
  int number;
  std::chrono::steady_clock::time_point deadline;
};

}  // namespace

TEST_CASE("fork while kernels compile and a multi-thread call runs: every child calls, checks and exits" *
          doctest::skip(!kAllocatorForkSafe)) {
  REQUIRE(shapejit_set_num_threads(2) == SHAPEJIT_OK);
  Shared s;
  for (int i = 0; i < kCachedCases; ++i) s.cached.push_back(make_expected(0xF0CA, i));
  for (int i = 0; i < kNewCases; ++i) s.fresh.push_back(make_expected(0xF0F2, i));
  for (const auto& e : s.cached) REQUIRE(run_and_compare(*e) == "");
  // oneTBB started before the first fork, as in the processes this is about (and so no child
  // starts threads, which ThreadSanitizer forbids after a multi-threaded fork).
  REQUIRE(run_and_compare(s.large) == "");

  std::atomic<bool> stop{false};
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  auto record = [&](std::string what) {
    std::lock_guard lock(errors_mutex);
    errors.push_back(std::move(what));
  };
  // Some of the shapes compiled while children ran, run again once they are all gone: a child
  // that wrote its code over the parent's kernels shows there.
  std::vector<std::unique_ptr<Expected>> compiled_meanwhile[kCompilers];
  std::vector<std::thread> threads;
  for (int k = 0; k < kCompilers; ++k)
    threads.emplace_back([&, k] {
      // New shapes for as long as the forks last: most are keys nobody compiled yet.
      for (int64_t n = 0; !stop.load(); ++n) {
        auto e = make_expected(0xC0317 + uint64_t(k), n);
        s.compiling[k].store(e.get());
        std::string d = run_and_compare(*e);
        s.compiling[k].store(nullptr);
        if (!d.empty()) record("compiler " + std::to_string(k) + ": " + d);
        if (n % 4 == 0 && compiled_meanwhile[k].size() < 64) compiled_meanwhile[k].push_back(std::move(e));
      }
    });
  threads.emplace_back([&] {
    while (!stop.load())
      if (std::string d = run_and_compare(s.large); !d.empty()) record("multi-thread caller: " + d);
  });

  int hung = 0, failed = 0;
  std::vector<Child> alive;
  auto reap = [&](bool block) {
    for (size_t i = 0; i < alive.size();) {
      int status = 0;
      const pid_t done = waitpid(alive[i].pid, &status, WNOHANG);
      if (done == 0 && std::chrono::steady_clock::now() < alive[i].deadline) {
        ++i;
        continue;
      }
      if (done == 0) {  // hung: the failure this test exists for
        kill(alive[i].pid, SIGKILL);
        waitpid(alive[i].pid, &status, 0);
        ++hung;
        record("fork " + std::to_string(alive[i].number) + ": the child hung");
      } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failed;
        record("fork " + std::to_string(alive[i].number) + ": the child " +
               (WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                  : "was killed by signal " + std::to_string(WTERMSIG(status))));
      }
      alive.erase(alive.begin() + std::ptrdiff_t(i));
    }
    if (block && !alive.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  const auto t0 = std::chrono::steady_clock::now();
  const int count = forks();
  for (int f = 0; f < count; ++f) {
    while (alive.size() >= size_t(kChildrenAtOnce)) reap(true);
    std::fflush(nullptr);  // the child must not flush the parent's buffered output again
    const pid_t pid = fork();
    if (pid == 0) _exit(child(s, f));
    REQUIRE(pid > 0);
    alive.push_back({pid, f, std::chrono::steady_clock::now() + kChildTimeout});
    reap(false);
  }
  while (!alive.empty()) reap(true);
  stop.store(true);
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE(count << " forks in " << seconds << " s: " << hung << " children hung, " << failed << " failed");
  for (const std::string& e : errors) FAIL_CHECK(e);
  CHECK(hung == 0);
  CHECK(failed == 0);
  // The parent goes on working after its children: the kernels it compiled meanwhile, and shapes
  // new to it, on one and two threads.
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (const auto& list : compiled_meanwhile)
      for (const auto& e : list) CHECK(run_and_compare(*e) == "");
    for (const auto& e : s.fresh) CHECK(run_and_compare(*e) == "");
    CHECK(run_and_compare(s.large) == "");
  }
}
