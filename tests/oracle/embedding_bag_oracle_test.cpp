// PyTorch oracle for the embedding bag: thousands of random valid calls go through the public
// C ABI and through ATen 1.13 (_embedding_bag_forward_only, and for subsets _embedding_bag and
// embedding_bag) on the same buffers; all four outputs must agree exactly. ATen headers only:
// <torch/torch.h> would cost 70 s of compile time.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <doctest/doctest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr uint64_t kDefaultSeed = 20240613;
constexpr int64_t kDefaultCases = 4000;
constexpr int kMaxFailingCases = 5;  // stop after this many, the first ones tell the story

/// The three ATen entry points compared; they differ only in the sum-mode bag_size shape.
enum class AtenOp { kForwardOnly, kUnderscore, kPublic };

const char* op_name(AtenOp op) {
  switch (op) {
    case AtenOp::kForwardOnly: return "at::_embedding_bag_forward_only";
    case AtenOp::kUnderscore: return "at::_embedding_bag";
    case AtenOp::kPublic: return "at::embedding_bag";
  }
  return "?";
}

at::Tensor int_tensor(const std::vector<int64_t>& v64, const std::vector<int32_t>& v32, shapejit_dtype dtype) {
  const int64_t n = int64_t(v64.size());
  if (dtype == SHAPEJIT_I32) return at::from_blob(const_cast<int32_t*>(v32.data()), {n}, at::kInt);
  return at::from_blob(const_cast<int64_t*>(v64.data()), {n}, at::kLong);
}

/// ATen views of one case's buffers (no copies; ATen only reads them).
struct AtenInputs {
  at::Tensor weight, indices, offsets;  // as the case has them (dtypes may differ)
  c10::optional<at::Tensor> per_sample_weights;

  explicit AtenInputs(const EmbagCase& c) {
    // Strided rows: a [n, row_stride] tensor sliced to D columns.
    weight = at::from_blob(const_cast<float*>(c.weight.data()), {c.num_rows, c.row_stride}, at::kFloat)
                 .slice(1, 0, c.dim);
    indices = int_tensor(c.indices, c.indices_i32, c.index_dtype);
    offsets = int_tensor(c.offsets, c.offsets_i32, c.offset_dtype);
    if (c.weighted())
      per_sample_weights = at::from_blob(const_cast<float*>(c.per_sample_weights.data()),
                                         {int64_t(c.per_sample_weights.size())}, at::kFloat);
  }
};

using AtenResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

AtenResult call_aten(const EmbagCase& c, const AtenInputs& in, AtenOp op) {
  const int64_t mode = c.mode;
  if (op == AtenOp::kPublic) {  // promotes mixed index types and wraps a negative padding_idx itself
    const c10::optional<int64_t> padding_idx =
        c.padding_idx ? c10::optional<int64_t>(*c.padding_idx) : c10::nullopt;
    return at::embedding_bag(in.weight, in.indices, in.offsets, false, mode, false, in.per_sample_weights,
                             c.include_last_offset, padding_idx);
  }
  // The underscore ops want one index dtype and an already-wrapped padding row (-1: none).
  const bool mixed = c.index_dtype != c.offset_dtype;
  const at::Tensor indices = mixed ? in.indices.to(at::kLong) : in.indices;
  const at::Tensor offsets = mixed ? in.offsets.to(at::kLong) : in.offsets;
  const int64_t padding = c.padding_row().value_or(-1);
  if (op == AtenOp::kForwardOnly)
    return at::_embedding_bag_forward_only(in.weight, indices, offsets, false, mode, false, in.per_sample_weights,
                                           c.include_last_offset, padding);
  return at::_embedding_bag(in.weight, indices, offsets, false, mode, false, in.per_sample_weights,
                            c.include_last_offset, padding);
}

std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << sizes;
  return os.str();
}

std::string float_bits_text(float v) {
  std::ostringstream os;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g (bits 0x%08x)", double(v), std::bit_cast<uint32_t>(v));
  os << buf;
  return os.str();
}

