// The first parallel call of a process meets a failed allocation, for every k: it returns
// SHAPEJIT_OUT_OF_MEMORY with its outputs untouched (or SHAPEJIT_OK with the right result), and
// the next call succeeds. oneTBB initialises once per process, so each k runs in a fresh child
// process (this executable re-run with SHAPEJIT_OOM_FIRST_CALL); a child that does not finish
// within kChildTimeout is killed and reported as a hang.
#include "oom/first_call.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "oom/alloc_injector.hpp"
#include "oom/oom_cases.hpp"
#include "support/embag_cases.hpp"

extern char** environ;

namespace shapejit::test::oom {
namespace {

using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr auto kChildTimeout = std::chrono::seconds(60);

int fail(const std::string& what) {
  std::fprintf(stderr, "first call: %s\n", what.c_str());
  return kFirstCallCheckFailed;
}

bool same_bytes(const GuardedOutputs& a, const GuardedOutputs& b) {
  for (EmbagOutput w : shapejit::test::kAllEmbagOutputs) {
    const auto x = a.bytes(w), y = b.bytes(w);
    if (x.size() != y.size() || !std::equal(x.begin(), x.end(), y.begin())) return false;
  }
  return true;
}

int embag_child(int64_t k, FailureMode mode) {
  const EmbagInputs in(kEmbagVariants[0], 40);  // sum: the mode that used to zero counts first
  GuardedOutputs first(in.shapes(), 0xCD), second(in.shapes(), 0x11);
  shapejit_status status;
  AllocCount count;
  {
    ScopedFailure failure(k, mode);
    status = first.run(in.args());
    count = failure.finish();
  }
  if (!first.check_guards().empty()) return fail("guard bytes changed: " + first.check_guards());
  if (status != SHAPEJIT_OK && status != SHAPEJIT_OUT_OF_MEMORY)
    return fail("status " + std::to_string(status) + ": " + shapejit_last_error());
  if (status == SHAPEJIT_OUT_OF_MEMORY && !first.untouched()) return fail("a failed call wrote its outputs");
  if (second.run(in.args()) != SHAPEJIT_OK) return fail(std::string("the next call failed: ") + shapejit_last_error());
  if (status == SHAPEJIT_OK && !same_bytes(first, second)) return fail("the two calls' results differ");
  return count.fired ? kFirstCallFailed : kFirstCallClean;
}

int linear_child(int64_t k, FailureMode mode) {
  LinearCase c(kLinearVariants[2]);  // shared input, large enough for the engine
  shapejit_status status;
  AllocCount count;
  {
    ScopedFailure failure(k, mode);
    status = c.run();
    count = failure.finish();
  }
  if (status != SHAPEJIT_OK && status != SHAPEJIT_OUT_OF_MEMORY)
    return fail("status " + std::to_string(status) + ": " + shapejit_last_error());
  if (status == SHAPEJIT_OUT_OF_MEMORY && !c.untouched()) return fail("a failed run wrote its outputs");
  const std::vector<unsigned char> after_first = c.output_bytes();
  c.reset_outputs();
  if (c.run() != SHAPEJIT_OK) return fail(std::string("the next run failed: ") + shapejit_last_error());
  if (status == SHAPEJIT_OK && after_first != c.output_bytes()) return fail("the two runs' results differ");
  return count.fired ? kFirstCallFailed : kFirstCallClean;
}

// Runs this executable as the child for (scenario, k); its exit code, or -1 after a timeout.
int run_child(const std::string& scenario, int64_t k, const std::string& mode) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "SHAPEJIT_NUM_THREADS=", 21) != 0) env_text.emplace_back(*e);
  env_text.push_back(std::string(kFirstCallEnv) + "=" + scenario + " " + std::to_string(k) + " " + mode);
  env_text.push_back("SHAPEJIT_NUM_THREADS=2");  // a parallel call even on a one-CPU runner
  std::vector<char*> env;
  for (std::string& s : env_text) env.push_back(s.data());
  env.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, self, nullptr, nullptr, argv, env.data()) == 0);
  const auto deadline = std::chrono::steady_clock::now() + kChildTimeout;
  for (;;) {
    int wstatus = 0;
    const pid_t done = waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

int run_first_call_child(const char* spec) {
  char scenario[16] = {}, mode_name[16] = {};
  long long k = 0;
  if (std::sscanf(spec, "%15s %lld %15s", scenario, &k, mode_name) != 3 || k < 1)
    return fail(std::string("bad spec: ") + spec);
  const FailureMode mode = std::string(mode_name) == "persistent" ? FailureMode::kPersistent : FailureMode::kOnce;
  if (std::string(scenario) == "embag") return embag_child(k, mode);
  if (std::string(scenario) == "linear") return linear_child(k, mode);
  return fail(std::string("unknown scenario: ") + scenario);
}

}  // namespace shapejit::test::oom

TEST_CASE("out of memory: the first parallel call of a process fails cleanly and the next one works") {
  for (const std::string mode : {"once", "persistent"}) {
    for (const std::string scenario : {"embag", "linear"}) {
      CAPTURE(scenario);
      CAPTURE(mode);
      int64_t k = 1, failed = 0;
      for (;; ++k) {
        CAPTURE(k);
        const int code = shapejit::test::oom::run_child(scenario, k, mode);
        if (code == -1) FAIL("the child hung (killed after the timeout)");
        if (code == shapejit::test::oom::kFirstCallClean) break;
        CHECK(code == shapejit::test::oom::kFirstCallFailed);
        if (code != shapejit::test::oom::kFirstCallFailed && ++failed > 5) break;
      }
      MESSAGE(scenario, ", failures ", mode, ": ", k, " fresh processes, the last one's first call made ", k - 1,
              " allocations");
    }
  }
}
