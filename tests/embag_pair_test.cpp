// Two bags in flight (EmbagSkeleton's pair loop, rule embag_pairs_bags): sum, weighted sum and
// mean (offset2bag, bag_size and max_indices of both bags too) over narrow rows, against the scalar reference bitwise, with bag lengths chosen to hit every
// shape of a pair (first longer, second longer, equal, either or both empty), odd and even bag
// counts, and the bags cut into ranges at every position (a range may start at an odd bag, end
// after one bag, or hold a single bag). Pairs run without prefetch (the rule); every fourth
// case has prefetch 16 and checks the one-bag loop on the same inputs. Inputs end at a
// PROT_NONE page.
#include <doctest/doctest.h>

#include <asmjit/x86.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "jit/embag_plan.hpp"
#include "ref/embedding_bag.hpp"
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

// Bag lengths: the pair shapes by hand, then random ones.
std::vector<std::vector<int64_t>> length_patterns(Rng& rng) {
  std::vector<std::vector<int64_t>> p = {
      {}, {0}, {3}, {3, 1}, {1, 3}, {2, 2}, {0, 0}, {0, 5}, {5, 0}, {4, 2, 0}, {7, 7, 7},
      {0, 3, 3, 0, 1}, {1, 1, 1, 1}, {9, 1, 1, 9, 0, 0}, {2, 6, 6, 2, 3},
  };
  for (int k = 0; k < 6; ++k) {
    std::vector<int64_t> lens(size_t(uniform(rng, 1, 9)));
    for (int64_t& l : lens) l = chance(rng, 20) ? 0 : uniform(rng, 1, 12);
    p.push_back(lens);
  }
  return p;
}

void fill_ints(std::optional<PageEndArray<std::byte>>& mem, const std::vector<int64_t>& values, DType type) {
  const size_t size = type == DType::kI32 ? 4 : 8;
  mem.emplace(std::max<size_t>(1, values.size()) * size);
  for (size_t i = 0; i < values.size(); ++i) {
    const int32_t v32 = static_cast<int32_t>(values[i]);
    std::memcpy(mem->data() + i * size, size == 4 ? static_cast<const void*>(&v32) : &values[i], size);
  }
}

// make_problem's table and weights, with the bags replaced by `lens`.
void set_bags(JitProblem& p, const std::vector<int64_t>& lens, Rng& rng) {
  p.bags = static_cast<int64_t>(lens.size());
  p.off.clear();
  p.idx.clear();
  for (int64_t len : lens) {
    p.off.push_back(static_cast<int64_t>(p.idx.size()));
    for (int64_t i = 0; i < len; ++i) p.idx.push_back(chance(rng, 25) ? p.rows - 1 : uniform(rng, 0, p.rows - 1));
  }
  p.include_last_offset = p.bags > 0 && chance(rng, 30);
  if (p.include_last_offset) p.off.push_back(static_cast<int64_t>(p.idx.size()));
  p.psw.emplace(std::max<size_t>(1, p.idx.size()));
  for (size_t i = 0; i < p.psw->size(); ++i) (*p.psw)[i] = std::uniform_real_distribution<float>(-2, 2)(rng);
  fill_ints(p.idx_mem, p.idx, p.key.index);
  fill_ints(p.off_mem, p.off, p.key.offset);
}

// Runs the bags as the ranges between consecutive `cuts` (later ranges first) and compares
// every output with the reference; "" when equal.
std::string run_ranges(JitProblem& p, shapejit::jit::EmbagKernelFn fn, const std::vector<int64_t>& cuts) {
  const shapejit_embedding_bag_args a = p.ref_args();
  const shapejit_embedding_bag_shapes shapes = shapejit::ref::embedding_bag_shapes(a);
  GuardedOutputs want(shapes, 0xA5), got(shapes, 0x5A);
  shapejit::ref::embedding_bag(a, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  EmbagKernelArgs g = kernel_args(p, got);
  shapejit::test::note_direct_run(p.key.isa);
  for (size_t c = cuts.size() - 1; c > 0; --c) {
    g.bag_begin = cuts[c - 1];
    g.bag_end = cuts[c];
    fn(&g);
  }
  for (EmbagOutput w : {EmbagOutput::kBagSize, EmbagOutput::kMaxIndices}) {  // sum: the runtime zeroes them
    if (p.key.mode != Mode::kSum) break;
    const auto bytes = got.bytes(w);
    if (std::any_of(bytes.begin(), bytes.end(), [](std::byte x) { return x != std::byte{0x5A}; }))
      return std::string(shapejit::test::output_name(w)) + " written in sum mode";
    if (!bytes.empty()) std::memset(got.data(w), 0, bytes.size());
  }
  return first_difference(p.key, want, got);
}

// Widths around the pair limit of each vector width (lanes 4, 8, 16), tails included.
const int64_t kDims[] = {1, 3, 4, 7, 8, 9, 13, 16, 17, 24, 31, 32, 33, 40, 48, 56, 63, 64, 65, 72};

}  // namespace

