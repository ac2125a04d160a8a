// Prepared embedding bags (shapejit_embedding_bag_prepare / _prepared_run): on random valid calls
// of every table dtype and option, a prepared run gives bitwise the outputs of the one-shot ex
// call, on the call's own batch and on a shorter batch of the same form, with the kernel the
// one-shot call would use; the prepared call's own rules (weights present exactly when the form
// has them, null handles) are rejected without touching an output. Every validation test also
// runs its broken call as a prepared call (embag_validation_test, embag_dtype_validation_test).
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/validate.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"
#include "support/prepared_embag.hpp"

namespace {

using shapejit::test::EmbagCase;
using shapejit::test::GuardedOutputs;

constexpr uint64_t kDefaultSeed = 0x9E9A2ED;
constexpr int kMaxFailing = 5;

shapejit_embedding_bag_shapes ex_shapes(const shapejit_embedding_bag_ex_args& ex) {
  shapejit_embedding_bag_shapes s{};
  REQUIRE_MESSAGE(shapejit_embedding_bag_ex_output_shapes(&ex, &s) == SHAPEJIT_OK, shapejit_last_error());
  return s;
}

// Field by field: the struct has padding, which a copy need not carry over.
bool same_shapes(const shapejit_embedding_bag_shapes& a, const shapejit_embedding_bag_shapes& b) {
  return a.output_rows == b.output_rows && a.output_cols == b.output_cols && a.index_out_dtype == b.index_out_dtype &&
         a.offset2bag_len == b.offset2bag_len && a.bag_size_len == b.bag_size_len &&
         a.max_indices_rows == b.max_indices_rows && a.max_indices_cols == b.max_indices_cols;
}

// The call `ex` one-shot and through `prepared` (on the call's batch): "" when both give the same
// shapes and bitwise the same outputs.
std::string compare_with_one_shot(const shapejit_embedding_bag_prepared* prepared,
                                  const shapejit_embedding_bag_ex_args& ex, bool null_when_empty) {
  const shapejit_embedding_bag_shapes shapes = ex_shapes(ex);
  const shapejit_embedding_bag_batch batch = shapejit::test::batch_of(ex.call);
  shapejit_embedding_bag_shapes prepared_shapes{};
  if (shapejit_embedding_bag_prepared_output_shapes(prepared, &batch, &prepared_shapes) != SHAPEJIT_OK)
    return std::string("prepared output_shapes rejected a valid batch: ") + shapejit_last_error();
  if (!same_shapes(shapes, prepared_shapes)) return "prepared output_shapes differ";
  GuardedOutputs want(shapes, 0x5A, null_when_empty, ex.output_dtype, ex.output_row_stride);
  GuardedOutputs got(shapes, 0xC3, null_when_empty, ex.output_dtype, ex.output_row_stride);
  if (want.run(ex) != SHAPEJIT_OK) return std::string("one-shot call rejected: ") + shapejit_last_error();
  using shapejit::test::EmbagOutput;
  if (shapejit_embedding_bag_prepared_run(prepared, &batch, got.data(EmbagOutput::kOutput),
                                          got.data(EmbagOutput::kOffset2bag), got.data(EmbagOutput::kBagSize),
                                          got.data(EmbagOutput::kMaxIndices)) != SHAPEJIT_OK)
    return std::string("prepared run rejected a valid batch: ") + shapejit_last_error();
  return shapejit::test::first_output_difference(want, got, ex.output_dtype) + got.check_output_gaps();
}

// The first `bags` bags of a span-offsets call, as a call of the same form (fewer indices).
shapejit_embedding_bag_ex_args first_bags(const EmbagCase& c, shapejit_embedding_bag_ex_args ex, int64_t bags) {
  shapejit_embedding_bag_args& a = ex.call;
  const int64_t end = bags < int64_t(c.offsets.size()) ? c.offsets[size_t(bags)] : int64_t(c.indices.size());
  a.num_offsets = bags;
  a.num_indices = end;
  if (c.include_last_offset) a.num_offsets = bags + 1;  // the last offset then ends the batch
  return ex;
}

// The form of a call on a dense f32 table with int64 indices and offsets.
shapejit_embedding_bag_ex_args f32_form(const float* table, int64_t rows, int64_t dim, shapejit_mode mode) {
  shapejit_embedding_bag_args a{};
  a.weight = table;
  a.weight_dtype = SHAPEJIT_F32;
  a.num_rows = rows;
  a.dim = a.row_stride = dim;
  a.index_dtype = a.offset_dtype = SHAPEJIT_I64;
  a.mode = mode;
  shapejit_embedding_bag_ex_args ex{};
  shapejit_embedding_bag_ex_init(&ex, &a);
  return ex;
}

}  // namespace

