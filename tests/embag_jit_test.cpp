// Generated x86 embedding-bag kernels against the scalar reference (ref::embedding_bag): all
// four outputs bitwise equal (-0.0, ties, copied NaNs included; see kSumNaNPayloadsExact in
// support/embag_jit_support.cpp for computed NaNs) over a battery of widths x modes x weights
// x padding x index/offset types x prefetch distances, on every ISA the host runs. Inputs end
// at a PROT_NONE page, so a read past a row or past the index array faults.
#include <doctest/doctest.h>

#include <asmjit/x86.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "jit/embag_plan.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "support/embag_cases.hpp"
#include "support/embag_dtype_battery.hpp"
#include "support/embag_jit_support.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;
using namespace shapejit::test::embag_jit;

uint64_t battery_seed() { return shapejit::test::test_seed(0x5eed3); }

// Every width x {sum, weighted sum, mean, max} x padding x {i32, i64}^2, prefetch (distance,
// head of row or every line) and index outputs (all, or none) rotating;
// each problem runs in one call and split into two bag ranges.
void run_battery(Isa isa, uint64_t seed) {
  asmjit::JitRuntime rt;
  int64_t number = 0, compared = 0;
  for (int64_t dim : battery_dims()) {
    for (int variant = 0; variant < 4; ++variant) {
      for (int padding = 0; padding < 2; ++padding) {
        for (int types = 0; types < 4; ++types, ++number) {
          JitProblem p;
          p.key.isa = isa;
          p.key.dim = dim;
          p.key.mode = variant == 2 ? Mode::kMean : variant == 3 ? Mode::kMax : Mode::kSum;
          p.key.weighted = variant == 1;
          p.key.padding = padding != 0;
          p.key.index = types & 1 ? DType::kI32 : DType::kI64;
          p.key.offset = types & 2 ? DType::kI32 : DType::kI64;
          p.key.prefetch = kBatteryPrefetches[number % 5];
          // Every other round of distances prefetches only the heads of rows (every mode).
          p.key.prefetch_head = (number / 5) % 2 == 1 && shapejit::jit::embag_prefetch_head_defined(p.key);
          // Every third problem computes the output only (no offset2bag, counts or max ids).
          p.key.index_outputs = number % 3 != 2;
          Rng rng(mix(seed ^ mix(uint64_t(number) * 2 + (isa == Isa::kAvx2))));
          make_problem(p, rng);
          const auto kernel = shapejit::jit::generate_embag_kernel(p.key, rt);
          for (int split = 0; split < 2; ++split) {
            if (split && p.bags < 2) continue;
            const auto at = split ? std::optional<int64_t>(uniform(rng, 1, p.bags - 1)) : std::nullopt;
            const std::string diff = run_and_compare(p, kernel.fn, at);
            if (diff.empty()) continue;
            INFO("case " << number << ", seed " << seed << (at ? ", bags split at " + std::to_string(*at) : ""));
            INFO(p.describe());
            if (dim <= 24) INFO("kernel:\n" << kernel_listing(p.key));
            FAIL_CHECK(diff);
          }
          rt.release(kernel.fn);
          ++compared;
        }
      }
    }
  }
  CHECK(compared == int64_t(battery_dims().size()) * 32);
  if (const int64_t n = take_tolerated_nan_payloads(); n > 0)
    MESSAGE(n << " sum/mean outputs were NaN on both sides with different payloads "
                 "(reference operand order, see kSumNaNPayloadsExact)");
}

}  // namespace

TEST_CASE("embag jit avx512: battery of widths, modes and types vs the reference" *
          doctest::skip(!host_has(Isa::kAvx512))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  run_battery(Isa::kAvx512, battery_seed());
}

TEST_CASE("embag jit avx2: battery of widths, modes and types vs the reference" *
          doctest::skip(!host_has(Isa::kAvx2))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  run_battery(Isa::kAvx2, battery_seed());
}

TEST_CASE("embag jit neon: battery of widths, modes and types vs the reference" *
          doctest::skip(!host_has(Isa::kNeon))) {
  MESSAGE("seed " << battery_seed() << " (replay: SHAPEJIT_TEST_SEED=" << battery_seed() << ")");
  run_battery(Isa::kNeon, battery_seed());
}