// "" when equal; else the first differing element. NaN in ATen accepts any NaN (payloads vary).
std::string compare_floats(const at::Tensor& aten, std::span<const std::byte> ours, int64_t rows, int64_t cols) {
  const std::vector<int64_t> want{rows, cols};
  if (aten.scalar_type() != at::kFloat || aten.sizes() != at::IntArrayRef(want))
    return "output: ATen returned " + std::string(c10::toString(aten.scalar_type())) + shape_text(aten.sizes()) +
           ", shapejit Float" + shape_text(want);
  const at::Tensor a = aten.contiguous();
  const float* av = a.data_ptr<float>();
  for (int64_t i = 0; i < rows * cols; ++i) {
    float o;
    std::memcpy(&o, ours.data() + i * 4, 4);
    const float x = av[i];
    bool same;
    if (std::isnan(x)) same = std::isnan(o);
    else same = std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(o);
    if (!same) {
      std::ostringstream os;
      os << "output[" << i / cols << "][" << i % cols << "]: ATen " << float_bits_text(x) << ", shapejit "
         << float_bits_text(o);
      return os.str();
    }
  }
  return "";
}

std::string compare_ints(const char* name, const at::Tensor& aten, std::span<const std::byte> ours,
                         shapejit_dtype dtype, const std::vector<int64_t>& want) {
  const at::ScalarType want_type = dtype == SHAPEJIT_I32 ? at::kInt : at::kLong;
  if (aten.scalar_type() != want_type || aten.sizes() != at::IntArrayRef(want))
    return std::string(name) + ": ATen returned " + c10::toString(aten.scalar_type()) + shape_text(aten.sizes()) +
           ", shapejit " + c10::toString(want_type) + shape_text(want);
  const at::Tensor a = aten.contiguous().to(at::kLong);
  const int64_t* av = a.data_ptr<int64_t>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    int64_t o;
    if (dtype == SHAPEJIT_I32) {
      int32_t v;
      std::memcpy(&v, ours.data() + i * 4, 4);
      o = v;
    } else {
      std::memcpy(&o, ours.data() + i * 8, 8);
    }
    if (av[i] != o) {
      std::ostringstream os;
      os << name << "[" << i << "]";
      if (want.size() == 2) os << " ([" << i / want[1] << "][" << i % want[1] << "])";
      os << ": ATen " << av[i] << ", shapejit " << o;
      return os.str();
    }
  }
  return "";
}

// Compares all four outputs; returns one line per differing output.
std::string compare_all(const EmbagCase& c, const shapejit_embedding_bag_shapes& s, const GuardedOutputs& ours,
                        const AtenResult& r, AtenOp op) {
  std::string diff;
  auto add = [&](const std::string& line) {
    if (!line.empty()) diff += "  " + std::string(op_name(op)) + ": " + line + "\n";
  };
  add(compare_floats(std::get<0>(r), ours.bytes(EmbagOutput::kOutput), s.output_rows, s.output_cols));
  add(compare_ints("offset2bag", std::get<1>(r), ours.bytes(EmbagOutput::kOffset2bag), s.index_out_dtype,
                   {s.offset2bag_len}));
  // The autograd op sizes sum mode's (all-zero) bag_size and max_indices by B, not len(offsets);
  // compare its B zeros with the first B of ours.
  const bool by_bags = op == AtenOp::kUnderscore && c.mode == SHAPEJIT_SUM;
  const int64_t count_len = by_bags ? s.output_rows : s.bag_size_len;
  const size_t int_bytes = s.index_out_dtype == SHAPEJIT_I32 ? 4 : 8;
  add(compare_ints("bag_size", std::get<2>(r), ours.bytes(EmbagOutput::kBagSize).first(size_t(count_len) * int_bytes),
                   s.index_out_dtype, {count_len}));
  std::vector<int64_t> max_shape{s.max_indices_rows, s.max_indices_cols};
  if (c.mode != SHAPEJIT_MAX) max_shape = {by_bags ? count_len : s.max_indices_rows};  // ATen: 1-D
  const size_t max_elems = size_t(max_shape[0] * (max_shape.size() == 2 ? max_shape[1] : 1));
  add(compare_ints("max_indices", std::get<3>(r), ours.bytes(EmbagOutput::kMaxIndices).first(max_elems * int_bytes),
                   s.index_out_dtype, max_shape));
  return diff;
}

