// Strided output rows (shapejit_embedding_bag_ex_args.output_row_stride): every row equals the
// dense call's, bitwise; the bytes between rows and around the buffer are never written; each
// generated kernel of the host (and the generic kernel) honours the stride, max_indices staying
// dense; calls writing column slices of one buffer concatenate; bad strides are refused with the
// outputs untouched.
#include <doctest/doctest.h>

#include <asmjit/core.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_generic_kernel.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/validate.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"
#include "support/generated_code_report.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::jit::Isa;
using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr shapejit_dtype kTables[] = {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8, SHAPEJIT_Q4, SHAPEJIT_Q2};

shapejit::test::EmbagCaseOptions options(shapejit_dtype table) {
  shapejit::test::EmbagCaseOptions o;
  o.table = table;
  o.extended = true;
  o.allow_partial_final_offset = false;  // the runtime sends those calls to the reference
  o.max_dim = 300;
  o.max_table_elements = 1 << 15;
  o.max_indices = 600;
  o.max_output_elements = 1 << 14;
  return o;
}

// A stride past the row by 1, a few or many elements (odd ones misalign every other row's
// vectors), drawn from the case number.
int64_t stride_for(const EmbagCase& c) {
  constexpr int64_t kExtra[] = {1, 3, 16, 61};
  return c.dim + kExtra[c.number % 4];
}

// The case through the C ABI dense (want) and strided (got): "" when every row agrees.
std::string check_api(EmbagCase c) {
  const shapejit::test::GuardedTable table(c);
  const shapejit_embedding_bag_ex_args dense = c.to_ex_args(table.data());
  c.output_row_stride = stride_for(c);
  const shapejit_embedding_bag_ex_args strided = c.to_ex_args(table.data());
  shapejit_embedding_bag_shapes shapes{}, strided_shapes{};
  if (shapejit_embedding_bag_ex_output_shapes(&dense, &shapes) != SHAPEJIT_OK ||
      shapejit_embedding_bag_ex_output_shapes(&strided, &strided_shapes) != SHAPEJIT_OK)
    return std::string("shapes rejected a valid case: ") + shapejit_last_error();
  if (std::memcmp(&shapes, &strided_shapes, sizeof shapes) != 0) return "the stride changed the output shapes";
  GuardedOutputs want(shapes, 0xA5, false, c.output_dtype);
  GuardedOutputs got(shapes, 0x5A, false, c.output_dtype, c.output_row_stride);
  if (want.run(dense) != SHAPEJIT_OK) return std::string("the dense call failed: ") + shapejit_last_error();
  if (got.run(strided) != SHAPEJIT_OK) return std::string("the strided call failed: ") + shapejit_last_error();
  return shapejit::test::first_output_difference(want, got, c.output_dtype);
}

// The case's kernel for `isa` (the generic kernel for kScalar) run directly on strided output,
// against the reference's dense rows.
std::string check_kernel(EmbagCase c, Isa isa, asmjit::JitRuntime& rt) {
  const shapejit::test::GuardedTable table(c);
  const shapejit_embedding_bag_ex_args dense = c.to_ex_args(table.data());
  c.output_row_stride = stride_for(c);
  const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(c.to_ex_args(table.data()));
  const shapejit_embedding_bag_shapes& shapes = plan.shapes;
  GuardedOutputs want(shapes, 0xA5, false, c.output_dtype);
  GuardedOutputs got(shapes, 0x5A, false, c.output_dtype, c.output_row_stride);
  shapejit::ref::embedding_bag(dense, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  const shapejit::jit::EmbagKernelArgs args =
      shapejit::rt::make_embag_kernel_args(plan, got.data(EmbagOutput::kOutput), got.data(EmbagOutput::kOffset2bag),
                                           got.data(EmbagOutput::kBagSize), got.data(EmbagOutput::kMaxIndices));
  shapejit::rt::zero_sum_mode_counts(plan, got.data(EmbagOutput::kBagSize), got.data(EmbagOutput::kMaxIndices));
  shapejit::rt::fill_unbagged_positions(plan, got.data(EmbagOutput::kOffset2bag));
  if (isa == Isa::kScalar) {
    shapejit::rt::generic_embag_kernel(shapejit::rt::make_embag_key(plan, isa))(&args);
  } else {
    const shapejit::jit::EmbagKey key = shapejit::rt::make_embag_key(plan, isa);
    if (key.isa != isa) return "";  // a key this ISA's generator refuses runs the generic kernel
    const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
    shapejit::test::note_direct_run(key.isa);
    kernel.fn(&args);
    rt.release(kernel.fn);
  }
  const std::string diff = shapejit::test::first_output_difference(want, got, c.output_dtype);
  return diff.empty() ? "" : shapejit::rt::make_embag_key(plan, isa).name() + ": " + diff;
}

shapejit_embedding_bag_args small_call(const float* table, const int64_t* idx, const int64_t* off) {
  shapejit_embedding_bag_args a{};
  a.weight = table, a.weight_dtype = SHAPEJIT_F32, a.num_rows = 4, a.dim = 3, a.row_stride = 3;
  a.indices = idx, a.index_dtype = SHAPEJIT_I64, a.num_indices = 4;
  a.offsets = off, a.offset_dtype = SHAPEJIT_I64, a.num_offsets = 2;
  return a;
}

}  // namespace

