// Calls without index outputs (shapejit_embedding_bag_ex_args.skip_index_outputs): the output is
// bitwise the output of the same call with them, offset2bag, bag_size and max_indices get 0
// elements in the shapes and are never written (also when buffers are passed), the kernels are
// the `.noidx` keys for mean, max and padded sum, and an older caller's struct never skips.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr EmbagOutput kIndexOutputs[] = {EmbagOutput::kOffset2bag, EmbagOutput::kBagSize, EmbagOutput::kMaxIndices};

// Every table dtype; every 4th case large enough to run in parallel chunks on 2 threads.
shapejit::test::EmbagCaseOptions options(shapejit_dtype table, int64_t number) {
  shapejit::test::EmbagCaseOptions o;
  o.table = table;
  o.extended = true;
  o.allow_partial_final_offset = number % 2 == 0;  // the reference runs those either way
  const bool large = number % 4 == 0;
  o.max_dim = large ? 300 : 600;
  o.max_table_elements = 1 << 15;
  o.max_indices = large ? 4096 : 400;
  o.max_output_elements = large ? 1 << 17 : 1 << 14;
  return o;
}

bool all_bytes(std::span<const std::byte> bytes, unsigned char value) {
  return std::all_of(bytes.begin(), bytes.end(), [&](std::byte b) { return b == std::byte{value}; });
}

// One case with and without index outputs: "" when the outputs agree and the index outputs of
// the output-only call, passed as full-size buffers (odd cases) or as NULL (even), stay untouched.
std::string check_case(EmbagCase c) {
  const shapejit::test::GuardedTable table(c);
  c.skip_index_outputs = false;
  const shapejit_embedding_bag_ex_args full = c.to_ex_args(table.data());
  c.skip_index_outputs = true;
  const shapejit_embedding_bag_ex_args only = c.to_ex_args(table.data());
  shapejit_embedding_bag_shapes full_shapes{}, only_shapes{};
  if (shapejit_embedding_bag_ex_output_shapes(&full, &full_shapes) != SHAPEJIT_OK ||
      shapejit_embedding_bag_ex_output_shapes(&only, &only_shapes) != SHAPEJIT_OK)
    return std::string("shapes rejected a valid case: ") + shapejit_last_error();
  if (only_shapes.offset2bag_len != 0 || only_shapes.bag_size_len != 0 || only_shapes.max_indices_rows != 0)
    return "an output-only call's shapes give its index outputs elements";
  if (only_shapes.output_rows != full_shapes.output_rows || only_shapes.output_cols != full_shapes.output_cols)
    return "an output-only call's output shape differs";
  GuardedOutputs want(full_shapes, 0xA5, false, c.output_dtype);
  if (want.run(full) != SHAPEJIT_OK) return std::string("the full call failed: ") + shapejit_last_error();
  // Odd cases pass buffers for all four outputs, which the call must leave as they are.
  const bool pass_buffers = c.number % 2 == 1;
  GuardedOutputs got(pass_buffers ? full_shapes : only_shapes, 0x5A, !pass_buffers, c.output_dtype);
  if (got.run(only) != SHAPEJIT_OK) return std::string("the output-only call failed: ") + shapejit_last_error();
  if (const std::string guards = got.check_guards(); !guards.empty()) return guards;
  for (EmbagOutput w : kIndexOutputs)
    if (!all_bytes(got.bytes(w), 0x5A)) return std::string(shapejit::test::output_name(w)) + " was written";
  const auto a = want.bytes(EmbagOutput::kOutput), b = got.bytes(EmbagOutput::kOutput);
  // Bitwise but for a NaN's payload (see first_output_difference): compare element by element.
  const size_t size = c.output_dtype == SHAPEJIT_F32 ? 4 : 2;
  for (size_t e = 0; e * size < a.size(); ++e) {
    if (std::equal(a.begin() + e * size, a.begin() + (e + 1) * size, b.begin() + e * size)) continue;
    uint32_t x = 0, y = 0;
    std::memcpy(&x, a.data() + e * size, size);
    std::memcpy(&y, b.data() + e * size, size);
    const bool nans = size == 4 ? (x & 0x7FFFFFFFu) > 0x7F800000u && (y & 0x7FFFFFFFu) > 0x7F800000u
                                : c.output_dtype == SHAPEJIT_F16 ? (x & 0x7FFF) > 0x7C00 && (y & 0x7FFF) > 0x7C00
                                                                 : (x & 0x7FFF) > 0x7F80 && (y & 0x7FFF) > 0x7F80;
    if (!nans)
      return "output element " + std::to_string(e) + ": full call " + std::to_string(x) + ", output only " +
             std::to_string(y) + " (bits)";
  }
  return "";
}

}  // namespace