/// How many cases of each kind were compared (printed at the end, so coverage is visible).
struct Coverage {
  std::map<std::string, int64_t> counts;
  int64_t compared = 0;

  void add(const EmbagCase& c, AtenOp extra) {
    ++compared;
    auto& m = counts;
    ++m[std::string("mode ") + shapejit::test::mode_name(c.mode) + (c.weighted() ? " weighted" : "")];
    ++m[std::string("table ") + shapejit::test::table_kind_name(c.table_kind)];
    ++m[c.index_dtype != c.offset_dtype ? "mixed index/offset dtypes"
        : c.index_dtype == SHAPEJIT_I32 ? "int32 indices+offsets" : "int64 indices+offsets"];
    if (c.padding_idx) ++m[*c.padding_idx < 0 ? "padding_idx negative" : "padding_idx positive"];
    if (c.padding_idx && c.weighted()) ++m["weighted sum with padding"];
    if (c.include_last_offset) ++m["include_last_offset"];
    if (c.aten_partial_final_offset) ++m["aten_partial_final_offset"];
    if (c.strided()) ++m["strided rows"];
    if (c.num_bags() == 0) ++m["zero bags"];
    if (c.indices.empty()) ++m["N = 0"];
    bool empty_bag = false;
    for (size_t b = 0; b + 1 < c.offsets.size(); ++b) empty_bag |= c.offsets[b] == c.offsets[b + 1];
    if (empty_bag) ++m["has empty bags"];
    if (c.dim > 256) ++m["D > 256"];
    if (extra != AtenOp::kForwardOnly) ++m[std::string("also vs ") + op_name(extra)];
  }

  /// Kinds the generator must have produced in a full run (a generator change cannot silently
  /// stop covering a rule).
  std::string missing() const {
    static constexpr const char* kRequired[] = {
        "mode sum", "mode sum weighted", "mode mean", "mode max", "table random", "table small-integers",
        "table few-values", "table specials", "mixed index/offset dtypes", "int32 indices+offsets",
        "int64 indices+offsets", "padding_idx negative", "padding_idx positive",
        "weighted sum with padding", "include_last_offset", "aten_partial_final_offset",
        "strided rows", "zero bags", "N = 0", "has empty bags", "D > 256", "also vs at::_embedding_bag",
        "also vs at::embedding_bag"};
    std::string out;
    for (const char* name : kRequired)
      if (!counts.contains(name)) out += std::string(out.empty() ? "" : ", ") + name;
    return out;
  }

  std::string report() const {
    std::ostringstream os;
    os << "embedding_bag oracle compared " << compared << " cases with ATen:";
    for (const auto& [name, n] : counts) os << "\n  " << name << ": " << n;
    return os.str();
  }
};

