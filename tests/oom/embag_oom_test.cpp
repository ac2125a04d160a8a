// Out of memory in an embedding-bag call: for every k, the k-th allocation of the call fails; the
// call must return SHAPEJIT_OUT_OF_MEMORY with every output byte as it was, or SHAPEJIT_OK with
// the exact result. Cold calls (a shape never compiled: the cache, asmjit, the engine's plan)
// and warm calls (the kernel cached) for every mode, on one and on two engine threads.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "oom/alloc_injector.hpp"
#include "oom/oom_cases.hpp"
#include "runtime/engine/isa_select.hpp"
#include "support/embag_cases.hpp"
#include "support/prepared_embag.hpp"

namespace {

using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;
using shapejit::test::oom::Attempt;
using shapejit::test::oom::EmbagInputs;
using shapejit::test::oom::EmbagVariant;
using shapejit::test::oom::FailureMode;
using shapejit::test::oom::kEmbagVariants;
using shapejit::test::oom::ScopedFailure;
using shapejit::test::oom::SweepStats;

std::string mode_text(FailureMode mode) {
  return mode == FailureMode::kOnce ? ", allocation k fails: " : ", every allocation from k on fails: ";
}

bool same_bytes(const GuardedOutputs& a, const GuardedOutputs& b) {
  for (EmbagOutput w : shapejit::test::kAllEmbagOutputs) {
    const auto x = a.bytes(w), y = b.bytes(w);
    if (x.size() != y.size() || !std::equal(x.begin(), x.end(), y.begin())) return false;
  }
  return true;
}

// One call with allocation k failing, checked against `expected` (a clean call's outputs).
Attempt failing_call(const EmbagInputs& in, int64_t k, const GuardedOutputs* expected,
                     FailureMode mode = FailureMode::kOnce) {
  const shapejit_embedding_bag_shapes shapes = in.shapes();
  GuardedOutputs got(shapes, 0xCD);
  Attempt a;
  {
    ScopedFailure failure(k, mode);
    a.status = got.run(in.args());
    a.count = failure.finish();
  }
  CAPTURE(k);
  CAPTURE(a.count.allocations);
  CHECK(got.check_guards() == "");
  if (a.status == SHAPEJIT_OUT_OF_MEMORY) {
    CHECK(a.count.fired);
    CHECK(got.untouched());
    CHECK(std::string(shapejit_last_error()) != "");
  } else {
    REQUIRE(a.status == SHAPEJIT_OK);
    GuardedOutputs clean(shapes, 0x33);
    if (!expected) {  // cold: the same call again, now without a failure
      REQUIRE(clean.run(in.args()) == SHAPEJIT_OK);
      expected = &clean;
    }
    CHECK(same_bytes(got, *expected));
  }
  return a;
}

}  // namespace

TEST_CASE("out of memory: a warm embedding-bag call fails cleanly at every allocation") {
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (const EmbagVariant& v : kEmbagVariants) {
      const EmbagInputs in(v, 40);
      GuardedOutputs expected(in.shapes(), 0x11);
      REQUIRE(expected.run(in.args()) == SHAPEJIT_OK);  // compiles and caches the kernel
      for (FailureMode mode : {FailureMode::kOnce, FailureMode::kPersistent}) {
        const SweepStats s = shapejit::test::oom::sweep_allocations(
            [&](int64_t k) { return failing_call(in, k, &expected, mode); });
        MESSAGE("warm, ", threads, " thread(s), ", std::string(v.name), mode_text(mode), s.summary());
      }
    }
  }
  REQUIRE(shapejit_set_num_threads(0) == SHAPEJIT_OK);
}

TEST_CASE("out of memory: a cold embedding-bag call (new shape) fails cleanly at every allocation") {
  REQUIRE(shapejit_set_num_threads(2) == SHAPEJIT_OK);
  int64_t next_dim = 100;  // every attempt compiles a shape no earlier call used
  for (FailureMode mode : {FailureMode::kOnce, FailureMode::kPersistent}) {
    for (const EmbagVariant& v : kEmbagVariants) {
      const SweepStats s = shapejit::test::oom::sweep_allocations([&](int64_t k) {
        const EmbagInputs in(v, next_dim++);
        return failing_call(in, k, nullptr, mode);
      });
      MESSAGE("cold, 2 threads, ", std::string(v.name), mode_text(mode), s.summary());
      if (!v.partial_final_offset) CHECK(s.out_of_memory > 0);  // compiling allocates
    }
  }
  REQUIRE(shapejit_set_num_threads(0) == SHAPEJIT_OK);
}

