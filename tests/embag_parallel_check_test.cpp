// A call's index range check runs inside its parallel region (runtime/embedding_bag.cpp,
// EngineTasks gates), in parts per chunk: whichever part holds a bad index, on 1 or 2 threads,
// the call reports the first bad index with the message validation gives, and writes no output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/engine_arena.hpp"
#include "shapejit/shapejit.h"

namespace {

constexpr unsigned char kSentinel = 0x5A;
constexpr int64_t kRows = 4096, kDim = 32, kBags = 256, kLen = 32, kN = kBags * kLen;

struct EngineThreads {
  explicit EngineThreads(int n) { shapejit::rt::set_engine_threads(n); }
  ~EngineThreads() { shapejit::rt::set_engine_threads(0); }
};

// 256 bags x 32 indices into 4096 x 32 rows: work enough for two threads
// (runtime/partition.hpp), so the check is split over the chunks.
template <class T>
struct BigCall {
  std::vector<float> table = std::vector<float>(size_t(kRows * kDim), 1.0f);
  std::vector<T> indices, offsets;
  std::vector<unsigned char> out = std::vector<unsigned char>(size_t(kBags * kDim * 4), kSentinel);
  std::vector<unsigned char> o2b = std::vector<unsigned char>(size_t(kN * 8), kSentinel);
  std::vector<unsigned char> bag = std::vector<unsigned char>(size_t(kBags * 8), kSentinel);
  std::vector<unsigned char> maxi = std::vector<unsigned char>(size_t(kBags * 8), kSentinel);
  shapejit_embedding_bag_args a{};

  BigCall(shapejit_mode mode, uint32_t seed) {
    std::mt19937 rng(seed);
    for (int64_t i = 0; i < kN; ++i) indices.push_back(T(rng() % kRows));
    for (int64_t b = 0; b < kBags; ++b) offsets.push_back(T(b * kLen));
    const shapejit_dtype dtype = sizeof(T) == 8 ? SHAPEJIT_I64 : SHAPEJIT_I32;
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = kRows;
    a.dim = kDim;
    a.row_stride = kDim;
    a.indices = indices.data();
    a.index_dtype = dtype;
    a.num_indices = kN;
    a.offsets = offsets.data();
    a.offset_dtype = dtype;
    a.num_offsets = kBags;
    a.mode = mode;
  }
  shapejit_status run() { return shapejit_embedding_bag(&a, out.data(), o2b.data(), bag.data(), maxi.data()); }
  bool outputs_untouched() const {
    for (auto* v : {&out, &o2b, &bag, &maxi})
      for (unsigned char c : *v)
        if (c != kSentinel) return false;
    return true;
  }
  // Validation's own message for this call (the output-shape query checks every index).
  std::string validation_message() const {
    shapejit_embedding_bag_shapes s{};
    CHECK(shapejit_embedding_bag_output_shapes(&a, &s) == SHAPEJIT_INVALID_ARGUMENT);
    return shapejit_last_error();
  }
};

template <class T>
void expect_first_bad_named(std::vector<int64_t> bad_positions, T bad_value) {
  for (int threads : {1, 2}) {
    for (shapejit_mode mode : {SHAPEJIT_SUM, SHAPEJIT_MEAN, SHAPEJIT_MAX}) {
      EngineThreads engine(threads);
      BigCall<T> call(mode, 7);
      for (int64_t p : bad_positions) call.indices[size_t(p)] = bad_value;
      const std::string expected = call.validation_message();
      const int64_t first = *std::min_element(bad_positions.begin(), bad_positions.end());
      CAPTURE(threads);
      CAPTURE(int(mode));
      CAPTURE(expected);
      REQUIRE(expected.find("indices[" + std::to_string(first) + "] = " + std::to_string(int64_t(bad_value))) !=
              std::string::npos);
      CHECK(call.run() == SHAPEJIT_INVALID_ARGUMENT);
      CHECK(std::string(shapejit_last_error()) == expected);
      CHECK(call.outputs_untouched());
    }
  }
}

}  // namespace

TEST_CASE("parallel index check: the valid call runs and writes its outputs on 1 and 2 threads") {
  for (int threads : {1, 2}) {
    EngineThreads engine(threads);
    BigCall<int64_t> call(SHAPEJIT_SUM, 7);
    CHECK(call.run() == SHAPEJIT_OK);
    CHECK_FALSE(call.outputs_untouched());
    const float* out = reinterpret_cast<const float*>(call.out.data());
    CHECK(out[0] == float(kLen));
    CHECK(out[kBags * kDim - 1] == float(kLen));
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
    BigCall<int64_t> call(SHAPEJIT_MEAN, 3);
    call.indices[size_t(kN - 1)] = kRows;
    const std::string expected = call.validation_message();
    CAPTURE(threads);
    // A misaligned output buffer: validation checks the indices first.
    CHECK(shapejit_embedding_bag(&call.a, call.out.data() + 1, call.o2b.data(), call.bag.data(), call.maxi.data()) ==
          SHAPEJIT_INVALID_ARGUMENT);
    CHECK(std::string(shapejit_last_error()) == expected);
    CHECK(call.outputs_untouched());
  }
}
