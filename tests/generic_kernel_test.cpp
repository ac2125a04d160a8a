// The generic C++ kernel against the reference: all four outputs bitwise equal over random
// valid calls (NaN/-0/ties, padding, weights, int32/int64 mixes, strided rows), whether the
// bags run in one call, in random ranges, or through parallel_for_bags on 1-4 threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_generic_kernel.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/engine/engine_arena.hpp"
#include "runtime/engine/partition.hpp"
#include "support/embag_cases.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKey;
using shapejit::test::EmbagCase;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

// What the API path does between validation and the kernel: the key and the kernel arguments.
struct KernelCall {
  EmbagKey key;
  EmbagKernelArgs args;
  int64_t num_bags;
};

KernelCall make_kernel_call(const shapejit_embedding_bag_args& a, GuardedOutputs& out) {
  KernelCall k{};
  k.key = shapejit::rt::make_embag_key(a, shapejit::jit::Isa::kScalar);
  k.num_bags = shapejit::ref::embedding_bag_num_bags(a);
  k.args = shapejit::rt::make_embag_kernel_args(a, out.data(EmbagOutput::kOutput), out.data(EmbagOutput::kOffset2bag),
                                                out.data(EmbagOutput::kBagSize), out.data(EmbagOutput::kMaxIndices));
  shapejit::rt::zero_sum_mode_counts(a, out.data(EmbagOutput::kBagSize), out.data(EmbagOutput::kMaxIndices));
  return k;
}

bool is_nan_bits(uint64_t bits) { return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0; }

// "" when equal, else the first differing output and element. Every bit is compared (so -0.0,
// infinities and unwritten elements count) except that any NaN matches any NaN: which of two
// NaN operands an addition or FMA returns depends on operand order in the machine code (g++
// swaps the operands of `a + b` between template instances; x86 FMA and AArch64 FMLA rank
// their operands differently), so the sign and payload of a NaN result are not part of the
// contract; whether the result is NaN is.
std::string first_difference(const GuardedOutputs& want, const GuardedOutputs& got) {
  for (EmbagOutput w : shapejit::test::kAllEmbagOutputs) {
    const auto a = want.bytes(w), b = got.bytes(w);
    if (a.size() != b.size()) return std::string(shapejit::test::output_name(w)) + ": sizes differ";
    const size_t element_bytes = want.elements(w) > 0 ? a.size() / size_t(want.elements(w)) : 1;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i]) continue;
      const size_t e = i / element_bytes;
      uint64_t x = 0, y = 0;  // the element's bits, shown in hex
      std::memcpy(&x, a.data() + e * element_bytes, element_bytes);
      std::memcpy(&y, b.data() + e * element_bytes, element_bytes);
      if (w == EmbagOutput::kOutput && is_nan_bits(x) && is_nan_bits(y)) {
        i = (e + 1) * element_bytes - 1;  // skip the rest of this element
        continue;
      }
      char text[96];
      std::snprintf(text, sizeof text, " differs at element %zu: reference 0x%llx, kernel 0x%llx", e,
                    static_cast<unsigned long long>(x), static_cast<unsigned long long>(y));
      return shapejit::test::output_name(w) + std::string(text);
    }
  }
  return got.check_guards();
}

enum class Split { kWhole, kRandomRanges, kParallel };

// Runs case `c` through the generic kernel split one way and compares with the reference.
void check_case(const EmbagCase& c, Split split, int threads, std::mt19937_64& rng) {
  const shapejit_embedding_bag_args a = c.to_args();
  const shapejit_embedding_bag_shapes shapes = shapejit::ref::embedding_bag_shapes(a);
  GuardedOutputs want(shapes, 0xA5), got(shapes, 0x5A);
  shapejit::ref::embedding_bag(a, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  KernelCall k = make_kernel_call(a, got);
  const shapejit::jit::EmbagKernelFn fn = shapejit::rt::generic_embag_kernel(k.key);
  switch (split) {
    case Split::kWhole:
      fn(&k.args);
      break;
    case Split::kRandomRanges:
      for (int64_t b = 0; b < k.num_bags;) {
        const int64_t e = std::min(k.num_bags, b + std::uniform_int_distribution<int64_t>(1, 9)(rng));
        EmbagKernelArgs part = k.args;
        part.bag_begin = b;
        part.bag_end = e;
        fn(&part);
        b = e;
      }
      break;
    case Split::kParallel: {
      shapejit::rt::set_engine_threads(threads);
      shapejit::rt::PartitionOptions opt;
      opt.min_chunk_work = 64;  // small grain, so even small cases split across threads
      shapejit::rt::parallel_for_bags(
          {a.offsets, static_cast<DType>(a.offset_dtype), a.num_offsets}, k.num_bags, a.num_indices,
          a.dim,
          [&](int64_t b, int64_t e) {
            EmbagKernelArgs part = k.args;
            part.bag_begin = b;
            part.bag_end = e;
            fn(&part);
          },
          opt);
      shapejit::rt::set_engine_threads(0);
      break;
    }
  }
  const std::string diff = first_difference(want, got);
  if (!diff.empty()) {
    INFO("split " << int(split) << ", threads " << threads << ", key " << k.key.name());
    INFO(c.describe());
    FAIL_CHECK(diff);
  }
}

shapejit::test::EmbagCaseOptions case_options() {
  shapejit::test::EmbagCaseOptions o;
  // The ATen partial-final-offset quirk counts positions past the last bag, which no kernel
  // sees; the API path sends those calls to the reference.
  o.allow_partial_final_offset = false;
  return o;
}

}  // namespace