TEST_CASE("out of memory: an embedding-bag call on the reference path (scalar ISA) fails cleanly") {
  const shapejit::rt::ScopedIsaOverride scalar(shapejit::jit::Isa::kScalar);
  for (const EmbagVariant& v : kEmbagVariants) {
    const EmbagInputs in(v, 40);
    GuardedOutputs expected(in.shapes(), 0x11);
    REQUIRE(expected.run(in.args()) == SHAPEJIT_OK);
    const SweepStats s =
        shapejit::test::oom::sweep_allocations([&](int64_t k) { return failing_call(in, k, &expected); });
    MESSAGE("scalar ISA, ", std::string(v.name), ": ", s.summary());
  }
}

namespace {

// The first `count` variants as the calls of one group (dims first_dim, first_dim + 1, ...), run
// with allocation k failing: SHAPEJIT_OUT_OF_MEMORY with every output of every call untouched, or
// SHAPEJIT_OK with each call's result as made alone.
Attempt failing_group(size_t count, int64_t first_dim, int64_t k, FailureMode mode) {
  std::vector<std::unique_ptr<EmbagInputs>> inputs;
  std::vector<shapejit_embedding_bag_ex_args> ex(count);
  std::vector<const shapejit_embedding_bag_ex_args*> calls;
  std::vector<std::unique_ptr<GuardedOutputs>> got, want;
  std::vector<shapejit_embedding_bag_outputs> outs;
  for (size_t c = 0; c < count; ++c) {
    inputs.push_back(std::make_unique<EmbagInputs>(kEmbagVariants[c], first_dim + int64_t(c)));
    shapejit_embedding_bag_ex_init(&ex[c], &inputs.back()->args());
    calls.push_back(&ex[c]);
    got.push_back(std::make_unique<GuardedOutputs>(inputs.back()->shapes(), 0xCD));
    GuardedOutputs& g = *got.back();
    outs.push_back({g.data(EmbagOutput::kOutput), g.data(EmbagOutput::kOffset2bag), g.data(EmbagOutput::kBagSize),
                    g.data(EmbagOutput::kMaxIndices)});
  }
  Attempt a;
  {
    ScopedFailure failure(k, mode);
    a.status = shapejit_embedding_bags(calls.data(), outs.data(), int64_t(calls.size()));
    a.count = failure.finish();
  }
  CAPTURE(k);
  CAPTURE(a.count.allocations);
  for (const auto& g : got) CHECK(g->check_guards() == "");
  if (a.status == SHAPEJIT_OUT_OF_MEMORY) {
    CHECK(a.count.fired);
    for (const auto& g : got) CHECK(g->untouched());
    CHECK(std::string(shapejit_last_error()) != "");
    return a;
  }
  REQUIRE(a.status == SHAPEJIT_OK);
  for (size_t c = 0; c < calls.size(); ++c) {
    GuardedOutputs alone(inputs[c]->shapes(), 0x33);
    REQUIRE(alone.run(inputs[c]->args()) == SHAPEJIT_OK);
    CHECK_MESSAGE(same_bytes(*got[c], alone), "calls[" << c << "] (" << kEmbagVariants[c].name << ")");
  }
  return a;
}

}  // namespace

