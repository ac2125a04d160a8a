// Many calls in one (shapejit_embedding_bags, shapejit::embedding_bags): each call's outputs are
// bitwise those of the call made alone, at 1 and 2 threads, for every table dtype, with calls
// that share a table; a bad index or an invalid argument in any call is reported naming it, and
// leaves every output of every call untouched; the buffer rule holds across the calls.
#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "jit/isa.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;
using shapejit::test::GuardedTable;

constexpr shapejit_dtype kTables[] = {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8, SHAPEJIT_Q4, SHAPEJIT_Q2};

// Call `number` of a group: the table dtypes rotate; every third call is large enough that a
// group holding it runs in chunks on 2 threads.
EmbagCase group_case(uint64_t seed, int64_t number, bool spans_only = false) {
  shapejit::test::EmbagCaseOptions o;
  o.table = kTables[number % 6];
  o.extended = !spans_only;
  o.allow_partial_final_offset = !spans_only && number % 2 == 0;
  const bool large = number % 3 == 0;
  o.max_dim = large ? 200 : 500;
  o.max_table_elements = 1 << 15;
  o.max_indices = large ? 3000 : 300;
  o.max_output_elements = large ? 1 << 16 : 1 << 13;
  return shapejit::test::make_embag_case(seed, number, o);
}

shapejit_embedding_bag_shapes shapes_of(const shapejit_embedding_bag_ex_args& a) {
  shapejit_embedding_bag_shapes s{};
  REQUIRE_MESSAGE(shapejit_embedding_bag_ex_output_shapes(&a, &s) == SHAPEJIT_OK, std::string(shapejit_last_error()));
  return s;
}

// The calls of one group with their tables, arguments and outputs.
struct Group {
  std::vector<EmbagCase> cases;
  std::vector<std::unique_ptr<GuardedTable>> tables;
  std::vector<shapejit_embedding_bag_ex_args> args;
  std::vector<std::unique_ptr<GuardedOutputs>> outs;

  void add(EmbagCase c) {
    cases.push_back(std::move(c));
    tables.push_back(std::make_unique<GuardedTable>(cases.back()));
  }
  // Arguments once every case is in (they point into the cases and tables).
  void make_args() {
    args.clear();
    for (size_t k = 0; k < cases.size(); ++k) args.push_back(cases[k].to_ex_args(tables[k] ? tables[k]->data() : nullptr));
  }
  void make_outputs(unsigned char sentinel) {
    outs.clear();
    for (size_t k = 0; k < cases.size(); ++k)
      outs.push_back(std::make_unique<GuardedOutputs>(shapes_of(args[k]), sentinel, k % 2 == 1, cases[k].output_dtype));
  }
  shapejit_status run() {
    std::vector<const shapejit_embedding_bag_ex_args*> calls;
    std::vector<shapejit_embedding_bag_outputs> o;
    for (size_t k = 0; k < cases.size(); ++k) {
      calls.push_back(&args[k]);
      GuardedOutputs& g = *outs[k];
      o.push_back({g.data(EmbagOutput::kOutput), g.data(EmbagOutput::kOffset2bag), g.data(EmbagOutput::kBagSize),
                   g.data(EmbagOutput::kMaxIndices)});
    }
    return shapejit_embedding_bags(calls.data(), o.data(), int64_t(calls.size()));
  }
  bool untouched() const {
    for (const auto& g : outs)
      if (!g->untouched() || !g->check_guards().empty()) return false;
    return true;
  }
  std::string describe() const {
    std::string s;
    for (size_t k = 0; k < cases.size(); ++k) s += "calls[" + std::to_string(k) + "]: " + cases[k].describe() + "\n";
    return s;
  }
};

