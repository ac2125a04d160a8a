// offset2bag is written a bag at a time in vector stores (EmbagSkeleton::emit_block,
// fill_offset2bag): whole registers of the bag id, a last register that overlaps the previous
// one and ends at the bag's end, entry by entry for a bag shorter than a register. Bags of every
// length around the register widths (2, 4, 8 and 16 entries for 32/64-bit ids on NEON, AVX2 and
// AVX-512) must get exactly their own entries, and a call over a range of bags must leave the
// entries of the bags outside it as they were.
#include <doctest/doctest.h>

#include <asmjit/core.h>

#include <cstdint>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;

constexpr int64_t kLongestBag = 2 * 16 + 1;  // two AVX-512 registers of 32-bit ids and one more
constexpr int64_t kSentinel = 0x5A5A5A5A;

// Bag b (1..kLongestBag + 1) holds b - 1 indices; bag 0 and the last bag hold 3 each and stay
// outside the computed range.
struct FillProblem {
  std::vector<int64_t> lengths;
  std::vector<int64_t> offsets;  // start of each bag
  int64_t num_indices = 0;

  FillProblem() {
    lengths.push_back(3);
    for (int64_t n = 0; n <= kLongestBag; ++n) lengths.push_back(n);
    lengths.push_back(3);
    for (int64_t len : lengths) offsets.push_back(num_indices), num_indices += len;
  }
  int64_t bags() const { return int64_t(lengths.size()); }
};

// offset2bag after one call over bags [1, bags - 1), entries stored as `Out`, everything
// starting at kSentinel; returns the first wrong entry, or "".
template <typename Out>
std::string run_fill(const EmbagKey& key, const FillProblem& p, asmjit::JitRuntime& rt) {
  const int64_t dim = key.dim, rows = 5;
  std::vector<float> table(size_t(rows * dim), 1.0f);
  std::vector<float> weights(size_t(p.num_indices), 0.5f);
  std::vector<Out> indices(size_t(p.num_indices)), offsets(p.offsets.begin(), p.offsets.end());
  for (int64_t i = 0; i < p.num_indices; ++i) indices[size_t(i)] = Out(i % rows);
  std::vector<float> output(size_t(p.bags() * dim), 0.0f);
  std::vector<Out> offset2bag(size_t(p.num_indices), Out(kSentinel)), bag_size(size_t(p.bags()), 0);
  std::vector<Out> max_indices(size_t(p.bags() * dim), 0);

  EmbagKernelArgs a{};
  a.weight = table.data();
  a.row_stride_bytes = dim * int64_t(sizeof(float));
  a.dim = dim;
  a.indices = indices.data();
  a.offsets = offsets.data();
  a.num_offsets = p.bags();
  a.num_indices = p.num_indices;
  a.per_sample_weights = weights.data();
  a.padding_idx = 2;  // read only by padding keys: its positions keep their bag's entry too
  a.bag_begin = 1;
  a.bag_end = p.bags() - 1;
  a.output = output.data();
  a.offset2bag = offset2bag.data();
  a.bag_size = bag_size.data();
  a.max_indices = max_indices.data();
  const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
  shapejit::test::note_direct_run(key.isa);
  kernel.fn(&a);
  rt.release(kernel.fn);

  for (int64_t b = 0; b < p.bags(); ++b) {
    const bool computed = b >= a.bag_begin && b < a.bag_end;
    for (int64_t i = p.offsets[size_t(b)]; i < p.offsets[size_t(b)] + p.lengths[size_t(b)]; ++i) {
      const int64_t want = computed ? b : kSentinel, got = int64_t(offset2bag[size_t(i)]);
      if (got != want)
        return "offset2bag[" + std::to_string(i) + "] of bag " + std::to_string(b) + " (length " +
               std::to_string(p.lengths[size_t(b)]) + (computed ? "" : ", outside the range") + ") is " +
               std::to_string(got) + ", want " + std::to_string(want);
    }
  }
  return "";
}

}  // namespace

TEST_CASE("offset2bag: bags of 0..33 indices get exactly their entries; bags outside the range keep theirs") {
  const FillProblem p;
  int64_t runs = 0;
  for (Isa isa : shapejit::test::host_isas()) {
    asmjit::JitRuntime rt;
    for (DType ids : {DType::kI32, DType::kI64}) {
      // The modes that write offset2bag: mean, max, and sum with padding_idx (weighted too).
      for (int variant = 0; variant < 4; ++variant) {
        for (int64_t dim : {int64_t(8), int64_t(16), int64_t(40)}) {
          EmbagKey key;
          key.isa = isa;
          key.dim = dim;
          key.mode = variant == 0 ? Mode::kMean : variant == 1 ? Mode::kMax : Mode::kSum;
          key.padding = variant >= 2;
          key.weighted = variant == 3;
          key.index = key.offset = ids;
          key.prefetch = dim == 16 ? 0 : 4;
          const std::string wrong =
              ids == DType::kI32 ? run_fill<int32_t>(key, p, rt) : run_fill<int64_t>(key, p, rt);
          INFO(key.name());
          CHECK_MESSAGE(wrong.empty(), wrong);
          ++runs;
        }
      }
    }
  }
  if (runs == 0) MESSAGE("SKIPPED: the host runs no ISA with a generator");
  else MESSAGE(runs << " kernels checked");
}