TEST_CASE("embag pairs: the rule takes sum, weighted sum and mean of narrow rows only") {
  using shapejit::jit::embag_pairs_bags;
  EmbagKey k;
  k.isa = Isa::kAvx2;
  k.dim = 16;
  k.prefetch = 0;
  CHECK(embag_pairs_bags(k, 2, 14));
  CHECK(embag_pairs_bags(k, shapejit::jit::kMaxPairedBagVecs, 2 * shapejit::jit::kMaxPairedBagVecs));
  CHECK_FALSE(embag_pairs_bags(k, shapejit::jit::kMaxPairedBagVecs + 1, 32));  // wide rows: loads bound
  CHECK_FALSE(embag_pairs_bags(k, 4, 7));                                       // accumulators do not fit
  k.weighted = true;
  CHECK(embag_pairs_bags(k, 2, 14));
  k.table = DType::kQ4;
  CHECK(embag_pairs_bags(k, 2, 14));
  k.weighted = false;
  k.mode = Mode::kMean;
  CHECK(embag_pairs_bags(k, 2, 14));
  CHECK_FALSE(embag_pairs_bags(k, 4, 7));
  k.mode = Mode::kSum;
  for (auto change : {+[](EmbagKey& x) { x.mode = Mode::kMax; },
                      +[](EmbagKey& x) { x.padding = true; }, +[](EmbagKey& x) { x.pruned = true; },
                      +[](EmbagKey& x) { x.prefetch = 16; }}) {
    EmbagKey other = k;
    other.weighted = false;
    change(other);
    CHECK_FALSE(embag_pairs_bags(other, 2, 14));
  }
}

TEST_CASE("embag pairs avx2: the second bag's row is stored one output row further" *
          doctest::skip(!host_has(Isa::kAvx2))) {
  EmbagKey k;
  k.isa = Isa::kAvx2;
  k.dim = 16;  // 2 vectors: paired; its second output row starts 64 bytes on
  k.prefetch = 0;
  CHECK(kernel_listing(k).find("+64], ymm") != std::string::npos);
  k.mode = Mode::kMean;  // paired too
  CHECK(kernel_listing(k).find("+64], ymm") != std::string::npos);
  k.mode = Mode::kSum;
  k.padding = true;  // not paired
  CHECK(kernel_listing(k).find("+64], ymm") == std::string::npos);
  k.padding = false;
  k.prefetch = 16;  // not paired
  CHECK(kernel_listing(k).find("+64], ymm") == std::string::npos);
}

TEST_CASE("embag pairs: every pair shape and bag range vs the reference, on every ISA the host runs") {
  const uint64_t seed = shapejit::test::test_seed(0x9a125);
  MESSAGE("seed " << seed << " (replay: SHAPEJIT_TEST_SEED=" << seed << ")");
  int64_t number = 0, runs = 0;
  for (Isa isa : host_isas()) {
    asmjit::JitRuntime rt;
    for (int64_t dim : kDims) {
      for (int variant = 0; variant < 6; ++variant, ++number) {
        Rng rng(mix(seed ^ mix(uint64_t(number))));
        JitProblem p;
        p.key.isa = isa;
        p.key.dim = dim;
        p.key.mode = variant >= 4 ? Mode::kMean : Mode::kSum;
        p.key.weighted = variant < 4 && (variant & 1);
        p.key.index = variant & 2 ? DType::kI32 : DType::kI64;
        p.key.offset = number % 3 == 0 ? DType::kI32 : DType::kI64;
        p.key.prefetch = number % 4 == 3 ? 16 : 0;
        make_problem(p, rng);
        const auto kernel = shapejit::jit::generate_embag_kernel(p.key, rt);
        for (const std::vector<int64_t>& lens : length_patterns(rng)) {
          set_bags(p, lens, rng);
          // Whole, then cut at every bag, then cut in two at every bag.
          std::vector<std::vector<int64_t>> cut_sets = {{0, p.bags}};
          std::vector<int64_t> every;
          for (int64_t b = 0; b <= p.bags; ++b) every.push_back(b);
          if (p.bags > 1) cut_sets.push_back(every);
          for (int64_t b = 1; b < p.bags; ++b) cut_sets.push_back({0, b, p.bags});
          for (const std::vector<int64_t>& cuts : cut_sets) {
            ++runs;
            const std::string diff = run_ranges(p, kernel.fn, cuts);
            if (diff.empty()) continue;
            std::string ranges;
            for (int64_t c : cuts) ranges += " " + std::to_string(c);
            INFO("case " << number << ", seed " << seed << ", cuts" << ranges);
            INFO(p.describe());
            if (dim <= 16) INFO("kernel:\n" << kernel_listing(p.key));
            FAIL_CHECK(diff);
          }
        }
        rt.release(kernel.fn);
      }
    }
  }
  if (host_isas().empty()) MESSAGE("no generated ISA runs here: nothing compared");
  CHECK((host_isas().empty() || runs > 0));
  take_tolerated_nan_payloads();
}

TEST_CASE("embag pairs: every x86 and NEON key of the pair rule generates") {
  // ISAs the host cannot run (AVX-512 here) are at least emitted.
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon}) {
    for (int64_t dim : kDims) {
      for (int w = 0; w < 3; ++w) {
        EmbagKey k;
        k.isa = isa;
        k.dim = dim;
        k.weighted = w == 1;
        k.mode = w == 2 ? Mode::kMean : Mode::kSum;
        k.prefetch = 0;
        asmjit::CodeHolder code;
        code.init(asmjit::Environment(isa == Isa::kNeon ? asmjit::Arch::kAArch64 : asmjit::Arch::kX64));
        CAPTURE(k.name());
        CHECK_NOTHROW(shapejit::jit::emit_embag_kernel(k, code));
      }
    }
  }
}