// A group of 1-6 calls; in every other group the last call reads the first call's table,
// indices and offsets (shared inputs are allowed) in another mode.
Group make_group(uint64_t seed, int64_t number) {
  std::mt19937_64 rng(seed ^ (uint64_t(number) * 0x9E3779B97F4A7C15ull));
  Group g;
  const int64_t calls = 1 + int64_t(rng() % 6);
  for (int64_t k = 0; k < calls; ++k) g.add(group_case(seed, number * 8 + k));
  if (number % 2 == 1) {
    EmbagCase twin = g.cases[0];
    // Another mode: max where allowed (the partial-final-offset quirk is sum and mean only).
    twin.mode = twin.mode == SHAPEJIT_MAX                 ? SHAPEJIT_SUM
                : !twin.aten_partial_final_offset         ? SHAPEJIT_MAX
                : twin.mode == SHAPEJIT_SUM ? SHAPEJIT_MEAN : SHAPEJIT_SUM;
    twin.per_sample_weights.clear();  // weights are a sum-mode option
    twin.per_sample_weights16.clear();
    twin.skip_index_outputs = !twin.skip_index_outputs;
    g.cases.push_back(twin);
    g.tables.push_back(nullptr);
  }
  g.make_args();
  if (number % 2 == 1) {  // the twin reads the first call's table copy, indices and offsets
    shapejit_embedding_bag_ex_args& t = g.args.back();
    t.call.weight = g.args[0].call.weight;
    t.call.indices = g.args[0].call.indices;
    t.call.offsets = g.args[0].call.offsets;
  }
  return g;
}

}  // namespace

TEST_CASE("group: every call's outputs are bitwise the call's alone (every dtype, shared tables, 1 and 2 threads)") {
  const uint64_t seed = shapejit::test::test_seed(0x6A0B);
  const auto only = shapejit::test::test_case_filter();
  const int64_t groups = shapejit::test::test_case_count(60);
  MESSAGE("grouped calls: seed " << seed << " (SHAPEJIT_TEST_SEED replays, SHAPEJIT_TEST_CASE=n one group), "
                                 << groups << " groups x threads {1, 2}, ISA "
                                 << shapejit::jit::isa_name(shapejit::rt::selected_isa()));
  int failures = 0;
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (int64_t n = 0; n < groups && failures < 4; ++n) {
      if (only && n != *only) continue;
      Group g = make_group(seed, n);
      std::vector<std::unique_ptr<GuardedOutputs>> want;
      for (size_t k = 0; k < g.cases.size(); ++k) {
        want.push_back(std::make_unique<GuardedOutputs>(shapes_of(g.args[k]), 0xA5, false, g.cases[k].output_dtype));
        REQUIRE_MESSAGE(want.back()->run(g.args[k]) == SHAPEJIT_OK, std::string(shapejit_last_error()) << "\n" << g.describe());
      }
      g.make_outputs(0x5A);
      if (g.run() != SHAPEJIT_OK) {
        ++failures;
        FAIL_CHECK("group " << n << " (" << threads << " threads) failed: " << shapejit_last_error() << "\n"
                            << g.describe());
        continue;
      }
      for (size_t k = 0; k < g.cases.size(); ++k)
        if (const std::string d = first_output_difference(*want[k], *g.outs[k], g.cases[k].output_dtype); !d.empty()) {
          ++failures;
          FAIL_CHECK("group " << n << " (" << threads << " threads), calls[" << k << "] differs from the call alone: "
                              << d << "\n" << g.describe());
          break;
        }
    }
  }
  shapejit_set_num_threads(0);
  CHECK(failures == 0);
}