TEST_CASE("output stride: each row equals the dense call's, gaps untouched (every dtype, 1 and 2 threads)") {
  const uint64_t seed = shapejit::test::test_seed(0x57121DE);
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(60);
  MESSAGE("strided outputs through the C ABI: seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << cases
                                                      << " cases per table dtype x threads {1, 2}");
  int failures = 0;
  for (int threads : {1, 2}) {
    REQUIRE(shapejit_set_num_threads(threads) == SHAPEJIT_OK);
    for (shapejit_dtype table : kTables)
      for (int64_t k = 0; k < cases && failures < 4; ++k) {
        if (only && k != *only) continue;
        const EmbagCase c = shapejit::test::make_embag_case(seed, k, options(table));
        if (const std::string diff = check_api(c); !diff.empty()) {
          ++failures;
          FAIL_CHECK("with " << threads << " thread(s), stride " << stride_for(c) << ": " << diff << "\n"
                             << c.describe());
        }
      }
  }
  shapejit_set_num_threads(0);
  CHECK(failures == 0);
}

TEST_CASE("output stride: every host ISA's kernels and the generic kernel write strided rows") {
  const uint64_t seed = shapejit::test::test_seed(0x57121DF);
  const int64_t cases = shapejit::test::test_case_count(40);
  std::vector<Isa> isas = shapejit::test::host_isas();
  isas.push_back(Isa::kScalar);  // the generic kernel
  int failures = 0;
  for (Isa isa : isas) {
    asmjit::JitRuntime rt;
    for (shapejit_dtype table : kTables)
      for (int64_t k = 0; k < cases && failures < 4; ++k) {
        const EmbagCase c = shapejit::test::make_embag_case(seed, k, options(table));
        if (const std::string diff = check_kernel(c, isa, rt); !diff.empty()) {
          ++failures;
          FAIL_CHECK(shapejit::jit::isa_name(isa) << ", stride " << stride_for(c) << ", seed " << seed << ": " << diff
                                                  << "\n"
                                                  << c.describe());
        }
      }
  }
  CHECK(failures == 0);
}

TEST_CASE("output stride: a stride of dim is dense and shares its kernel; another names .os<N>") {
  const float table[12] = {};
  const int64_t idx[4] = {0, 1, 2, 3}, off[2] = {0, 2};
  shapejit_embedding_bag_ex_args e{};
  const shapejit_embedding_bag_args a = small_call(table, idx, off);
  shapejit_embedding_bag_ex_init(&e, &a);
  const auto key_of = [&](int64_t stride) {
    e.output_row_stride = stride;
    return shapejit::rt::make_embag_key(shapejit::rt::plan_embedding_bag(e), Isa::kAvx2);
  };
  CHECK(key_of(0) == key_of(3));
  const shapejit::jit::EmbagKey strided = key_of(8);
  CHECK(strided.name() == "embag.avx2.f32.d3.sum.i64.o64.pf0.os8");
  const auto parsed = shapejit::jit::parse_embag_key(strided.name());
  REQUIRE(parsed.has_value());
  CHECK(*parsed == strided);
  CHECK(!shapejit::jit::parse_embag_key("embag.avx2.f32.d3.sum.i64.o64.os3"));  // dense rows have no suffix
  CHECK(!shapejit::jit::parse_embag_key("embag.avx2.f32.d3.sum.i64.o64.os2"));
}