// One case through the library and ATen. Returns "" when they agree, else the failure report.
std::string check_case(const EmbagCase& c, Coverage& coverage) {
  const shapejit_embedding_bag_args args = c.to_args();
  shapejit_embedding_bag_shapes shapes{};
  // A valid case that the library rejects is a failure; ATen never sees it (it is undefined
  // on inputs the semantics reject, and these are meant to be valid).
  if (shapejit_embedding_bag_output_shapes(&args, &shapes) != SHAPEJIT_OK)
    return std::string("shapejit rejected a valid case (output_shapes): ") + shapejit_last_error();
  GuardedOutputs ours(shapes, 0xCD, /*null_when_empty=*/c.number % 2 == 0);
  if (ours.run(args) != SHAPEJIT_OK)
    return std::string("shapejit rejected a valid case: ") + shapejit_last_error();
  if (std::string g = ours.check_guards(); !g.empty()) return g;

  const AtenInputs in(c);
  const AtenOp extra = c.number % 4 == 1 ? AtenOp::kUnderscore : c.number % 4 == 2 ? AtenOp::kPublic
                                                                                     : AtenOp::kForwardOnly;
  auto compare_with = [&](AtenOp op) -> std::string {
    try {
      return compare_all(c, shapes, ours, call_aten(c, in, op), op);
    } catch (const std::exception& e) {
      return std::string("  ") + op_name(op) + " threw: " + e.what() + "\n";
    }
  };
  std::string diff = compare_with(AtenOp::kForwardOnly);
  if (diff.empty() && extra != AtenOp::kForwardOnly) diff = compare_with(extra);
  if (diff.empty()) coverage.add(c, extra);
  return diff;
}