TEST_CASE("prepared embedding bag equals the one-shot call bitwise on random calls of every table dtype") {
  const uint64_t seed = shapejit::test::test_seed(kDefaultSeed);
  const auto only = shapejit::test::test_case_filter();
  const int64_t cases = shapejit::test::test_case_count(300);
  MESSAGE("prepared-vs-one-shot: seed " << seed << " (SHAPEJIT_TEST_SEED replays), " << cases
                                        << " cases per table dtype");
  const shapejit::jit::Isa isa = shapejit::rt::selected_isa();
  int failing = 0;
  int64_t compared = 0, shorter = 0;
  for (shapejit_dtype table : {SHAPEJIT_F32, SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8, SHAPEJIT_Q4, SHAPEJIT_Q2}) {
    for (int64_t k = 0; k < cases && failing < kMaxFailing; ++k) {
      if (only && k != *only) continue;
      shapejit::test::EmbagCaseOptions options;
      options.max_dim = 200;
      options.max_indices = 300;
      options.table = table;
      options.extended = true;
      const EmbagCase c = shapejit::test::make_embag_case(seed, k, options);
      const shapejit_embedding_bag_ex_args ex = c.to_ex_args();
      // What the prepared call relies on: the kernel key is the form's alone.
      CHECK(shapejit::rt::make_embag_key(shapejit::rt::plan_embedding_bag(ex), isa) ==
            shapejit::rt::make_embag_key(shapejit::rt::plan_embedding_bag_form(ex), isa));
      shapejit_embedding_bag_prepared* prepared = nullptr;
      REQUIRE_MESSAGE(shapejit_embedding_bag_prepare(&ex, &prepared) == SHAPEJIT_OK, shapejit_last_error());
      std::string diff = compare_with_one_shot(prepared, ex, k % 3 == 0);
      // A shorter batch of the same form (span offsets: the first half of the bags).
      if (diff.empty() && !c.offsets_as_lengths && !c.aten_partial_final_offset && c.num_bags() > 1) {
        diff = compare_with_one_shot(prepared, first_bags(c, ex, c.num_bags() / 2), false);
        ++shorter;
      }
      shapejit_embedding_bag_prepared_destroy(prepared);
      if (!diff.empty()) {
        ++failing;
        FAIL_CHECK(c.describe() << diff);
        continue;
      }
      ++compared;
    }
  }
  MESSAGE("compared " << compared << " calls, " << shorter << " of them also on a shorter batch");
  CHECK(failing == 0);
}

