// Out of memory in a linear-group run: for every k, the k-th allocation of the run fails; the run
// must return SHAPEJIT_OUT_OF_MEMORY with every output byte as it was, or SHAPEJIT_OK with the
// exact result. Cold runs (a thread whose per-thread scratch is empty) and warm runs, for every
// layout the engine runs differently (own and shared inputs, head-split through offset tables
// and through copied tiles, more parts than the inline array, part by part and on the engine).
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "oom/alloc_injector.hpp"
#include "oom/oom_cases.hpp"
#include "runtime/engine/isa_select.hpp"

namespace {

using shapejit::test::oom::Attempt;
using shapejit::test::oom::FailureMode;
using shapejit::test::oom::kLinearVariants;
using shapejit::test::oom::LinearCase;
using shapejit::test::oom::LinearVariant;
using shapejit::test::oom::ScopedFailure;
using shapejit::test::oom::SweepStats;

// One run with allocation k failing (on a new thread when cold), checked against `expected`.
Attempt failing_run(LinearCase& c, int64_t k, const std::vector<unsigned char>& expected, bool cold,
                    FailureMode mode = FailureMode::kOnce) {
  c.reset_outputs();
  Attempt a;
  auto run = [&] {
    ScopedFailure failure(k, mode);
    a.status = c.run();
    a.count = failure.finish();
  };
  if (cold)
    std::thread(run).join();
  else
    run();
  CAPTURE(k);
  CAPTURE(a.count.allocations);
  if (a.status == SHAPEJIT_OUT_OF_MEMORY) {
    CHECK(a.count.fired);
    CHECK(c.untouched());
  } else {
    REQUIRE(a.status == SHAPEJIT_OK);
    CHECK(c.output_bytes() == expected);
  }
  return a;
}

}  // namespace

TEST_CASE("out of memory: a linear-group run fails cleanly at every allocation") {
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (const LinearVariant& v : kLinearVariants) {
      LinearCase c(v);
      REQUIRE(c.run() == SHAPEJIT_OK);
      const std::vector<unsigned char> expected = c.output_bytes();
      for (FailureMode mode : {FailureMode::kOnce, FailureMode::kPersistent}) {
        for (bool cold : {true, false}) {
          CAPTURE(cold);
          const SweepStats s = shapejit::test::oom::sweep_allocations(
              [&](int64_t k) { return failing_run(c, k, expected, cold, mode); });
          MESSAGE(std::string(cold ? "cold" : "warm"), ", ", threads, " thread(s), ", std::string(v.name),
                  std::string(mode == FailureMode::kOnce ? ", allocation k fails: " : ", every allocation from k on fails: "),
                  s.summary());
        }
      }
    }
  }
  REQUIRE(shapejit_set_num_threads(0) == SHAPEJIT_OK);
}

TEST_CASE("out of memory: a linear-group run on the reference path (scalar ISA) fails cleanly") {
  for (const LinearVariant& v : kLinearVariants) {
    const shapejit::rt::ScopedIsaOverride scalar(shapejit::jit::Isa::kScalar);  // chosen at create
    LinearCase c(v);
    REQUIRE(c.run() == SHAPEJIT_OK);
    const std::vector<unsigned char> expected = c.output_bytes();
    const SweepStats s =
        shapejit::test::oom::sweep_allocations([&](int64_t k) { return failing_run(c, k, expected, true); });
    MESSAGE("scalar ISA, cold, ", std::string(v.name), ": ", s.summary());
  }
}