TEST_CASE("oracle: embedding_bag equals ATen on random valid calls (all four outputs)") {
  at::set_num_threads(1);
  const uint64_t seed = shapejit::test::test_seed(kDefaultSeed);
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(kDefaultCases);
  MESSAGE("embedding_bag oracle: seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << cases << " cases");

  const auto start = std::chrono::steady_clock::now();
  Coverage coverage;
  int failing = 0;
  for (int64_t k = 0; k < cases && failing < kMaxFailingCases; ++k) {
    if (only && k != *only) continue;
    const EmbagCase c = shapejit::test::make_embag_case(seed, k);
    if (std::string diff = check_case(c, coverage); !diff.empty()) {
      ++failing;
      FAIL_CHECK(c.describe() << diff);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE(coverage.report() << "\n  time: " << seconds << " s");
  CHECK(failing == 0);
  if (!only && failing == 0) {
    CHECK(coverage.compared >= 2000);
    CHECK_MESSAGE(coverage.missing().empty(), "no case covered: " << coverage.missing());
  }
}

// The comparisons themselves must be able to fail.
TEST_CASE("oracle: the output comparison reports one ulp, a lost NaN, a wrong dtype or shape") {
  auto bytes_of = [](const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); };
  const at::Tensor aten = at::tensor({1.0f, std::nanf(""), -0.0f}, at::kFloat).reshape({1, 3});
  const std::vector<float> same{1.0f, -std::nanf("0x123"), -0.0f};  // any NaN matches ATen's NaN
  CHECK(compare_floats(aten, bytes_of(same), 1, 3).empty());
  const std::vector<float> ulp{std::nextafter(1.0f, 2.0f), std::nanf(""), -0.0f};
  CHECK_FALSE(compare_floats(aten, bytes_of(ulp), 1, 3).empty());
  const std::vector<float> lost_nan{1.0f, 0.0f, -0.0f};
  CHECK_FALSE(compare_floats(aten, bytes_of(lost_nan), 1, 3).empty());
  const std::vector<float> plus_zero{1.0f, std::nanf(""), 0.0f};  // -0.0 vs +0.0 is a difference
  CHECK_FALSE(compare_floats(aten, bytes_of(plus_zero), 1, 3).empty());
  CHECK_FALSE(compare_floats(aten, bytes_of(same), 3, 1).empty());

  const std::vector<int64_t> ints{0, 2, 5};
  const auto int_bytes = std::as_bytes(std::span<const int64_t>(ints));
  const at::Tensor aten_ints = at::tensor({0, 2, 5}, at::kLong);
  CHECK(compare_ints("bag_size", aten_ints, int_bytes, SHAPEJIT_I64, {3}).empty());
  CHECK_FALSE(compare_ints("bag_size", aten_ints.to(at::kInt), int_bytes, SHAPEJIT_I64, {3}).empty());
  CHECK_FALSE(compare_ints("bag_size", aten_ints.reshape({3, 1}), int_bytes, SHAPEJIT_I64, {3}).empty());
  CHECK_FALSE(compare_ints("bag_size", at::tensor({0, 2, 4}, at::kLong), int_bytes, SHAPEJIT_I64, {3}).empty());
}

// docs/embedding-bag-semantics.md, "Weighted sums and ATen's two paths": without padding_idx
// torch's FBGEMM kernel fuses w * x into the sum, with it ATen's own loop rounds each product,
// and shapejit does what torch does in each case. Pinned where the two paths differ most, a
// product beyond FLT_MAX, so a PyTorch that changes either path fails here by name.
TEST_CASE("oracle: weighted sums fuse without padding_idx and round each product with it, as torch") {
  at::set_num_threads(1);
  constexpr float kMax = std::numeric_limits<float>::max();
  std::vector<float> table{-kMax, kMax, kMax, 5.0f};  // [4, 1]; row 3 is the padding row
  std::vector<int64_t> indices{0, 1, 2, 3, 0, 1, 2, 0, 1}, offsets{0, 4, 7};
  std::vector<float> weights{1.0f, 1.5f, -1.5f, 7.0f, 1.0f, 1.5f, -3.0f, 1.0f, 1.0f + 0x1p-12f};
  const int64_t n = int64_t(indices.size()), bags = int64_t(offsets.size());
  // Bag b's sum in index order from +0.0, fused or with each product rounded first.
  auto walk = [&](int64_t b, bool padding, bool fused) {
    const int64_t end = b + 1 < bags ? offsets[size_t(b + 1)] : n;
    float acc = 0.0f;
    for (int64_t i = offsets[size_t(b)]; i < end; ++i) {
      const int64_t row = indices[size_t(i)];
      if (padding && row == 3) continue;
      const float x = table[size_t(row)], w = weights[size_t(i)];
      if (fused) {
        acc = std::fmaf(w, x, acc);
      } else {
        const float product = w * x;
        acc = acc + product;
      }
    }
    return acc;
  };
  auto same = [](float a, float b) {
    return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  };
  for (const bool padding : {false, true}) {
    CAPTURE(padding);
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = 4;
    a.dim = 1;
    a.row_stride = 1;
    a.indices = indices.data();
    a.index_dtype = SHAPEJIT_I64;
    a.num_indices = n;
    a.offsets = offsets.data();
    a.offset_dtype = SHAPEJIT_I64;
    a.num_offsets = bags;
    a.per_sample_weights = weights.data();
    a.mode = SHAPEJIT_SUM;
    a.has_padding_idx = padding;
    a.padding_idx = 3;
    std::vector<float> ours(static_cast<size_t>(bags));
    std::vector<int64_t> offset2bag(static_cast<size_t>(n)), bag_size(static_cast<size_t>(bags)),
        max_indices(static_cast<size_t>(bags));
    REQUIRE(shapejit_embedding_bag(&a, ours.data(), offset2bag.data(), bag_size.data(), max_indices.data()) ==
            SHAPEJIT_OK);
    const at::Tensor aten = std::get<0>(at::_embedding_bag_forward_only(
        at::from_blob(table.data(), {4, 1}, at::kFloat), at::from_blob(indices.data(), {n}, at::kLong),
        at::from_blob(offsets.data(), {bags}, at::kLong), false, 0, false,
        at::from_blob(weights.data(), {n}, at::kFloat), false, padding ? 3 : -1));
    for (int64_t b = 0; b < bags; ++b) {
      CAPTURE(b);
      const float fused = walk(b, padding, true), rounded = walk(b, padding, false);
      CHECK(same(ours[size_t(b)], padding ? rounded : fused));
      CHECK(same(aten[b][0].item<float>(), padding ? rounded : fused));
      if (padding) CHECK_FALSE(same(fused, rounded));  // every bag shows the difference
    }
  }
}

}  // namespace