TEST_CASE("prepared embedding bag: weights present exactly when the form has them") {
  std::vector<float> table(4 * 8, 1.0f), psw(3, 0.5f), out(2 * 8, 7.0f);
  std::vector<int64_t> indices{0, 1, 3}, offsets{0, 2}, counts(2, -1), ids(2, -1);
  shapejit_embedding_bag_ex_args ex = f32_form(table.data(), 4, 8, SHAPEJIT_SUM);
  ex.call.per_sample_weights = psw.data();  // the form: weighted
  shapejit_embedding_bag_prepared* weighted = nullptr;
  REQUIRE(shapejit_embedding_bag_prepare(&ex, &weighted) == SHAPEJIT_OK);
  const std::vector<float> before = out;

  shapejit_embedding_bag_batch batch{indices.data(), 3, offsets.data(), 2, nullptr};
  CHECK(shapejit_embedding_bag_prepared_run(weighted, &batch, out.data(), nullptr, counts.data(), ids.data()) ==
        SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("per_sample_weights is null but the call was prepared with weights") !=
        std::string::npos);
  CHECK(out == before);
  // No indices: nothing to weigh, and a null pointer is what an empty tensor may hand over.
  shapejit_embedding_bag_batch empty{indices.data(), 0, offsets.data(), 1, nullptr};
  std::vector<int64_t> one_count(1, -1), one_id(1, -1);
  CHECK(shapejit_embedding_bag_prepared_run(weighted, &empty, out.data(), nullptr, one_count.data(),
                                            one_id.data()) == SHAPEJIT_OK);
  CHECK(out[0] == 0.0f);
  batch.per_sample_weights = psw.data();
  CHECK(shapejit_embedding_bag_prepared_run(weighted, &batch, out.data(), nullptr, counts.data(), ids.data()) ==
        SHAPEJIT_OK);
  CHECK(out[0] == 1.0f);  // two rows of ones at weight 0.5
  shapejit_embedding_bag_prepared_destroy(weighted);

  ex.call.per_sample_weights = nullptr;  // the form: unweighted
  shapejit_embedding_bag_prepared* plain = nullptr;
  REQUIRE(shapejit_embedding_bag_prepare(&ex, &plain) == SHAPEJIT_OK);
  const std::vector<float> after = out;
  CHECK(shapejit_embedding_bag_prepared_run(plain, &batch, out.data(), nullptr, counts.data(), ids.data()) ==
        SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("per_sample_weights is given but the call was prepared without") !=
        std::string::npos);
  CHECK(out == after);
  shapejit_embedding_bag_prepared_destroy(plain);
}

TEST_CASE("prepared embedding bag: null arguments, a rejected form, destroy(NULL), threads sharing one") {
  std::vector<float> table(16 * 32, 0.25f);
  std::vector<int64_t> indices{1, 2, 3, 15}, offsets{0, 1, 1};
  const shapejit_embedding_bag_ex_args ex = f32_form(table.data(), 16, 32, SHAPEJIT_MEAN);

  shapejit_embedding_bag_prepared* sentinel = reinterpret_cast<shapejit_embedding_bag_prepared*>(0x1);
  shapejit_embedding_bag_prepared* out_handle = sentinel;
  CHECK(shapejit_embedding_bag_prepare(nullptr, &out_handle) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(shapejit_embedding_bag_prepare(&ex, nullptr) == SHAPEJIT_INVALID_ARGUMENT);
  shapejit_embedding_bag_ex_args bad = ex;
  bad.call.dim = -3;
  CHECK(shapejit_embedding_bag_prepare(&bad, &out_handle) == SHAPEJIT_INVALID_ARGUMENT);
  CHECK(std::string(shapejit_last_error()).find("weight.dim") != std::string::npos);
  CHECK(out_handle == sentinel);  // unchanged on failure
  CHECK(shapejit_embedding_bag_prepared_destroy(nullptr) == SHAPEJIT_OK);

  shapejit_embedding_bag_prepared* prepared = nullptr;
  REQUIRE(shapejit_embedding_bag_prepare(&ex, &prepared) == SHAPEJIT_OK);
  const shapejit_embedding_bag_batch batch{indices.data(), 4, offsets.data(), 3, nullptr};
  std::vector<float> out(3 * 32);
  std::vector<int64_t> o2b(4), sizes(3), maxi(3);
  CHECK(shapejit_embedding_bag_prepared_run(nullptr, &batch, out.data(), o2b.data(), sizes.data(), maxi.data()) ==
        SHAPEJIT_INVALID_ARGUMENT);
  CHECK(shapejit_embedding_bag_prepared_run(prepared, nullptr, out.data(), o2b.data(), sizes.data(), maxi.data()) ==
        SHAPEJIT_INVALID_ARGUMENT);
  shapejit_embedding_bag_shapes shapes{};
  CHECK(shapejit_embedding_bag_prepared_output_shapes(prepared, &batch, nullptr) == SHAPEJIT_INVALID_ARGUMENT);
  REQUIRE(shapejit_embedding_bag_prepared_output_shapes(prepared, &batch, &shapes) == SHAPEJIT_OK);
  CHECK(shapes.output_rows == 3);
  CHECK(shapes.offset2bag_len == 4);

  // One prepared call run by several threads at once, each into its own outputs.
  std::vector<std::vector<float>> outs(4, std::vector<float>(3 * 32, -1.0f));
  std::vector<shapejit_status> status(outs.size(), SHAPEJIT_INTERNAL_ERROR);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < outs.size(); ++t)
    threads.emplace_back([&, t] {
      std::vector<int64_t> o(4), s(3), m(3);
      for (int r = 0; r < 200 && status[t] != SHAPEJIT_INVALID_ARGUMENT; ++r)
        status[t] = shapejit_embedding_bag_prepared_run(prepared, &batch, outs[t].data(), o.data(), s.data(), m.data());
    });
  for (std::thread& t : threads) t.join();
  for (size_t t = 0; t < outs.size(); ++t) {
    CHECK(status[t] == SHAPEJIT_OK);
    CHECK(outs[t][0] == 0.25f);   // bag 0: row 1
    CHECK(outs[t][32] == 0.0f);   // bag 1: empty
    CHECK(outs[t][64] == 0.25f);  // bag 2: mean of rows 2, 3, 15
  }
  CHECK(shapejit_embedding_bag_prepared_destroy(prepared) == SHAPEJIT_OK);
}

