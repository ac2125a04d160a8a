// Weighted sums over f32 tables round once per term (fused multiply-add) without padding_idx,
// as torch's FBGEMM kernel, and twice (the product, then the sum) with it, as ATen's own loop,
// which torch runs for such calls: docs/embedding-bag-semantics.md, "Weighted sums and ATen's
// two paths". This test pins both on inputs where they differ most, overflow of a rounded
// product, for the reference, the selected ISA's kernel and the generic kernel.
#include <doctest/doctest.h>

#include <bit>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.h"

namespace {

constexpr float kMax = std::numeric_limits<float>::max();
constexpr int64_t kDim = 19;  // a full AVX2 vector, and tails on every ISA

// Three bags over four rows; row 3 is the padding row, which only bag 0 names. Column 0 takes
// products beyond FLT_MAX that the running sum brings back into range; every other column
// takes one product whose rounding the fused form avoids.
struct WeightedCase {
  std::vector<float> table = std::vector<float>(4 * kDim);
  std::vector<int64_t> indices{0, 1, 2, 3, 0, 1, 2, 0, 1};
  std::vector<int64_t> offsets{0, 4, 7};
  std::vector<float> weights{1.0f, 1.5f, -1.5f, 7.0f, 1.0f, 1.5f, -3.0f, 1.0f, 1.0f + 0x1p-12f};

  WeightedCase() {
    const float col0[4] = {-kMax, kMax, kMax, 5.0f};
    const float rest[4] = {-1.0f, 1.0f + 0x1p-12f, 0.0f, 5.0f};
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t d = 0; d < kDim; ++d) table[size_t(r * kDim + d)] = d == 0 ? col0[r] : rest[r];
  }

  shapejit_embedding_bag_args args() const {
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = 4;
    a.dim = kDim;
    a.row_stride = kDim;
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = int64_t(indices.size());
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = int64_t(offsets.size());
    a.per_sample_weights = weights.data();
    a.mode = SHAPEJIT_SUM;
    a.has_padding_idx = 1;
    a.padding_idx = 3;
    return a;
  }

  // Bag b, column d, in index order from +0.0, with one rounding per term or with two; row 3
  // is skipped as padding unless `padding` is false.
  float sum(int64_t b, int64_t d, bool fused, bool padding = true) const {
    const int64_t end = b + 1 < int64_t(offsets.size()) ? offsets[size_t(b + 1)] : int64_t(indices.size());
    float acc = 0.0f;
    for (int64_t i = offsets[size_t(b)]; i < end; ++i) {
      const int64_t row = indices[size_t(i)];
      if (padding && row == 3) continue;
      const float x = table[size_t(row * kDim + d)], w = weights[size_t(i)];
      if (fused) {
        acc = std::fmaf(w, x, acc);
      } else {
        const float product = w * x;  // rounded here (the build uses -ffp-contract=off)
        acc = acc + product;
      }
    }
    return acc;
  }
};

std::vector<float> run_api(const shapejit_embedding_bag_args& a) {
  std::vector<float> out(size_t(3 * kDim), -1.0f);
  std::vector<int64_t> offset2bag(a.num_indices), bag_size(3), max_indices(3);
  REQUIRE(shapejit_embedding_bag(&a, out.data(), offset2bag.data(), bag_size.data(), max_indices.data()) ==
          SHAPEJIT_OK);
  return out;
}

std::vector<float> run_api_ex(const shapejit_embedding_bag_ex_args& e) {
  std::vector<float> out(size_t(3 * kDim), -1.0f);
  std::vector<int64_t> offset2bag(e.call.num_indices), bag_size(3), max_indices(3);
  REQUIRE(shapejit_embedding_bag_ex(&e, out.data(), offset2bag.data(), bag_size.data(), max_indices.data()) ==
          SHAPEJIT_OK);
  return out;
}

// Every column of every bag as the walk gives it (NaN: any NaN).
void check_walk(const WeightedCase& c, const std::vector<float>& out, bool fused, bool padding) {
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t d = 0; d < kDim; ++d) {
      CAPTURE(b);
      CAPTURE(d);
      const float want = c.sum(b, d, fused, padding), got = out[size_t(b * kDim + d)];
      if (std::isnan(want)) CHECK(std::isnan(got));
      else CHECK(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want));
    }
}

}  // namespace