TEST_CASE("group: a bad index in any call is named and no output of any call is written") {
  const uint64_t seed = shapejit::test::test_seed(0xBAD6);
  int checked = 0;
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (int64_t n = 0; n < 24; ++n) {
      Group g;
      for (int64_t k = 0; k < 3; ++k) g.add(group_case(seed, n * 3 + k, /*spans_only=*/true));
      g.make_args();
      const size_t bad = size_t(n % 3);
      const EmbagCase& c = g.cases[bad];
      const int64_t checked_end = shapejit::rt::index_check_end(shapejit::rt::plan_embedding_bag(g.args[bad]));
      if (checked_end == 0) continue;
      const int64_t position = (n * 7919) % checked_end;
      g.make_outputs(0x3C);  // sized while the call is valid
      // Out of range for any table: the largest index of the type, or a negative one.
      std::vector<int64_t> idx64 = c.indices;
      std::vector<int32_t> idx32 = c.indices_i32;
      if (c.index_dtype == SHAPEJIT_I64) {
        idx64[size_t(position)] = n % 2 ? std::numeric_limits<int64_t>::max() : -1;
        g.args[bad].call.indices = idx64.data();
      } else {
        idx32[size_t(position)] = n % 2 ? std::numeric_limits<int32_t>::max() : -1;
        g.args[bad].call.indices = idx32.data();
      }
      const shapejit_status status = g.run();
      const std::string message = shapejit_last_error();
      CHECK_MESSAGE(status == SHAPEJIT_INVALID_ARGUMENT, message);
      const std::string expected = "embedding_bags: calls[" + std::to_string(bad) + "]: indices[" + std::to_string(position) + "]";
      CHECK_MESSAGE(message.rfind(expected, 0) == 0, "message: " << message << "\nexpected to start with: " << expected);
      CHECK_MESSAGE(g.untouched(), "an output was written by a rejected group\n" << g.describe());
      ++checked;
    }
  }
  shapejit_set_num_threads(0);
  CHECK(checked > 20);
}

TEST_CASE("group: an invalid call is named, the others' outputs stay untouched") {
  Group g;
  for (int64_t k = 0; k < 3; ++k) g.add(group_case(0x1A7, k, true));
  g.make_args();
  g.make_outputs(0x77);
  g.args[2].call.mode = static_cast<shapejit_mode>(7);
  CHECK(g.run() == SHAPEJIT_INVALID_ARGUMENT);
  const std::string message = shapejit_last_error();
  CHECK_MESSAGE(message.rfind("embedding_bags: calls[2]: mode", 0) == 0, message);
  CHECK(g.untouched());

  g.make_args();  // a struct size that does not cover the call, in calls[1]
  g.args[1].struct_size = 8;
  CHECK(g.run() == SHAPEJIT_INVALID_ARGUMENT);
  CHECK_MESSAGE(std::string(shapejit_last_error()).rfind("embedding_bags: calls[1]: ", 0) == 0, shapejit_last_error());
  CHECK(g.untouched());
}

TEST_CASE("group: outputs may not overlap another call's inputs or outputs; inputs may be shared") {
  std::vector<float> table0(4 * 8, 1.0f), table1(6 * 8, 2.0f);
  std::vector<int64_t> idx0{0, 3, 1, 2}, idx1{5, 4}, off0{0, 2}, off1{0, 1};
  shapejit_embedding_bag_args a0{};
  a0.weight = table0.data(), a0.weight_dtype = SHAPEJIT_F32, a0.num_rows = 4, a0.dim = 8, a0.row_stride = 8;
  a0.indices = idx0.data(), a0.index_dtype = SHAPEJIT_I64, a0.num_indices = 4;
  a0.offsets = off0.data(), a0.offset_dtype = SHAPEJIT_I64, a0.num_offsets = 2, a0.mode = SHAPEJIT_MEAN;
  shapejit_embedding_bag_args a1 = a0;
  a1.weight = table1.data(), a1.num_rows = 6, a1.indices = idx1.data(), a1.num_indices = 2, a1.offsets = off1.data();
  shapejit_embedding_bag_ex_args args[2];
  shapejit_embedding_bag_ex_init(&args[0], &a0);
  shapejit_embedding_bag_ex_init(&args[1], &a1);
  const shapejit_embedding_bag_ex_args* calls[2] = {&args[0], &args[1]};
  GuardedOutputs o0(shapes_of(args[0]), 0x11), o1(shapes_of(args[1]), 0x11);
  auto outputs_of = [](GuardedOutputs& o) {
    return shapejit_embedding_bag_outputs{o.data(EmbagOutput::kOutput), o.data(EmbagOutput::kOffset2bag),
                                          o.data(EmbagOutput::kBagSize), o.data(EmbagOutput::kMaxIndices)};
  };
  shapejit_embedding_bag_outputs outs[2] = {outputs_of(o0), outputs_of(o1)};
  auto rejected = [&](std::initializer_list<const char*> parts) {
    CHECK(shapejit_embedding_bags(calls, outs, 2) == SHAPEJIT_INVALID_ARGUMENT);
    const std::string m = shapejit_last_error();
    CHECK_MESSAGE(m.rfind("embedding_bags: calls[", 0) == 0, m);
    for (const char* part : parts) CHECK_MESSAGE(m.find(part) != std::string::npos, m << "\nlacks: " << part);
    CHECK(o0.untouched());
    CHECK(o1.untouched());
  };
  SUBCASE("one call's output is another's output") {
    outs[1].output = outs[0].output;
    rejected({"calls[0].output", "calls[1].output", "must not overlap each other"});
  }
  SUBCASE("one call's bag_size is inside another's offset2bag") {
    outs[1].bag_size = static_cast<int64_t*>(outs[0].offset2bag) + 1;
    rejected({"calls[0].offset2bag", "calls[1].bag_size", "must not overlap each other"});
  }
  SUBCASE("one call's output lies in another's indices") {
    outs[1].output = idx0.data();
    rejected({"calls[1].output", "calls[0].indices", "an input of any call"});
  }
  SUBCASE("one call's offset2bag lies in another's table") {
    outs[0].offset2bag = table1.data() + 8;
    rejected({"calls[0].offset2bag", "calls[1].weight", "an input of any call"});
  }
  SUBCASE("shared inputs: two calls read one table with the same indices") {
    args[1] = args[0];
    GuardedOutputs alone(shapes_of(args[0]), 0x22);
    REQUIRE(alone.run(args[0]) == SHAPEJIT_OK);
    GuardedOutputs twin(shapes_of(args[1]), 0x33);
    outs[1] = outputs_of(twin);
    REQUIRE_MESSAGE(shapejit_embedding_bags(calls, outs, 2) == SHAPEJIT_OK, std::string(shapejit_last_error()));
    CHECK(first_output_difference(alone, o0, SHAPEJIT_F32) == "");
    CHECK(first_output_difference(alone, twin, SHAPEJIT_F32) == "");
  }
}