TEST_CASE("PreparedEmbeddingBag (C++ API) equals embedding_bag() and checks the batch's dtypes") {
  std::vector<float> table(10 * 16);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i % 7) - 3.0f;
  const std::vector<int32_t> indices{9, 0, 4, 4, 2}, offsets{0, 2, 2};
  shapejit::EmbeddingBagCall form;
  form.weight = {table.data(), shapejit::DType::kF32, 10, 16, 16};
  form.indices = std::vector<int32_t>{};  // only the dtypes count
  form.offsets = std::vector<int32_t>{};
  form.mode = shapejit::Mode::kMax;
  const shapejit::PreparedEmbeddingBag prepared(form);

  shapejit::EmbeddingBagCall call = form;
  call.indices = indices;
  call.offsets = offsets;
  const shapejit::EmbeddingBagResult want = shapejit::embedding_bag(call);
  const shapejit::EmbeddingBagBatch batch{indices, offsets, nullptr};
  const shapejit::EmbeddingBagShapes shapes = prepared.output_shapes(batch);
  REQUIRE(shapes.output_rows == 3);
  std::vector<float> out(size_t(shapes.output_rows * shapes.output_cols), -9.0f);
  std::vector<int32_t> o2b(size_t(shapes.offset2bag_len)), sizes(size_t(shapes.bag_size_len)),
      ids(size_t(shapes.max_indices_rows * shapes.max_indices_cols));
  prepared.run(batch, {out.data(), o2b.data(), sizes.data(), ids.data()});
  CHECK(out == want.output);
  CHECK(std::vector<int64_t>(ids.begin(), ids.end()) == want.max_indices);
  CHECK(std::vector<int64_t>(sizes.begin(), sizes.end()) == want.bag_size);

  const std::vector<int64_t> wide{9, 0};
  const shapejit::EmbeddingBagBatch wrong{wide, offsets, nullptr};
  CHECK_THROWS_WITH_AS(prepared.run(wrong, {out.data(), o2b.data(), sizes.data(), ids.data()}),
                       doctest::Contains("batch.indices are int64 but the form's are int32"), shapejit::Error);
}