TEST_CASE("out of memory: a group of calls fails cleanly at every allocation, warm and cold") {
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (FailureMode mode : {FailureMode::kOnce, FailureMode::kPersistent}) {
      const size_t all = kEmbagVariants.size();  // the reference's variant included
      failing_group(all, 40, 1 << 30, mode);     // compiles and caches the kernels of dims 40, 41, ...
      const SweepStats warm =
          shapejit::test::oom::sweep_allocations([&](int64_t k) { return failing_group(all, 40, k, mode); });
      MESSAGE("group, warm, ", threads, " thread(s)", mode_text(mode), warm.summary());
      CHECK(warm.out_of_memory > 0);  // the group's plans and schedule allocate
    }
  }
  // Cold: every attempt compiles 3 shapes no earlier call used (all variants would compile 9
  // kernels in each of ~360 attempts).
  int64_t next_dim = 300;
  const SweepStats cold = shapejit::test::oom::sweep_allocations([&](int64_t k) {
    const Attempt a = failing_group(3, next_dim, k, FailureMode::kOnce);
    next_dim += 3;
    return a;
  });
  MESSAGE("group, cold, 2 threads, allocation k fails: ", cold.summary());
  CHECK(cold.out_of_memory > 0);
  REQUIRE(shapejit_set_num_threads(0) == SHAPEJIT_OK);
}

TEST_CASE("out of memory: a prepared embedding bag fails cleanly at every allocation (prepare and run)") {
  using shapejit::test::EmbagOutput;
  REQUIRE(shapejit_set_num_threads(2) == SHAPEJIT_OK);
  int64_t next_dim = 300;  // prepare compiles a shape no earlier call used
  for (const EmbagVariant& v : kEmbagVariants) {
    // Prepare, cold: fails with OUT_OF_MEMORY and leaves *out as it was, or succeeds.
    const SweepStats prepare = shapejit::test::oom::sweep_allocations([&](int64_t k) {
      const EmbagInputs in(v, next_dim++);
      shapejit_embedding_bag_ex_args form{};
      shapejit_embedding_bag_ex_init(&form, &in.args());
      shapejit_embedding_bag_prepared* prepared = nullptr;
      Attempt a;
      {
        ScopedFailure failure(k, FailureMode::kOnce);
        a.status = shapejit_embedding_bag_prepare(&form, &prepared);
        a.count = failure.finish();
      }
      CAPTURE(k);
      if (a.status == SHAPEJIT_OUT_OF_MEMORY) CHECK(prepared == nullptr);
      else CHECK((a.status == SHAPEJIT_OK && prepared != nullptr));
      shapejit_embedding_bag_prepared_destroy(prepared);
      return a;
    });
    MESSAGE("prepare (cold), ", std::string(v.name), ": ", prepare.summary());
    CHECK(prepare.out_of_memory > 0);  // the handle and the compilation allocate
    // Run, warm: the outputs untouched on OUT_OF_MEMORY, else exact.
    const EmbagInputs in(v, 40);
    shapejit_embedding_bag_ex_args form{};
    shapejit_embedding_bag_ex_init(&form, &in.args());
    shapejit_embedding_bag_prepared* prepared = nullptr;
    REQUIRE(shapejit_embedding_bag_prepare(&form, &prepared) == SHAPEJIT_OK);
    GuardedOutputs expected(in.shapes(), 0x11);
    REQUIRE(expected.run(in.args()) == SHAPEJIT_OK);
    const shapejit_embedding_bag_batch batch = shapejit::test::batch_of(in.args());
    const SweepStats run = shapejit::test::oom::sweep_allocations([&](int64_t k) {
      GuardedOutputs got(in.shapes(), 0xCD);
      Attempt a;
      {
        ScopedFailure failure(k, FailureMode::kOnce);
        a.status = shapejit_embedding_bag_prepared_run(prepared, &batch, got.data(EmbagOutput::kOutput),
                                                       got.data(EmbagOutput::kOffset2bag),
                                                       got.data(EmbagOutput::kBagSize),
                                                       got.data(EmbagOutput::kMaxIndices));
        a.count = failure.finish();
      }
      CAPTURE(k);
      CHECK(got.check_guards() == "");
      if (a.status == SHAPEJIT_OUT_OF_MEMORY) CHECK(got.untouched());
      else CHECK((a.status == SHAPEJIT_OK && same_bytes(got, expected)));
      return a;
    });
    MESSAGE("prepared run (warm), ", std::string(v.name), ": ", run.summary());
    shapejit_embedding_bag_prepared_destroy(prepared);
  }
  REQUIRE(shapejit_set_num_threads(0) == SHAPEJIT_OK);
}
