// AVX2 column groups of Q4/Q2 kernels (jit/x86/embag_table_ops_groups.cpp) in max mode with
// int64 ids, where a bag that meets an id >= 2^31 restarts on the 64-bit id path, which has no
// groups: the restart must discard the grouped lanes. Id r + 2^62 addresses row r's bytes
// (row * stride wraps modulo 2^64 when the stride is a multiple of 4), so the same kernel run on
// plain ids (checked against the reference by the dtype battery) must give the same values and
// counts, and the same ids with the odd ones shifted. Seeded; a failure prints key and seed.
#include <doctest/doctest.h>

#include <asmjit/x86.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "jit/embag_plan.hpp"
#include "support/embag_cases.hpp"
#include "support/host_isas.hpp"

namespace {

using shapejit::DType;
using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using shapejit::Mode;

struct Run {
  std::vector<float> out;
  std::vector<int64_t> o2b, size, ids;
};

Run run(const EmbagKey& key, const std::vector<uint8_t>& table, int64_t stride, const std::vector<int64_t>& idx,
        const std::vector<int64_t>& offsets) {
  asmjit::JitRuntime rt;
  const int64_t bags = int64_t(offsets.size());
  Run r{std::vector<float>(size_t(bags * key.dim), -1.0f), std::vector<int64_t>(idx.size(), -1),
        std::vector<int64_t>(size_t(bags), -1), std::vector<int64_t>(size_t(bags * key.dim), -1)};
  EmbagKernelArgs a{};
  a.weight = table.data();
  a.row_stride_bytes = stride;
  a.dim = key.dim;
  a.indices = idx.data();
  a.offsets = offsets.data();
  a.num_offsets = bags;
  a.num_indices = int64_t(idx.size());
  a.bag_begin = 0;
  a.bag_end = bags;
  a.output = r.out.data();
  a.offset2bag = r.o2b.data();
  a.bag_size = r.size.data();
  a.max_indices = r.ids.data();
  const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
  kernel.fn(&a);
  rt.release(kernel.fn);
  return r;
}

}  // namespace

TEST_CASE("x86 column groups: max restarts on 64-bit ids give the grouped path's results") {
  if (!shapejit::test::host_has(Isa::kAvx2)) {
    MESSAGE("skipped: the host does not run AVX2");
    return;
  }
  const uint64_t seed = shapejit::test::test_seed(0xc01a9);
  MESSAGE("seed " << seed << " (replay: SHAPEJIT_TEST_SEED=" << seed << ")");
  std::mt19937_64 rng(seed);
  constexpr int64_t kShift = int64_t(1) << 62;
  int64_t checked = 0;
  for (DType t : {DType::kQ4, DType::kQ2}) {
    for (int64_t dim : {4, 8, 12, 16, 24, 32, 36, 64, 96, 128, 132, 256, 260, 512}) {
      for (int prefetch : {0, 16}) {
        EmbagKey key;
        key.isa = Isa::kAvx2;
        key.table = t;
        key.dim = dim;
        key.mode = Mode::kMax;
        key.prefetch = prefetch;
        const int64_t rows = 23, bags = 11;
        const int64_t stride = (shapejit::jit::embag_col_bytes(t, dim) + 4 + 3) / 4 * 4;
        std::vector<uint8_t> table(size_t(rows * stride));
        for (int64_t r = 0; r < rows; ++r) {
          uint8_t* row = table.data() + r * stride;
          for (int64_t b = 0; b < stride; ++b) row[b] = uint8_t(rng());
          const uint16_t scale = uint16_t(0x3000 + rng() % 0x1000), bias = uint16_t(rng() % 0x3c00 | (rng() & 0x8000));
          const int64_t trailer = shapejit::jit::embag_col_bytes(t, dim);
          std::memcpy(row + trailer, &scale, 2);
          std::memcpy(row + trailer + 2, &bias, 2);
        }
        std::vector<int64_t> idx(size_t(bags * 4), 0), offsets(size_t(bags), 0);
        for (auto& i : idx) i = int64_t(rng() % rows);
        for (int64_t b = 1; b < bags; ++b) offsets[size_t(b)] = std::min<int64_t>(int64_t(idx.size()), offsets[size_t(b - 1)] + int64_t(rng() % 7));
        std::vector<int64_t> wide = idx;
        for (auto& i : wide)
          if (i % 2 == 1) i += kShift;
        const Run plain = run(key, table, stride, idx, offsets), shifted = run(key, table, stride, wide, offsets);
        const std::string what = key.name() + " seed " + std::to_string(seed);
        CHECK_MESSAGE(std::memcmp(plain.out.data(), shifted.out.data(), plain.out.size() * 4) == 0, what);
        CHECK_MESSAGE(plain.o2b == shifted.o2b, what);
        CHECK_MESSAGE(plain.size == shifted.size, what);
        std::vector<int64_t> want = plain.ids;
        for (auto& i : want)
          if (i % 2 == 1) i += kShift;
        CHECK_MESSAGE(want == shifted.ids, what);
        checked += int64_t(plain.out.size());
      }
    }
  }
  MESSAGE(checked << " outputs compared");
}