TEST_CASE("weighted sum with padding_idx: two roundings per term, as ATen's loop; without it one") {
  const WeightedCase c;
  // The two walks differ on these inputs as the semantics document says: a rounded product
  // that overflows is infinite at once, a later opposite one makes NaN.
  CHECK(c.sum(0, 0, true) == -kMax);
  CHECK(std::isnan(c.sum(0, 0, false)));
  CHECK(c.sum(1, 0, true) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(c.sum(1, 0, false)));
  CHECK(std::isfinite(c.sum(2, 0, true)));
  CHECK(c.sum(2, 0, false) == std::numeric_limits<float>::infinity());
  // Without overflow the two differ by the rounding of the product: 2^-11 + 2^-24 vs 2^-11.
  CHECK(c.sum(2, 1, true) == 0x1p-11f + 0x1p-24f);
  CHECK(c.sum(2, 1, false) == 0x1p-11f);

  const shapejit_embedding_bag_args a = c.args();
  std::vector<float> ref(size_t(3 * kDim));
  std::vector<int64_t> offset2bag(a.num_indices), bag_size(3), max_indices(3);
  shapejit::ref::embedding_bag(a, ref.data(), offset2bag.data(), bag_size.data(), max_indices.data());
  check_walk(c, ref, false, true);
  check_walk(c, run_api(a), false, true);  // the selected ISA's kernel
  {
    const shapejit::rt::ScopedIsaOverride pin(shapejit::jit::Isa::kScalar);  // the generic kernel
    check_walk(c, run_api(a), false, true);
  }
  // Without padding_idx every term is one fma; the row that was padding now counts.
  shapejit_embedding_bag_args unpadded = a;
  unpadded.has_padding_idx = 0;
  for (const bool generic : {false, true}) {
    CAPTURE(generic);
    std::optional<shapejit::rt::ScopedIsaOverride> pin;
    if (generic) pin.emplace(shapejit::jit::Isa::kScalar);
    const std::vector<float> out = run_api(unpadded);
    CHECK(out[0] == std::fmaf(7.0f, 5.0f, c.sum(0, 0, true)));
    // Bag 2 names no padding row: the fused walk, finite in column 0 and 2^-11 + 2^-24 in column 1.
    CHECK(out[2 * kDim] == c.sum(2, 0, true));
    CHECK(out[2 * kDim + 1] == 0x1p-11f + 0x1p-24f);
  }
}

// aten_loop_arithmetic asks for ATen's loop without padding_idx (torch runs it for a column-strided
// table or strided weights): every row counts and every product is rounded first. A struct that
// ends before the field keeps the fused terms.
TEST_CASE("weighted sum, aten_loop_arithmetic without padding_idx: two roundings per term") {
  const WeightedCase c;
  shapejit_embedding_bag_args a = c.args();
  a.has_padding_idx = 0;
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  e.aten_loop_arithmetic = 1;
  std::vector<float> ref(size_t(3 * kDim));
  std::vector<int64_t> offset2bag(a.num_indices), bag_size(3), max_indices(3);
  shapejit::ref::embedding_bag(e, ref.data(), offset2bag.data(), bag_size.data(), max_indices.data());
  check_walk(c, ref, false, false);
  CHECK(std::isnan(ref[0]));  // bag 0 with row 3 counted: still the rounded walk's NaN
  for (const bool generic : {false, true}) {
    CAPTURE(generic);
    std::optional<shapejit::rt::ScopedIsaOverride> pin;
    if (generic) pin.emplace(shapejit::jit::Isa::kScalar);
    check_walk(c, run_api_ex(e), false, false);
    shapejit_embedding_bag_ex_args older = e;
    older.struct_size = offsetof(shapejit_embedding_bag_ex_args, aten_loop_arithmetic);  // the field unread
    check_walk(c, run_api_ex(older), true, false);
  }
}