TEST_CASE("output stride: two calls into column slices of one buffer give torch.cat(..., dim=1)") {
  const float t1[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const float t2[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
  const int64_t idx[4] = {0, 1, 2, 3}, off[2] = {0, 2};
  shapejit_embedding_bag_args a1 = small_call(t1, idx, off), a2 = small_call(t2, idx, off);
  a2.dim = 2, a2.row_stride = 2;
  shapejit_embedding_bag_ex_args e1{}, e2{};
  shapejit_embedding_bag_ex_init(&e1, &a1);
  shapejit_embedding_bag_ex_init(&e2, &a2);
  e1.output_row_stride = e2.output_row_stride = 5;  // [2 bags, 3 + 2 columns]
  e1.skip_index_outputs = e2.skip_index_outputs = 1;
  std::vector<float> out(10, -99.0f);
  const shapejit_embedding_bag_ex_args* calls[2] = {&e1, &e2};
  const shapejit_embedding_bag_outputs outs[2] = {{out.data(), nullptr, nullptr, nullptr},
                                                  {out.data() + 3, nullptr, nullptr, nullptr}};
  const shapejit_status status = shapejit_embedding_bags(calls, outs, 2);
  INFO(std::string(shapejit_last_error()));
  REQUIRE(status == SHAPEJIT_OK);
  // Bag 0 = rows 0 + 1, bag 1 = rows 2 + 3 of each table.
  CHECK(out == std::vector<float>{5, 7, 9, -4, -6, 17, 19, 21, -12, -14});
  // The same slices twice overlap: refused, nothing written.
  const shapejit_embedding_bag_outputs twice[2] = {{out.data(), nullptr, nullptr, nullptr},
                                                   {out.data() + 2, nullptr, nullptr, nullptr}};
  std::vector<float> before = out;
  CHECK(shapejit_embedding_bags(calls, twice, 2) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("overlaps") != std::string::npos);
  CHECK(out == before);
}

TEST_CASE("output stride: below dim or negative is refused, naming the field; outputs untouched") {
  const float table[12] = {};
  const int64_t idx[4] = {0, 1, 2, 3}, off[2] = {0, 2};
  const shapejit_embedding_bag_args a = small_call(table, idx, off);
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  std::vector<float> out(16, 7.0f);
  for (int64_t bad : {int64_t{2}, int64_t{-1}, INT64_MIN}) {
    e.output_row_stride = bad;
    CHECK(shapejit_embedding_bag_ex(&e, out.data(), nullptr, nullptr, nullptr) == SHAPEJIT_INVALID_ARGUMENT);
    const std::string msg = shapejit_last_error();
    CHECK(msg.find("output_row_stride must be 0 (dense rows) or >= dim (3), but got " + std::to_string(bad)) !=
          std::string::npos);
  }
  e.output_row_stride = INT64_MAX / 4;  // B rows of it overflow int64 bytes
  CHECK(shapejit_embedding_bag_ex(&e, out.data(), nullptr, nullptr, nullptr) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(out == std::vector<float>(16, 7.0f));
}

TEST_CASE("output stride: rows without columns hold nothing, so the output may be NULL") {
  const float table[1] = {};
  const int64_t idx[4] = {0, 0, 0, 0}, off[2] = {0, 2};
  shapejit_embedding_bag_args a = small_call(table, idx, off);
  a.num_rows = 1, a.dim = 0, a.row_stride = 0;
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  e.skip_index_outputs = 1;
  e.output_row_stride = 42;
  CHECK(shapejit_embedding_bag_ex(&e, nullptr, nullptr, nullptr, nullptr) == SHAPEJIT_OK);
}