TEST_CASE("generic kernel: bitwise equal to the reference on random valid calls") {
  const uint64_t seed = shapejit::test::test_seed(0x9e3c0de);
  const int64_t cases = shapejit::test::test_case_count(1500);
  MESSAGE("seed " << seed << ", " << cases << " cases (replay: SHAPEJIT_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  const auto only = shapejit::test::test_case_filter();
  int64_t ran = 0;
  for (int64_t n = 0; n < cases; ++n) {
    if (only && n != *only) continue;
    const EmbagCase c = shapejit::test::make_embag_case(seed, n, case_options());
    check_case(c, n % 2 ? Split::kRandomRanges : Split::kWhole, 1, rng);
    ++ran;
  }
  CHECK(ran > 0);
}

TEST_CASE("generic kernel: identical results through parallel_for_bags on 1-4 threads") {
  const uint64_t seed = shapejit::test::test_seed(0x7a11e1);
  const int64_t cases = shapejit::test::test_case_count(200);
  MESSAGE("seed " << seed << ", " << cases << " cases x 4 thread counts");
  std::mt19937_64 rng(seed);
  for (int64_t n = 0; n < cases; ++n) {
    const EmbagCase c = shapejit::test::make_embag_case(seed, n, case_options());
    for (int threads = 1; threads <= 4; ++threads) check_case(c, Split::kParallel, threads, rng);
  }
}

TEST_CASE("generic kernel: hand-checked max, mean and padding rules") {
  // rows: r0 = {1, -0.0}, r1 = {NaN, 2}, r2 = {1, 3}
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float table[] = {1.0f, -0.0f, nan, 2.0f, 1.0f, 3.0f};
  const int64_t indices[] = {0, 2, 1, 1, 0, 2};
  const int64_t offsets[] = {0, 3, 3};  // bags {0,2,1}, {}, {1,0,2}
  float out[6] = {7, 7, 7, 7, 7, 7};
  int64_t offset2bag[6] = {}, bag_size[3] = {}, max_indices[6] = {};
  EmbagKernelArgs g{};
  g.weight = table;
  g.row_stride_bytes = 8;
  g.dim = 2;
  g.indices = indices;
  g.offsets = offsets;
  g.num_offsets = 3;
  g.num_indices = 6;
  g.bag_begin = 0;
  g.bag_end = 3;
  g.output = out;
  g.offset2bag = offset2bag;
  g.bag_size = bag_size;
  g.max_indices = max_indices;

  EmbagKey key;
  key.isa = shapejit::jit::Isa::kScalar;
  key.mode = Mode::kMax;
  shapejit::rt::generic_embag_kernel(key)(&g);
  // Bag 0: col 0 ties 1 (r0) vs 1 (r2) -> r0; NaN later never wins. col 1: -0.0, 3, 2 -> 3 (r2).
  CHECK(out[0] == 1.0f);
  CHECK(max_indices[0] == 0);
  CHECK(out[1] == 3.0f);
  CHECK(max_indices[1] == 2);
  // Bag 1 is empty: zeros.
  CHECK(out[2] == 0.0f);
  CHECK(out[3] == 0.0f);
  CHECK(max_indices[2] == 0);
  // Bag 2 starts with NaN in column 0: it survives. Column 1: 2, -0.0, 3 -> 3 (r2).
  CHECK(std::isnan(out[4]));
  CHECK(max_indices[4] == 1);
  CHECK(out[5] == 3.0f);
  CHECK(max_indices[5] == 2);
  CHECK(bag_size[0] == 3);
  CHECK(bag_size[1] == 0);
  CHECK(bag_size[2] == 3);
  CHECK(offset2bag[3] == 2);

  // Mean with padding row 2: bag 0 = (r0 + r1) / 2, bag 2 = (r1 + r0) / 2; padding uncounted.
  key.mode = Mode::kMean;
  key.padding = true;
  g.padding_idx = 2;
  shapejit::rt::generic_embag_kernel(key)(&g);
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == 1.0f);  // (-0.0 + 2) / 2
  CHECK(bag_size[0] == 2);
  CHECK(max_indices[0] == 2);  // mean: max_indices holds the counts
  CHECK(out[2] == 0.0f);
  CHECK(bag_size[1] == 0);
  CHECK(offset2bag[5] == 2);  // padding positions keep their offset2bag entry

  // Sum of a lone -0.0 starts from +0.0 and stays +0.0.
  const int64_t one_index[] = {0};
  const int64_t one_offset[] = {0};
  key.mode = Mode::kSum;
  key.padding = false;
  g.indices = one_index;
  g.offsets = one_offset;
  g.num_offsets = 1;
  g.num_indices = 1;
  g.bag_end = 1;
  shapejit::rt::generic_embag_kernel(key)(&g);
  CHECK(out[0] == 1.0f);
  CHECK_FALSE(std::signbit(out[1]));
}

TEST_CASE("generic kernel: rejects tables it cannot read") {
  EmbagKey key;
  key.table = DType::kF16;
  CHECK_THROWS_AS(shapejit::rt::generic_embag_kernel(key), shapejit::Error);
  key.table = DType::kF32;
  key.index = DType::kF32;
  CHECK_THROWS_AS(shapejit::rt::generic_embag_kernel(key), shapejit::Error);
}