// One-shot calls run as batches of the forms their thread remembers (embag_prepared.hpp): forms
// that repeat, forms that differ only in the table's address (a copy holding other values), more
// forms than the thread keeps, and batches of every size must all still give the reference's
// outputs; each call counts one kernel-cache hit or miss, as a lookup would.
TEST_CASE("one-shot calls through remembered forms equal the reference, whatever the order of forms") {
  const uint64_t seed = shapejit::test::test_seed(kDefaultSeed);
  MESSAGE("remembered forms: seed " << seed << " (SHAPEJIT_TEST_SEED replays)");
  constexpr int kForms = 6;  // more than the thread remembers, so forms are also replaced
  std::vector<EmbagCase> cases;
  std::vector<std::vector<float>> negated;  // each case's table negated: same form, other address
  for (int64_t k = 0; int(cases.size()) < kForms; ++k) {
    shapejit::test::EmbagCaseOptions options;
    options.max_dim = 96;
    options.max_indices = 200;
    options.allow_partial_final_offset = false;
    EmbagCase c = shapejit::test::make_embag_case(seed, 1000 + k, options);
    if (c.weight.empty()) continue;
    negated.emplace_back(c.weight);
    for (float& v : negated.back()) v = -v;
    cases.push_back(std::move(c));
  }
  uint64_t state = seed | 1;
  int failing = 0;
  for (int call = 0; call < 240 && failing < kMaxFailing; ++call) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const size_t which = size_t(state >> 33) % cases.size();
    const bool other_table = (state >> 20) & 1;
    const EmbagCase& c = cases[which];
    // Half the calls run a shorter batch of the same form: the first bags of the case.
    shapejit_embedding_bag_ex_args ex = c.to_ex_args(other_table ? negated[which].data() : nullptr);
    if ((state >> 40) & 1 && !c.offsets_as_lengths && c.num_bags() > 1) ex = first_bags(c, ex, c.num_bags() / 2);
    const shapejit_embedding_bag_shapes shapes = ex_shapes(ex);
    GuardedOutputs want(shapes, 0x5A, false, ex.output_dtype, ex.output_row_stride);
    GuardedOutputs got(shapes, 0xC3, false, ex.output_dtype, ex.output_row_stride);
    using shapejit::test::EmbagOutput;
    shapejit::ref::embedding_bag(ex, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                                 want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
    shapejit_kernel_cache_stats before{}, after{};
    REQUIRE(shapejit_get_kernel_cache_stats(&before) == SHAPEJIT_OK);
    const shapejit_status status = got.run(ex);
    REQUIRE(shapejit_get_kernel_cache_stats(&after) == SHAPEJIT_OK);
    std::string diff = status == SHAPEJIT_OK ? shapejit::test::first_output_difference(want, got, ex.output_dtype)
                                             : std::string("rejected: ") + shapejit_last_error();
    if (shapejit::rt::selected_isa() != shapejit::jit::Isa::kScalar &&
        after.hits + after.misses + after.generic_fallbacks != before.hits + before.misses + before.generic_fallbacks + 1)
      diff += "\nthe call counted " +
              std::to_string((after.hits + after.misses) - (before.hits + before.misses)) + " lookups, not 1";
    if (!diff.empty()) {
      ++failing;
      FAIL_CHECK("call " << call << " (form " << which << (other_table ? ", negated table" : "") << "):\n"
                         << c.describe() << diff);
    }
  }
  CHECK(failing == 0);
}

// A prepared run whose buffers (pointers and counts) are those of its thread's last batch that
// passed the buffer rules skips those rules (runtime/embag/embag_prepared.cpp, LastBatch): each
// count and pointer below changes alone, and the rule it breaks must be seen, the outputs untouched.
TEST_CASE("prepared embedding bag: the buffer rules are skipped only for the very buffers that passed them") {
  std::vector<float> table(8 * 2, 1.0f);
  const shapejit_embedding_bag_ex_args ex = f32_form(table.data(), 8, 2, SHAPEJIT_SUM);
  shapejit_embedding_bag_prepared* prepared = nullptr;
  REQUIRE(shapejit_embedding_bag_prepare(&ex, &prepared) == SHAPEJIT_OK);
  // One int64 arena: indices at [0], the output's 2 floats at [4] (index 0 while zero), offsets at [8].
  std::vector<int64_t> arena(16, 0);
  int64_t* indices = arena.data();
  float* output = reinterpret_cast<float*>(arena.data() + 4);
  int64_t* offsets = arena.data() + 8;
  int64_t sizes[4] = {-1, -1, -1, -1}, maxi[4] = {-1, -1, -1, -1};  // sum mode: shaped like the offsets
  const auto run = [&](int64_t n, int64_t o, float* out) {
    const shapejit_embedding_bag_batch batch{indices, n, offsets, o, nullptr};
    return shapejit_embedding_bag_prepared_run(prepared, &batch, out, nullptr, sizes, maxi);
  };
  const auto rejected_untouched = [&](shapejit_status status, const char* rule) {
    CHECK(status == SHAPEJIT_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(shapejit_last_error()).find(rule) != std::string::npos, shapejit_last_error());
    CHECK(arena[4] == 0);  // the output's floats, zeroed before each run
  };
  for (int round = 0; round < 2; ++round) {  // the second round starts from buffers that passed
    arena[4] = 0;
    REQUIRE_MESSAGE(run(2, 1, output) == SHAPEJIT_OK, shapejit_last_error());  // indices [0, 2): clear of the output
    CHECK(output[0] == 2.0f);
    arena[4] = 0;
    rejected_untouched(run(5, 1, output), "overlaps");  // 5 indices reach the output at [4]
    arena[4] = 0;
    REQUIRE(run(2, 1, output) == SHAPEJIT_OK);
    arena[4] = 0;
    offsets = arena.data() + 2;  // offsets {0, 0, 0}: the third reaches the output
    rejected_untouched(run(2, 3, output), "overlaps");
    offsets = arena.data() + 8;
    arena[4] = 0;
    REQUIRE(run(2, 1, output) == SHAPEJIT_OK);
    arena[4] = 0;
    rejected_untouched(run(2, 1, reinterpret_cast<float*>(reinterpret_cast<char*>(output) + 2)), "aligned");
    rejected_untouched(run(2, 1, nullptr), "null");
  }
  CHECK(shapejit_embedding_bag_prepared_destroy(prepared) == SHAPEJIT_OK);
}

