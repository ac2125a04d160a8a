// Hand-computed cases for the reference: each rule of embedding-bag-semantics.md on a tiny table.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "shapejit/shapejit.hpp"

namespace {

using shapejit::DType;
using shapejit::EmbeddingBagCall;
using shapejit::Mode;

// Table rows: r0 = {1, -0.0}, r1 = {2, NaN}, r2 = {2, 5}, r3 = {-inf, 5}
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
const std::vector<float> kTable{1.0f, -0.0f, 2.0f, kNaN, 2.0f, 5.0f, -kInf, 5.0f};

EmbeddingBagCall make_call(const std::vector<int64_t>& idx, const std::vector<int64_t>& off, Mode mode) {
  EmbeddingBagCall c;
  c.weight = {kTable.data(), DType::kF32, 4, 2, 2};
  c.indices = shapejit::IndexView(idx);
  c.offsets = shapejit::IndexView(off);
  c.mode = mode;
  return c;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace

TEST_CASE("ref: sum starts from +0.0 so a lone -0.0 becomes +0.0, and empty bags are zero") {
  std::vector<int64_t> idx{0, 2, 3}, off{0, 1, 1};
  auto r = shapejit::embedding_bag(make_call(idx, off, Mode::kSum));
  CHECK(r.output == std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f, -kInf, 10.0f});
  CHECK_FALSE(std::signbit(r.output[1]));
  CHECK(r.offset2bag.empty());
  CHECK(r.bag_size == std::vector<int64_t>{0, 0, 0});
  CHECK(r.max_indices == std::vector<int64_t>{0, 0, 0});
}

TEST_CASE("ref: mean divides by the non-padding count and max_indices copies bag_size") {
  std::vector<int64_t> idx{0, 2, 2, 1}, off{0, 3, 4};
  auto c = make_call(idx, off, Mode::kMean);
  c.padding_idx = -3;  // row 1
  auto r = shapejit::embedding_bag(c);
  CHECK(r.output[0] == doctest::Approx(5.0f / 3.0f));
  CHECK(r.output[0] == 5.0f / 3.0f);
  CHECK(r.output[1] == 10.0f / 3.0f);
  CHECK(r.output[2] == 0.0f);  // bag 1 holds only padding
  CHECK(r.offset2bag == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(r.bag_size == std::vector<int64_t>{3, 0, 0});
  CHECK(r.max_indices == r.bag_size);
}

TEST_CASE("ref: max keeps the first of ties, a first NaN, and -0.0 when copied first") {
  std::vector<int64_t> idx{0, 3, 2, 1, 1, 2}, off{0, 3, 4};
  auto r = shapejit::embedding_bag(make_call(idx, off, Mode::kMax));
  // bag 0: rows 0,3,2 -> col0 max(1,-inf,2)=2 (row 2); col1: -0.0, 5 (row 3), 5 tie keeps row 3
  CHECK(r.output[0] == 2.0f);
  CHECK(r.output[1] == 5.0f);
  CHECK(r.max_indices[0] == 2);
  CHECK(r.max_indices[1] == 3);
  // bag 1: row 1 alone -> NaN copied
  CHECK(std::isnan(r.output[3]));
  CHECK(r.max_indices[3] == 1);
  // bag 2: rows 1 then 2: col1 NaN first survives (5 > NaN is false); col0 tie 2 == 2 keeps row 1
  CHECK(std::isnan(r.output[5]));
  CHECK(r.max_indices[4] == 1);
  CHECK(r.max_indices[5] == 1);
  CHECK(r.bag_size == std::vector<int64_t>{3, 1, 2});
  std::vector<int64_t> idx2{0}, off2{0};
  auto r2 = shapejit::embedding_bag(make_call(idx2, off2, Mode::kMax));
  CHECK(same_bits(r2.output[1], -0.0f));
}

TEST_CASE("ref: a later NaN never wins in max") {
  std::vector<int64_t> idx{2, 1}, off{0};
  auto r = shapejit::embedding_bag(make_call(idx, off, Mode::kMax));
  CHECK(r.output[1] == 5.0f);
  CHECK(r.max_indices[1] == 2);
}

TEST_CASE("ref: weighted sum uses fma and skips padding weights") {
  std::vector<int64_t> idx{0, 2, 1}, off{0};
  std::vector<float> w{3.0f, 0.5f, 100.0f};
  auto c = make_call(idx, off, Mode::kSum);
  c.per_sample_weights = w.data();
  c.padding_idx = 1;
  auto r = shapejit::embedding_bag(c);
  CHECK(r.output[0] == std::fmaf(0.5f, 2.0f, std::fmaf(3.0f, 1.0f, 0.0f)));
  CHECK(r.output[1] == 2.5f);
  CHECK(r.offset2bag == std::vector<int64_t>{0, 0, 0});  // padding present: offset2bag is [N]
}

TEST_CASE("ref: include_last_offset, mixed index types promote to int64") {
  std::vector<int32_t> idx{0, 2, 3};
  std::vector<int64_t> off{0, 2, 3};
  EmbeddingBagCall c;
  c.weight = {kTable.data(), DType::kF32, 4, 2, 2};
  c.indices = shapejit::IndexView(idx);
  c.offsets = shapejit::IndexView(off);
  c.mode = Mode::kMean;
  c.include_last_offset = true;
  auto r = shapejit::embedding_bag(c);
  CHECK(r.shapes.index_dtype == DType::kI64);
  CHECK(r.shapes.output_rows == 2);
  CHECK(r.output == std::vector<float>{1.5f, 2.5f, -kInf, 5.0f});
  CHECK(r.bag_size == std::vector<int64_t>{2, 1});
}

TEST_CASE("ref: torch's partial final offset (opt-in)") {
  std::vector<int64_t> idx{0, 2, 2, 2}, off{0, 1, 2};
  auto c = make_call(idx, off, Mode::kMean);
  c.include_last_offset = true;
  c.aten_partial_final_offset = true;
  auto r = shapejit::embedding_bag(c);
  // bag 1 sums position 1 only, but divides by N - offsets[1] = 3; trailing positions map to the
  // last bag, 1, as torch 2.x reports them (1.13 said 2).
  CHECK(r.output[2] == 2.0f / 3.0f);
  CHECK(r.bag_size == std::vector<int64_t>{1, 3});
  CHECK(r.offset2bag == std::vector<int64_t>{0, 1, 1, 1});
}

TEST_CASE("ref: the 2-D form is bags of equal length") {
  std::vector<int32_t> idx{0, 2, 3, 3};
  auto r = shapejit::embedding_bag_2d({kTable.data(), DType::kF32, 4, 2, 2}, shapejit::IndexView(idx), 2, 2,
                                      Mode::kSum);
  CHECK(r.shapes.index_dtype == DType::kI32);
  CHECK(r.output == std::vector<float>{3.0f, 5.0f, -2 * kInf, 10.0f});
  CHECK(r.bag_size.size() == 2);
}