TEST_CASE("group: counts and null arguments") {
  CHECK(shapejit_embedding_bags(nullptr, nullptr, 0) == SHAPEJIT_OK);
  CHECK(shapejit_embedding_bags(nullptr, nullptr, -1) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()) == "embedding_bags: count = -1 is negative");
  shapejit_embedding_bag_outputs o{};
  CHECK(shapejit_embedding_bags(nullptr, &o, 1) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()) == "embedding_bags: calls is null but count = 1");
  const shapejit_embedding_bag_ex_args* none[1] = {nullptr};
  CHECK(shapejit_embedding_bags(none, &o, 1) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()) == "embedding_bags: calls[0] is null");
}

TEST_CASE("group: the C++ API runs a group and checks that every call has outputs") {
  const float table[6] = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> idx{2, 0, 1}, off{0, 2};
  shapejit::EmbeddingBagCall sum;
  sum.weight = {table, shapejit::DType::kF32, 3, 2, 2};
  sum.indices = idx;
  sum.offsets = off;
  shapejit::EmbeddingBagCall max = sum;
  max.mode = shapejit::Mode::kMax;
  max.skip_index_outputs = true;
  float out_sum[4] = {}, out_max[4] = {};
  int64_t offset2bag[3] = {}, bag_size[2] = {-1, -1}, max_indices[2] = {-1, -1};  // sum mode: B of each
  const shapejit::EmbeddingBagCall calls[2] = {sum, max};
  const shapejit::EmbeddingBagOutputs outs[2] = {{out_sum, offset2bag, bag_size, max_indices}, {out_max, nullptr, nullptr, nullptr}};
  shapejit::embedding_bags(calls, outs);
  CHECK(out_sum[0] == 6);  // rows 2 + 0: (5, 6) + (1, 2)
  CHECK(out_sum[1] == 8);
  CHECK(out_sum[2] == 3);
  CHECK(out_max[0] == 5);
  CHECK(out_max[1] == 6);
  CHECK(out_max[3] == 4);
  CHECK_THROWS_WITH_AS(shapejit::embedding_bags(calls, std::span(outs, 1)),
                       "embedding_bags: 2 calls but 1 sets of outputs (one per call)", shapejit::Error);
}