TEST_CASE("prepared embedding bag: each form keeps its own last batch; buffers that passed for one form are tested for another") {
  // Two forms in turn on one arena: a table of D = 2 and one of D = 4. The output at [4] holds 2
  // floats of the first form's bag and 4 of the second's, whose last two are indices[6..7] (as
  // floats: one int64 slot). Indices at [6] are clear of the first form's output and inside the
  // second's: the same buffers pass for the first form and fail (overlap) for the second.
  std::vector<float> narrow(8 * 2, 1.0f), wide(8 * 4, 1.0f);
  const shapejit_embedding_bag_ex_args narrow_form = f32_form(narrow.data(), 8, 2, SHAPEJIT_SUM);
  const shapejit_embedding_bag_ex_args wide_form = f32_form(wide.data(), 8, 4, SHAPEJIT_SUM);
  shapejit_embedding_bag_prepared *a = nullptr, *b = nullptr;
  REQUIRE(shapejit_embedding_bag_prepare(&narrow_form, &a) == SHAPEJIT_OK);
  REQUIRE(shapejit_embedding_bag_prepare(&wide_form, &b) == SHAPEJIT_OK);
  std::vector<int64_t> arena(16, 0);
  float* output = reinterpret_cast<float*>(arena.data() + 4);
  int64_t* offsets = arena.data() + 8;
  int64_t sizes[1] = {-1}, maxi[1] = {-1};
  const auto run = [&](shapejit_embedding_bag_prepared* form, int64_t* indices) {
    const shapejit_embedding_bag_batch batch{indices, 1, offsets, 1, nullptr};
    return shapejit_embedding_bag_prepared_run(form, &batch, output, nullptr, sizes, maxi);
  };
  int64_t* clear = arena.data() + 12;  // beyond both forms' outputs
  int64_t* inside_wide = arena.data() + 5;  // the second form's output floats [2, 4)
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    arena[4] = arena[5] = 0;
    REQUIRE_MESSAGE(run(a, clear) == SHAPEJIT_OK, shapejit_last_error());
    REQUIRE_MESSAGE(run(b, clear) == SHAPEJIT_OK, shapejit_last_error());  // both forms' memos hold `clear`
    arena[4] = arena[5] = 0;
    REQUIRE_MESSAGE(run(a, inside_wide) == SHAPEJIT_OK, shapejit_last_error());  // passes for the narrow form
    CHECK(output[0] == 1.0f);
    arena[4] = arena[5] = 0;
    CHECK(run(b, inside_wide) == SHAPEJIT_INVALID_ARGUMENT);  // the same buffers, tested for the wide form
    CHECK_MESSAGE(std::string(shapejit_last_error()).find("overlaps") != std::string::npos, shapejit_last_error());
    CHECK(arena[4] == 0);
    CHECK(arena[5] == 0);  // nothing written: the index stays 0
    REQUIRE_MESSAGE(run(a, inside_wide) == SHAPEJIT_OK, shapejit_last_error());  // the narrow form's memo intact
  }
  CHECK(shapejit_embedding_bag_prepared_destroy(a) == SHAPEJIT_OK);
  CHECK(shapejit_embedding_bag_prepared_destroy(b) == SHAPEJIT_OK);
}