TEST_CASE("output only: the output equals the full call's, index outputs untouched (every dtype, 1 and 2 threads)") {
  const uint64_t seed = shapejit::test::test_seed(0x0A1F0);
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(120);
  MESSAGE("output-only calls: seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << cases
                                     << " cases per table dtype x threads {1, 2}, ISA "
                                     << shapejit::jit::isa_name(shapejit::rt::selected_isa()));
  int failures = 0;
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (shapejit_dtype table : {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8, SHAPEJIT_Q4, SHAPEJIT_Q2})
      for (int64_t k = 0; k < cases && failures < 4; ++k) {
        if (only && k != *only) continue;
        const EmbagCase c = shapejit::test::make_embag_case(seed, k, options(table, k));
        if (const std::string diff = check_case(c); !diff.empty()) {
          ++failures;
          FAIL_CHECK("with " << threads << " thread(s): " << diff << "\n" << c.describe());
        }
      }
  }
  shapejit_set_num_threads(0);
  CHECK(failures == 0);
}

TEST_CASE("output only: mean, max and padded sum run .noidx kernels; a plain sum's key is unchanged") {
  const float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const int64_t idx[3] = {0, 3, 1}, off[2] = {0, 1};
  shapejit_embedding_bag_args a{};
  a.weight = table, a.weight_dtype = SHAPEJIT_F32, a.num_rows = 4, a.dim = 2, a.row_stride = 2;
  a.indices = idx, a.index_dtype = SHAPEJIT_I64, a.num_indices = 3;
  a.offsets = off, a.offset_dtype = SHAPEJIT_I64, a.num_offsets = 2;
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  e.skip_index_outputs = 1;
  auto key_of = [&](shapejit_mode mode, bool padding) {
    e.call.mode = mode;
    e.call.has_padding_idx = padding;
    e.call.padding_idx = 3;
    return shapejit::rt::make_embag_key(shapejit::rt::plan_embedding_bag(e), shapejit::jit::Isa::kAvx2);
  };
  CHECK(!key_of(SHAPEJIT_MEAN, false).index_outputs);
  CHECK(!key_of(SHAPEJIT_MAX, false).index_outputs);
  CHECK(!key_of(SHAPEJIT_SUM, true).index_outputs);
  CHECK(key_of(SHAPEJIT_MAX, true).name() == "embag.avx2.f32.d2.max.i64.o64.pad.pf0.noidx");
  CHECK(key_of(SHAPEJIT_SUM, false).index_outputs);  // nothing to skip: one kernel either way
}

TEST_CASE("output only: a struct that ends before skip_index_outputs keeps the index outputs") {
  const float table[4] = {1, 2, 3, 4};
  const int32_t idx[2] = {1, 0}, off[1] = {0};
  shapejit_embedding_bag_args a{};
  a.weight = table, a.weight_dtype = SHAPEJIT_F32, a.num_rows = 2, a.dim = 2, a.row_stride = 2;
  a.indices = idx, a.index_dtype = SHAPEJIT_I32, a.num_indices = 2;
  a.offsets = off, a.offset_dtype = SHAPEJIT_I32, a.num_offsets = 1, a.mode = SHAPEJIT_MAX;
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  e.skip_index_outputs = 1;
  e.struct_size = offsetof(shapejit_embedding_bag_ex_args, skip_index_outputs);  // not read
  shapejit_embedding_bag_shapes s{};
  REQUIRE(shapejit_embedding_bag_ex_output_shapes(&e, &s) == SHAPEJIT_OK);
  CHECK(s.offset2bag_len == 2);
  CHECK(s.bag_size_len == 1);
  CHECK(s.max_indices_rows == 1);
  float out[2] = {};
  int32_t o2b[2] = {-1, -1}, bag_size[1] = {-1}, max_ids[2] = {-1, -1};
  REQUIRE(shapejit_embedding_bag_ex(&e, out, o2b, bag_size, max_ids) == SHAPEJIT_OK);
  CHECK(out[0] == 3.0f);
  CHECK(max_ids[0] == 1);
  CHECK(bag_size[0] == 2);
  CHECK(o2b[1] == 0);
}

TEST_CASE("output only: the C++ API returns empty index outputs, and bad input still leaves the output alone") {
  const std::vector<float> table = {1, -2, 3, -4, 5, -6};
  const std::vector<int64_t> idx = {2, 0, 1}, off = {0, 2};
  shapejit::EmbeddingBagCall call;
  call.weight = {table.data(), shapejit::DType::kF32, 3, 2, 2};
  call.indices = idx;
  call.offsets = off;
  call.mode = shapejit::Mode::kMax;
  call.skip_index_outputs = true;
  const shapejit::EmbeddingBagResult r = shapejit::embedding_bag(call);
  CHECK(r.output == std::vector<float>{5, -2, 3, -4});
  CHECK(r.offset2bag.empty());
  CHECK(r.bag_size.empty());
  CHECK(r.max_indices.empty());
  CHECK(r.shapes.max_indices_rows == 0);

  const std::vector<int64_t> bad = {2, 7, 1};
  call.indices = bad;
  std::vector<float> out(4, 42.0f);
  CHECK_THROWS_WITH_AS(shapejit::embedding_bag(call, {out.data(), nullptr, nullptr, nullptr}),
                       doctest::Contains("indices[1] = 7"), shapejit::Error);
  CHECK(out == std::vector<float>(4, 42.0f));
}