TEST_CASE("embag jit: random calls of the shared case generator, whole and in bag ranges") {
  const uint64_t seed = shapejit::test::test_seed(0xe3bad);
  const int64_t cases = shapejit::test::test_case_count(300);
  shapejit::test::EmbagCaseOptions options;
  options.allow_partial_final_offset = false;  // the runtime sends those to the reference
  Rng rng(seed);
  for (Isa isa : host_isas()) {
    asmjit::JitRuntime rt;
    for (int64_t n = 0; n < cases; ++n) {
      const shapejit::test::EmbagCase c = shapejit::test::make_embag_case(seed, n, options);
      const shapejit_embedding_bag_args a = c.to_args();
      const shapejit_embedding_bag_shapes shapes = shapejit::ref::embedding_bag_shapes(a);
      GuardedOutputs want(shapes, 0xA5), got(shapes, 0x5A);
      shapejit::ref::embedding_bag(a, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                                   want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
      const EmbagKey key = shapejit::rt::make_embag_key(a, isa);
      EmbagKernelArgs g = shapejit::rt::make_embag_kernel_args(
          a, got.data(EmbagOutput::kOutput), got.data(EmbagOutput::kOffset2bag), got.data(EmbagOutput::kBagSize),
          got.data(EmbagOutput::kMaxIndices));
      shapejit::rt::zero_sum_mode_counts(a, got.data(EmbagOutput::kBagSize), got.data(EmbagOutput::kMaxIndices));
      const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
      const int64_t bags = shapejit::ref::embedding_bag_num_bags(a);
      shapejit::test::note_direct_run(key.isa);
      for (int64_t b = 0; b < bags || b == 0;) {  // random ranges when n is odd
        const int64_t e = n % 2 ? std::min(bags, b + uniform(rng, 1, 7)) : bags;
        g.bag_begin = b;
        g.bag_end = e;
        kernel.fn(&g);
        b = std::max<int64_t>(e, 1);
      }
      rt.release(kernel.fn);
      const std::string diff = first_difference(key, want, got);
      if (!diff.empty()) {
        INFO(key.name() << ", case " << n << ", seed " << seed);
        INFO(c.describe());
        FAIL_CHECK(diff);
      }
    }
  }
  take_tolerated_nan_payloads();
}

TEST_CASE("embag jit: max with row ids beyond 32 bits, mixed with small ones in any order") {
  // Id r + 2^62 addresses the same bytes as row r (the kernel's 64-bit row * stride_bytes
  // wraps: 2^62 * 4 * stride = stride * 2^64), so odd rows get huge ids without a huge table
  // and each bag may switch to 64-bit id lanes at any position. Expected values: the reference
  // on the plain ids, with the winning odd rows' ids shifted the same way.
  constexpr int64_t kShift = int64_t(1) << 62;
  const uint64_t seed = battery_seed();
  int64_t number = 0;
  for (Isa isa : host_isas()) {
    asmjit::JitRuntime rt;
    for (int64_t dim : battery_dims()) {
      for (int variant = 0; variant < 4; ++variant, ++number) {
        JitProblem p;
        p.key.isa = isa;
        p.key.dim = dim;
        p.key.mode = Mode::kMax;
        p.key.padding = variant & 1;
        p.key.offset = variant & 2 ? DType::kI32 : DType::kI64;
        p.key.prefetch = kBatteryPrefetches[number % 5];
        Rng rng(mix(seed ^ mix(uint64_t(number) + 0x51F7)));
        make_problem(p, rng);
        if (p.key.padding && p.padding_row() % 2 == 1) continue;  // padding ids stay plain
        const shapejit_embedding_bag_args a = p.ref_args();
        const shapejit_embedding_bag_shapes shapes = shapejit::ref::embedding_bag_shapes(a);
        GuardedOutputs want(shapes, 0xA5), got(shapes, 0x5A);
        shapejit::ref::embedding_bag(a, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                                     want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
        auto* expected_ids = static_cast<int64_t*>(want.data(EmbagOutput::kMaxIndices));
        for (int64_t e = 0; e < want.elements(EmbagOutput::kMaxIndices); ++e)
          if (expected_ids[e] % 2 == 1) expected_ids[e] += kShift;
        std::vector<int64_t> shifted = p.idx;
        for (int64_t& id : shifted)
          if (id % 2 == 1) id += kShift;
        EmbagKernelArgs g = kernel_args(p, got);
        g.indices = shifted.data();
        const auto kernel = shapejit::jit::generate_embag_kernel(p.key, rt);
        shapejit::test::note_direct_run(p.key.isa);
        kernel.fn(&g);
        rt.release(kernel.fn);
        const std::string diff = first_difference(p.key, want, got);
        if (!diff.empty()) {
          INFO("case " << number << ", seed " << seed << " (odd rows' ids + 2^62)");
          INFO(p.describe());
          FAIL_CHECK(diff);
        }
      }
    }
  }
  CHECK(number > 0);
}

// ---- Table dtypes (f16, bf16, Q8, Q4, Q2; pruning) ------------------------------------------------

namespace {

void report_dtype_battery(Isa isa, const shapejit::test::embag_dtype::Result& r, uint64_t seed) {
  for (const std::string& text : r.reports) FAIL_CHECK(text);
  if (r.failures > int64_t(r.reports.size())) {
    const std::string more = std::to_string(r.failures - int64_t(r.reports.size())) + " more failures";
    FAIL_CHECK(more);
  }
  MESSAGE(shapejit::jit::isa_name(isa) << ": " << r.kernels << " kernels, " << r.runs << " runs, " << r.checked
                                       << " values compared (seed " << seed << ", replay: SHAPEJIT_TEST_SEED=" << seed
                                       << ")");
  if (r.f16_ties_away_accepted > 0)
    MESSAGE(r.f16_ties_away_accepted << " f16 outputs accepted one ulp (f16-table means: up to two) away from "
                                        "zero: this host's vcvtps2ph (an emulator) rounds ties away, not to even");
}

}  // namespace

TEST_CASE("embag jit dtypes: every table dtype x mode x weights x output x padding x pruning vs the reference") {
  namespace dt = shapejit::test::embag_dtype;
  const uint64_t seed = shapejit::test::test_seed(0xd7e5b);
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2}) {
    dt::Options o;
    o.isa = isa;
    o.seed = seed;
    o.dims = dt::default_dims();
    o.emit_only = !host_has(isa);
    const dt::Result r = dt::run(o);
    CHECK(r.kernels > 0);
    if (o.emit_only) {
      for (const std::string& text : r.reports) FAIL_CHECK(text);
      MESSAGE(shapejit::jit::isa_name(isa) << ": " << r.kernels << " kernels emitted, not run ("
                                           << shapejit::test::host_unsupported_reason(isa) << ")");
      continue;
    }
    report_dtype_battery(isa, r, seed);
  }
}
