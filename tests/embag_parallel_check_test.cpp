// A call's index range check runs inside its parallel region (runtime/embag/embedding_bag.cpp,
// EngineTasks gates), in parts per chunk: whichever part holds a bad index, on 1 or 2 threads,
// the call reports the first bad index with the message validation gives, and writes no output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/engine/engine_arena.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr int64_t kRows = 4096, kDim = 32, kBags = 256, kLen = 32, kN = kBags * kLen;

struct EngineThreads {
  explicit EngineThreads(int n) { shapejit::rt::set_engine_threads(n); }
  ~EngineThreads() { shapejit::rt::set_engine_threads(0); }
};

// 256 bags x 32 indices into 4096 x 32 rows: work enough for two threads
// (runtime/engine/partition.hpp), so the check is split over the chunks. Outputs are sized while the
// call is still valid; a test then plants bad indices.
template <class T>
struct BigCall {
  static constexpr shapejit_dtype kDtype = sizeof(T) == 8 ? SHAPEJIT_I64 : SHAPEJIT_I32;
  std::vector<float> table = std::vector<float>(size_t(kRows * kDim), 1.0f);
  std::vector<T> indices = std::vector<T>(size_t(kN)), offsets = std::vector<T>(size_t(kBags));
  shapejit_embedding_bag_args a{.weight = table.data(), .weight_dtype = SHAPEJIT_F32, .num_rows = kRows,
                                .dim = kDim, .row_stride = kDim, .indices = indices.data(), .index_dtype = kDtype,
                                .num_indices = kN, .offsets = offsets.data(), .offset_dtype = kDtype,
                                .num_offsets = kBags};

  explicit BigCall(shapejit_mode mode) {
    std::mt19937 rng(7);
    for (T& i : indices) i = T(rng() % kRows);
    for (int64_t b = 0; b < kBags; ++b) offsets[size_t(b)] = T(b * kLen);
    a.mode = mode;
  }
  shapejit_embedding_bag_shapes shapes() const {
    shapejit_embedding_bag_shapes s{};
    REQUIRE(shapejit_embedding_bag_output_shapes(&a, &s) == SHAPEJIT_OK);
    return s;
  }
  // Validation's own message for the call (the output-shape query checks every index).
  std::string validation_message() const {
    shapejit_embedding_bag_shapes s{};
    CHECK(shapejit_embedding_bag_output_shapes(&a, &s) == SHAPEJIT_INVALID_ARGUMENT);
    return shapejit_last_error();
  }
};

template <class T>
void expect_first_bad_named(const std::vector<int64_t>& bad_positions, T bad_value) {
  const int64_t first = *std::min_element(bad_positions.begin(), bad_positions.end());
  for (int threads : {1, 2}) {
    for (shapejit_mode mode : {SHAPEJIT_SUM, SHAPEJIT_MEAN, SHAPEJIT_MAX}) {
      EngineThreads engine(threads);
      BigCall<T> call(mode);
      GuardedOutputs out(call.shapes());
      for (int64_t p : bad_positions) call.indices[size_t(p)] = bad_value;
      const std::string expected = call.validation_message();
      CAPTURE(threads);
      CAPTURE(int(mode));
      CAPTURE(expected);
      REQUIRE(expected.find("indices[" + std::to_string(first) + "] = " + std::to_string(int64_t(bad_value))) !=
              std::string::npos);
      CHECK(out.run(call.a) == SHAPEJIT_INVALID_ARGUMENT);
      CHECK(std::string(shapejit_last_error()) == expected);
      CHECK(out.untouched());
      CHECK(out.check_guards() == "");
    }
  }
}

}  // namespace

TEST_CASE("parallel index check: the valid call writes its outputs on 1 and 2 threads") {
  for (int threads : {1, 2}) {
    for (bool include_last : {false, true}) {
      EngineThreads engine(threads);
      BigCall<int64_t> call(SHAPEJIT_SUM);
      if (include_last) {  // sum mode's counts then have B + 1 entries, the last past every bag
        call.offsets.push_back(kN);
        call.a.offsets = call.offsets.data();
        call.a.num_offsets = kBags + 1;
        call.a.include_last_offset = 1;
      }
      GuardedOutputs out(call.shapes());
      CAPTURE(threads);
      CAPTURE(include_last);
      CHECK(out.run(call.a) == SHAPEJIT_OK);
      const auto* sums = reinterpret_cast<const float*>(out.bytes(EmbagOutput::kOutput).data());
      CHECK(std::all_of(sums, sums + kBags * kDim, [](float v) { return v == float(kLen); }));
      // Sum mode's counts are zeros, include_last_offset's entry past the last bag too.
      for (EmbagOutput counts : {EmbagOutput::kBagSize, EmbagOutput::kMaxIndices}) {
        const auto bytes = out.bytes(counts);
        CHECK(out.elements(counts) == kBags + (include_last ? 1 : 0));
        CHECK(std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; }));
      }
      CHECK(out.check_guards() == "");
    }
  }
}

TEST_CASE("parallel index check: a bad index in the last chunk (the second thread's part)") {
  expect_first_bad_named<int64_t>({kN - 1}, kRows);
  expect_first_bad_named<int64_t>({kN - 3, kN - 40}, -1);
  expect_first_bad_named<int32_t>({kN - 2}, int32_t(kRows + 5));
}

TEST_CASE("parallel index check: bad indices in both halves name the first") {
  expect_first_bad_named<int64_t>({kN / 2 + 11, 17, kN - 1}, int64_t{1} << 40);
  expect_first_bad_named<int32_t>({kN - 1, kN / 4 + 1}, int32_t{-5});
  expect_first_bad_named<int64_t>({0}, kRows);
}

TEST_CASE("parallel index check: an index error comes before an output error, as in validation") {
  for (int threads : {1, 2}) {
    EngineThreads engine(threads);
    BigCall<int64_t> call(SHAPEJIT_MEAN);
    GuardedOutputs out(call.shapes());
    call.indices[size_t(kN - 1)] = kRows;
    const std::string expected = call.validation_message();
    CAPTURE(threads);
    // A misaligned output buffer, which the run path checks after validation.
    auto* misaligned = static_cast<unsigned char*>(out.data(EmbagOutput::kOutput)) + 1;
    CHECK(shapejit_embedding_bag(&call.a, misaligned, out.data(EmbagOutput::kOffset2bag),
                                 out.data(EmbagOutput::kBagSize), out.data(EmbagOutput::kMaxIndices)) ==
          SHAPEJIT_INVALID_ARGUMENT);
    CHECK(std::string(shapejit_last_error()) == expected);
    CHECK(out.untouched());
  }
}
