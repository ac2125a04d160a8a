// Embedding-bag part of the AVX-512 battery, built on the generated-kernel test support
// (tests/support/embag_jit_support): the same problems, the same bitwise comparison with
// ref::embedding_bag, at a width spread sized for Bochs.
#include <asmjit/x86.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "battery.hpp"
#include "jit/embag_codegen.hpp"
#include "ref/embedding_bag.hpp"
#include "support/embag_cases.hpp"
#include "support/embag_dtype_battery.hpp"
#include "support/embag_jit_support.hpp"

namespace shapejit::test::avx512_battery {

using jit::EmbagKey;
using namespace shapejit::test::embag_jit;

void Tally::fail(const Options& options, const std::string& family, const std::string& report) {
  if (++failures <= options.max_reports) std::printf("avx512 battery: FAIL %s: %s\n", family.c_str(), report.c_str());
  if (failures == options.max_reports + 1) std::printf("avx512 battery: further %s failures only counted\n", family.c_str());
  std::fflush(stdout);
}

namespace {

// Widths around every boundary of the AVX-512 emitter's plan (16 floats per vector; column blocks
// of up to ~30 vectors in sum and mean, ~15 in max, ~10 with 64-bit ids; a run-time loop of
// blocks beyond three of them), with masked tails on most.
constexpr int64_t kDims[] = {1, 2, 7, 15, 16, 17, 31, 33, 48, 63, 64, 65, 100, 160, 161, 239, 241, 256,
                             300, 479, 481, 512, 721, 1000, 1100, 1441, 2049, 4100};

// make_problem draws include_last_offset at random; the battery sets it, so each key family
// sees both forms (the kernel reads bag ends differently: from offsets or from N).
void set_include_last_offset(JitProblem& p, bool on) {
  if (p.bags == 0 || p.include_last_offset == on) return;
  if (on) p.off.push_back(static_cast<int64_t>(p.idx.size()));
  else p.off.pop_back();
  p.include_last_offset = on;
  const size_t size = p.key.offset == DType::kI32 ? 4 : 8;
  p.off_mem.emplace(p.off.size() * size);
  for (size_t i = 0; i < p.off.size(); ++i) {
    const int32_t narrow = static_cast<int32_t>(p.off[i]);
    std::memcpy(p.off_mem->data() + i * size, size == 4 ? static_cast<const void*>(&narrow) : &p.off[i], size);
  }
}

std::string report(JitProblem& p, const std::string& diff, const std::string& where) {
  std::string text = p.key.name() + where + ": " + diff + "\n  " + p.describe();
  if (p.key.dim <= 24) text += "\n  kernel:\n" + kernel_listing(p.key);
  return text;
}

}  // namespace

Tally run_embag(const Options& options) {
  Tally tally;
  asmjit::JitRuntime rt;
  int64_t item = 0;
  for (size_t d = 0; d < std::size(kDims); ++d) {
    for (int variant = 0; variant < 4; ++variant) {
      for (int padding = 0; padding < 2; ++padding) {
        for (int types = 0; types < 4; ++types, ++item) {
          if (!options.mine(item)) continue;
          JitProblem p;
          p.key.isa = options.isa;
          p.key.dim = kDims[d];
          p.key.mode = variant == 2 ? Mode::kMean : variant == 3 ? Mode::kMax : Mode::kSum;
          p.key.weighted = variant == 1;
          p.key.padding = padding != 0;
          p.key.index = types & 1 ? DType::kI32 : DType::kI64;
          p.key.offset = types & 2 ? DType::kI32 : DType::kI64;
          p.key.prefetch = kBatteryPrefetches[item % 5];
          Rng rng(mix(options.seed ^ mix(static_cast<uint64_t>(item))));
          make_problem(p, rng);
          set_include_last_offset(p, (d + padding + types) % 2 == 1);
          const auto kernel = jit::generate_embag_kernel(p.key, rt);
          ++tally.kernels;
          for (int split = 0; split < 2; ++split) {
            if (split && p.bags < 2) continue;
            const auto at = split ? std::optional<int64_t>(uniform(rng, 1, p.bags - 1)) : std::nullopt;
            ++tally.cases;
            tally.checked += p.bags * p.key.dim;
            const std::string diff = run_and_compare(p, kernel.fn, at);
            if (!diff.empty())
              tally.fail(options, "embag",
                         report(p, diff, at ? " (bags split at " + std::to_string(*at) + ")" : " (whole)"));
          }
          rt.release(kernel.fn);
        }
      }
    }
  }
  take_tolerated_nan_payloads();
  return tally;
}

// Id r + 2^62 addresses the same bytes as row r (row * stride_bytes wraps modulo 2^64), so odd
// rows get ids beyond 32 bits without a huge table, and a bag may switch to 64-bit id lanes at
// any index. Expected: the reference on the plain ids, with the winning odd ids shifted alike.
Tally run_embag_wide_ids(const Options& options) {
  constexpr int64_t kShift = int64_t(1) << 62;
  constexpr int64_t kWideDims[] = {1, 9, 16, 17, 40, 100, 161, 170, 321, 481, 1100};
  Tally tally;
  asmjit::JitRuntime rt;
  int64_t item = 0;
  for (int64_t dim : kWideDims) {
    for (int variant = 0; variant < 4; ++variant, ++item) {
      if (!options.mine(item)) continue;
      JitProblem p;
      p.key.isa = options.isa;
      p.key.dim = dim;
      p.key.mode = Mode::kMax;
      p.key.padding = variant & 1;
      p.key.offset = variant & 2 ? DType::kI32 : DType::kI64;  // indices stay int64
      p.key.prefetch = kBatteryPrefetches[item % 5];
      Rng rng(mix(options.seed ^ mix(static_cast<uint64_t>(item) + 0x3b1d)));
      make_problem(p, rng);
      if (p.key.padding && p.padding_row() % 2 == 1) p.key.padding = false, p.padding_passed = 0;
      const shapejit_embedding_bag_args a = p.ref_args();
      const shapejit_embedding_bag_shapes shapes = ref::embedding_bag_shapes(a);
      GuardedOutputs want(shapes, 0xA5), got(shapes, 0x5A);
      ref::embedding_bag(a, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                         want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
      auto* want_ids = static_cast<int64_t*>(want.data(EmbagOutput::kMaxIndices));
      for (int64_t e = 0; e < want.elements(EmbagOutput::kMaxIndices); ++e)
        if (want_ids[e] % 2 == 1) want_ids[e] += kShift;
      std::vector<int64_t> shifted = p.idx;
      for (int64_t& id : shifted)
        if (id % 2 == 1) id += kShift;
      jit::EmbagKernelArgs g = kernel_args(p, got);
      g.indices = shifted.data();
      const auto kernel = jit::generate_embag_kernel(p.key, rt);
      note_direct_run(p.key.isa);
      kernel.fn(&g);
      rt.release(kernel.fn);
      ++tally.kernels, ++tally.cases;
      tally.checked += p.bags * dim;
      const std::string diff = first_difference(p.key, want, got);
      if (!diff.empty()) tally.fail(options, "wide_ids", report(p, diff, " (odd rows' ids + 2^62)"));
    }
  }
  take_tolerated_nan_payloads();
  return tally;
}

// The dtype battery at a width spread sized for Bochs: tails of every kind for 16 lanes (Q4:
// even, Q2: 4, 8, 12), column blocks and the run-time block loop (2052 in sum, 700 in max).
Tally run_embag_dtypes(const Options& options) {
  embag_dtype::Options o;
  o.isa = options.isa;
  o.seed = options.seed;
  o.dims = {1, 2, 4, 6, 7, 10, 12, 13, 14, 16, 17, 20, 24, 36, 64, 100, 132, 300, 700, 2052};
  o.mine = [&options](int64_t item) { return options.mine(item); };
  o.max_reports = options.max_reports;
  const embag_dtype::Result r = embag_dtype::run(o);
  Tally tally;
  tally.kernels = r.kernels;
  tally.cases = r.runs;
  tally.checked = r.checked;
  for (const std::string& text : r.reports) tally.fail(options, "dtypes", text);
  tally.failures = r.failures;
  if (r.f16_ties_away_accepted > 0)
    std::printf("avx512 battery: dtypes: %lld f16 outputs accepted one ulp (f16-table means: up to two) away "
                "from zero: this CPU's vcvtps2ph rounds ties away instead of to nearest even (an emulator)\n",
                static_cast<long long>(r.f16_ties_away_accepted));
  return tally;
}

}  // namespace shapejit::test::avx512_battery
