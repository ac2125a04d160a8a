// Every table dtype (f32, f16, bf16, Q8, Q4, Q2) x mode x weights (f32/f16) x padding x pruning x
// output dtype x index types x offsets as spans or lengths, over random valid calls:
//   - the generic kernel, driven through the plan exactly as the runtime drives it (whole, and
//     in random bag ranges), equals the reference bitwise;
//   - the C ABI (shapejit_embedding_bag_ex; JIT where a generator takes the key, else the
//     generic kernel) equals the reference bitwise, with the table placed before a guard page;
//   - the plan's shapes (runtime/validate) equal ref::embedding_bag_shapes, derived separately.
// A failure prints the seed, the case and its replay command (SHAPEJIT_TEST_SEED/CASE).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_generic_kernel.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/validate.hpp"
#include "support/embag_cases.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr shapejit_dtype kTables[] = {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16,
                                      SHAPEJIT_Q8,  SHAPEJIT_Q4,  SHAPEJIT_Q2};
constexpr int kMaxFailures = 4;

shapejit::test::EmbagCaseOptions dtype_options(shapejit_dtype table) {
  shapejit::test::EmbagCaseOptions o;
  o.table = table;
  o.extended = true;
  o.max_dim = 300;
  o.max_table_elements = 1 << 15;
  o.max_indices = 400;
  o.max_output_elements = 1 << 14;
  return o;
}

std::string shapes_text(const shapejit_embedding_bag_shapes& s) {
  return "output " + std::to_string(s.output_rows) + "x" + std::to_string(s.output_cols) + " ints " +
         std::to_string(int(s.index_out_dtype)) + " offset2bag " + std::to_string(s.offset2bag_len) + " bag_size " +
         std::to_string(s.bag_size_len) + " max_indices " + std::to_string(s.max_indices_rows) + "x" +
         std::to_string(s.max_indices_cols);
}

// The reference's four outputs of case c.
void run_reference(const EmbagCase& c, GuardedOutputs& want) {
  shapejit::ref::embedding_bag(c.to_ex_args(), want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
}

// The generic kernel, as run_embedding_bag drives a kernel: plan, key, args, zeroing, bags, the
// positions no bag takes.
std::string check_generic(const EmbagCase& c, std::mt19937_64& rng) {
  const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(c.to_ex_args());
  GuardedOutputs want(plan.shapes, 0xA5, false, c.output_dtype), got(plan.shapes, 0x5A, false, c.output_dtype);
  run_reference(c, want);
  if (plan.partial_final_offset) return "";  // only the reference reproduces the quirk
  const shapejit::jit::EmbagKey key = shapejit::rt::make_embag_key(plan, shapejit::jit::Isa::kScalar);
  if (key.isa != shapejit::jit::Isa::kScalar) return "make_embag_key: a scalar call got ISA " + key.name();
  const shapejit::jit::EmbagKernelFn fn = shapejit::rt::generic_embag_kernel(key);
  shapejit::jit::EmbagKernelArgs args = shapejit::rt::make_embag_kernel_args(
      plan, got.data(EmbagOutput::kOutput), got.data(EmbagOutput::kOffset2bag), got.data(EmbagOutput::kBagSize),
      got.data(EmbagOutput::kMaxIndices));
  shapejit::rt::zero_sum_mode_counts(plan, got.data(EmbagOutput::kBagSize), got.data(EmbagOutput::kMaxIndices));
  if (c.number % 2 == 0) {
    fn(&args);
  } else {
    for (int64_t b = 0; b < plan.num_bags;) {
      const int64_t e = std::min(plan.num_bags, b + std::uniform_int_distribution<int64_t>(1, 7)(rng));
      shapejit::jit::EmbagKernelArgs part = args;
      part.bag_begin = b;
      part.bag_end = e;
      fn(&part);
      b = e;
    }
  }
  shapejit::rt::fill_unbagged_positions(plan, got.data(EmbagOutput::kOffset2bag));
  const std::string diff = shapejit::test::first_output_difference(want, got, c.output_dtype);
  return diff.empty() ? "" : "generic kernel (" + key.name() + "): " + diff;
}

// The public extended C ABI, with the table ending at a guard page.
std::string check_api(const EmbagCase& c) {
  const shapejit::test::GuardedTable table(c);
  const shapejit_embedding_bag_ex_args args = c.to_ex_args(table.data());
  shapejit_embedding_bag_shapes shapes{};
  if (shapejit_embedding_bag_ex_output_shapes(&args, &shapes) != SHAPEJIT_OK)
    return std::string("ex_output_shapes rejected a valid case: ") + shapejit_last_error();
  const shapejit_embedding_bag_shapes ref_shapes = shapejit::ref::embedding_bag_shapes(args);
  if (shapes_text(shapes) != shapes_text(ref_shapes))
    return "shapes: plan " + shapes_text(shapes) + ", reference " + shapes_text(ref_shapes);
  GuardedOutputs want(shapes, 0xA5, false, c.output_dtype), got(shapes, 0x5A, c.number % 3 == 0, c.output_dtype);
  run_reference(c, want);
  if (got.run(args) != SHAPEJIT_OK) return std::string("the API rejected a valid case: ") + shapejit_last_error();
  const std::string diff = shapejit::test::first_output_difference(want, got, c.output_dtype);
  return diff.empty() ? "" : "C ABI: " + diff;
}

void run_battery(const char* what, int64_t default_cases, std::string (*check)(const EmbagCase&, std::mt19937_64&)) {
  const uint64_t seed = shapejit::test::test_seed(0xD7E5CA5E);
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(default_cases);
  MESSAGE(std::string(what) << ": seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << cases << " cases per table dtype");
  std::mt19937_64 rng(seed);
  int failures = 0;
  for (shapejit_dtype table : kTables) {
    for (int64_t k = 0; k < cases && failures < kMaxFailures; ++k) {
      if (only && k != *only) continue;
      const EmbagCase c = shapejit::test::make_embag_case(seed, k, dtype_options(table));
      if (const std::string diff = check(c, rng); !diff.empty()) {
        ++failures;
        FAIL_CHECK(std::string(what) << " differs from the reference: " << diff << "\n" << c.describe());
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("dtypes: the generic kernel equals the reference bitwise for every table dtype") {
  run_battery("generic kernel", 400, check_generic);
}

TEST_CASE("dtypes: the extended C ABI equals the reference bitwise (table before a guard page)") {
  run_battery("C ABI", 250, [](const EmbagCase& c, std::mt19937_64&) { return check_api(c); });
}

TEST_CASE("dtypes: plan shapes equal the reference's own shape rules") {
  // Shapes over many random calls of every form (validated: only valid calls have a plan).
  run_battery("plan shapes", 600, [](const EmbagCase& c, std::mt19937_64&) -> std::string {
    const shapejit_embedding_bag_ex_args args = c.to_ex_args();
    const shapejit::rt::EmbagCallPlan plan = shapejit::rt::plan_embedding_bag(args);
    const std::string got = shapes_text(plan.shapes), want = shapes_text(shapejit::ref::embedding_bag_shapes(args));
    if (got != want) return "shapes: plan " + got + ", reference " + want;
    if (plan.num_bags != plan.shapes.output_rows) return "plan.num_bags " + std::to_string(plan.num_bags);
    return "";
  });
}

}  // namespace
