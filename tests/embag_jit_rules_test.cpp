// Generated x86 embedding-bag kernels, rule by rule on hand-made calls: canonical key names,
// keys without a generator, max's first-row copy / ties / NaN rules, 64-bit row ids, and the
// operand order of sums (which NaN payload survives).
#include <doctest/doctest.h>

#include <asmjit/x86.h>

#include <bit>
#include <cstring>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "support/embag_jit_support.hpp"

namespace {

using shapejit::DType;
using shapejit::Mode;
using shapejit::jit::EmbagKernelArgs;
using shapejit::jit::EmbagKey;
using shapejit::jit::Isa;
using shapejit::test::embag_jit::from_bits;
using shapejit::test::embag_jit::host_isas;

// A hand-made call on a dense table whose rows are given explicitly.
struct HandCall {
  int64_t dim;
  std::vector<float> table;
  std::vector<int64_t> indices, offsets;
  int64_t stride_bytes;
};

// Runs `key` on `c` and returns output, bag_size and max_indices (int64 outputs).
struct HandResult {
  std::vector<float> output;
  std::vector<int64_t> bag_size, max_indices;
};

HandResult run_hand(const EmbagKey& key, const HandCall& c, asmjit::JitRuntime& rt) {
  const int64_t bags = static_cast<int64_t>(c.offsets.size());
  HandResult r;
  r.output.assign(size_t(bags * c.dim), 7.0f);
  r.bag_size.assign(size_t(bags), -1);
  r.max_indices.assign(size_t(bags * c.dim), -1);
  std::vector<int64_t> offset2bag(c.indices.size(), -1);
  EmbagKernelArgs g{};
  g.weight = c.table.data();
  g.row_stride_bytes = c.stride_bytes;
  g.dim = c.dim;
  g.indices = c.indices.data();
  g.offsets = c.offsets.data();
  g.num_offsets = bags;
  g.num_indices = static_cast<int64_t>(c.indices.size());
  g.bag_begin = 0;
  g.bag_end = bags;
  g.output = r.output.data();
  g.offset2bag = offset2bag.data();
  g.bag_size = r.bag_size.data();
  g.max_indices = r.max_indices.data();
  const auto kernel = shapejit::jit::generate_embag_kernel(key, rt);
  shapejit::test::note_direct_run(key.isa);
  kernel.fn(&g);
  rt.release(kernel.fn);
  return r;
}

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace

TEST_CASE("embag jit: key names are canonical and round-trip") {
  EmbagKey k;
  k.dim = 128;
  CHECK(k.name() == "embag.avx512.f32.d128.sum.i64.o64");
  k.isa = Isa::kAvx2;
  k.mode = Mode::kMax;
  k.index = DType::kI32;
  k.padding = true;
  k.prefetch = 0;
  CHECK(k.name() == "embag.avx2.f32.d128.max.i32.o64.pad.pf0");
  k.index_outputs = false;
  CHECK(k.name() == "embag.avx2.f32.d128.max.i32.o64.pad.pf0.noidx");
  CHECK(shapejit::jit::parse_embag_key(k.name()) == k);
  for (const char* bad : {"embag.avx512.f32.d0.sum.i64.o64", "embag.avx512.f32.d128.sum.i64.o64.pf16",
                          "embag.avx512.f32.d128.sum.i64", "embag.avx512.f32.d128.sum.i64.o64.pad.w",
                          "embag.avx512.f32.d0128.sum.i64.o64", "embag.sse.f32.d8.sum.i64.o64",
                          "embag.avx512.f32.d8.sum.i64.o64.noidx.pf0", "embag.avx512.f32.d8.sum.i64.o64.noidx.noidx", ""})
    CHECK_MESSAGE(!shapejit::jit::parse_embag_key(bad), bad);
  shapejit::jit::EmbagKeyHash hash;
  for (int64_t dim : {0, 1, 17, 4100})
    for (int m = 0; m < 3; ++m)
      for (int flags = 0; flags < 32; ++flags) {
        EmbagKey key;
        key.isa = flags & 8 ? Isa::kAvx2 : Isa::kNeon;
        key.dim = dim;
        key.mode = static_cast<Mode>(m);
        key.weighted = flags & 1;
        key.padding = flags & 2;
        key.index = flags & 4 ? DType::kI32 : DType::kI64;
        key.index_outputs = (flags & 16) == 0;
        key.prefetch = dim % 3 == 0 ? 16 : int(dim);
        const auto back = shapejit::jit::parse_embag_key(key.name());
        REQUIRE_MESSAGE(back.has_value(), key.name());
        CHECK(*back == key);
        CHECK(hash(*back) == hash(key));
        CHECK(back->name() == key.name());
      }
}

TEST_CASE("embag jit: keys without a generator throw Unsupported") {
  auto status_of = [](EmbagKey key) {
    try {
      asmjit::CodeHolder c;
      c.init(asmjit::Environment(asmjit::Arch::kX64));
      shapejit::jit::emit_embag_kernel(key, c);
    } catch (const shapejit::Error& e) {
      return e.status();
    }
    return shapejit::Status::kOk;
  };
  EmbagKey k;
  k.dim = 0;
  CHECK(status_of(k) == shapejit::Status::kUnsupported);  // generic: the C++ fallback
  k.dim = 8;
  k.isa = Isa::kNeon;
  CHECK(status_of(k) == shapejit::Status::kUnsupported);
  k.isa = Isa::kAvx2;
  k.table = DType::kF16;
  CHECK(status_of(k) == shapejit::Status::kUnsupported);
  k.table = DType::kF32;
  k.mode = Mode::kMax;
  k.weighted = true;
  CHECK(status_of(k) == shapejit::Status::kUnsupported);
  k.weighted = false;
  CHECK(status_of(k) == shapejit::Status::kOk);  // both ISAs emit on any host (jitdump)
  k.isa = Isa::kAvx512;
  CHECK(status_of(k) == shapejit::Status::kOk);
}

TEST_CASE("embag jit: max copies the first row (-0.0, NaN), ties keep the earliest, later NaN never wins") {
  const float nan_a = from_bits(0x7FC0AAAA), nan_b = from_bits(0xFFC0BBBB);
  constexpr int64_t kDim = 20;  // a full vector and a tail on both ISAs
  // Row r column d: r0 = -0.0, r1 = +0.0, r2 = NaN_a, r3 = 1, r4 = NaN_b, r5 = 1 (tie with r3).
  const float per_row[] = {-0.0f, 0.0f, nan_a, 1.0f, nan_b, 1.0f};
  HandCall c{kDim, {}, {0, 1, 2, 3, 5, 4, 1, 0}, {0, 2, 6, 8}, kDim * 4};
  // bags: {0 (-0), 1 (+0)} | {2 NaN_a, 3, 5, 4} | {1, 0} | {} empty
  for (float v : per_row) c.table.insert(c.table.end(), kDim, v);
  c.offsets.push_back(8);
  for (Isa isa : host_isas()) {
    EmbagKey key;
    key.isa = isa;
    key.dim = kDim;
    key.mode = Mode::kMax;
    CAPTURE(key.name());
    asmjit::JitRuntime rt;
    const HandResult r = run_hand(key, c, rt);
    for (int64_t d = 0; d < kDim; ++d) {
      CHECK(bits_of(r.output[size_t(d)]) == 0x80000000u);  // +0.0 > -0.0 is false: -0.0 stays
      CHECK(r.max_indices[size_t(d)] == 0);
      CHECK(bits_of(r.output[size_t(kDim + d)]) == bits_of(nan_a));  // a first NaN survives
      CHECK(r.max_indices[size_t(kDim + d)] == 2);
      CHECK(bits_of(r.output[size_t(2 * kDim + d)]) == 0u);  // -0.0 after +0.0 does not win
      CHECK(r.max_indices[size_t(2 * kDim + d)] == 1);
      CHECK(bits_of(r.output[size_t(4 * kDim + d)]) == 0u);  // empty bag (offsets {.., 8, 8})
      CHECK(r.max_indices[size_t(4 * kDim + d)] == 0);
    }
    CHECK(r.bag_size == std::vector<int64_t>{2, 4, 2, 0, 0});
  }
  // Later NaN never wins; equal later values keep the earlier row id.
  HandCall t{kDim, {}, {3, 4, 5}, {0}, kDim * 4};
  for (float v : per_row) t.table.insert(t.table.end(), kDim, v);
  for (Isa isa : host_isas()) {
    EmbagKey key;
    key.isa = isa;
    key.dim = kDim;
    key.mode = Mode::kMax;
    asmjit::JitRuntime rt;
    const HandResult r = run_hand(key, t, rt);
    for (int64_t d = 0; d < kDim; ++d) {
      CHECK(r.output[size_t(d)] == 1.0f);
      CHECK(r.max_indices[size_t(d)] == 3);
    }
  }
}

TEST_CASE("embag jit: 64-bit row ids reach max_indices whole (stride-0 table, ids above 2^32)") {
  // With a zero row stride every id reads the same row, so huge ids need no huge table. All
  // rows tie, so every column's winner is the bag's first non-padding id.
  for (Isa isa : host_isas()) {
    for (int64_t dim : {5, 13, 20, 37}) {
      HandCall c{dim, {}, {5'000'000'001, 7, 3'000'000'000, 9'000'000'000'000}, {0, 1, 2}, 0};
      for (int64_t d = 0; d < dim; ++d) c.table.push_back(static_cast<float>(d) - 2.5f);
      EmbagKey key;
      key.isa = isa;
      key.dim = dim;
      key.mode = Mode::kMax;
      CAPTURE(key.name());
      asmjit::JitRuntime rt;
      const HandResult r = run_hand(key, c, rt);
      for (int64_t d = 0; d < dim; ++d) {
        CHECK(r.max_indices[size_t(d)] == 5'000'000'001);
        CHECK(r.max_indices[size_t(dim + d)] == 7);
        CHECK(r.max_indices[size_t(2 * dim + d)] == 3'000'000'000);
        CHECK(r.output[size_t(2 * dim + d)] == static_cast<float>(d) - 2.5f);
      }
      CHECK(r.bag_size == std::vector<int64_t>{1, 1, 2});
    }
  }
}

// acc + x with acc as the instruction's first source, as the kernels add. Which NaN wins
// when both are NaN is the CPU's rule (hardware keeps the first; qemu 7.2 differs).
float add_acc_first(float acc, float x) {
  float r;
#if defined(__aarch64__)
  asm("fadd %s0, %s1, %s2" : "=w"(r) : "w"(acc), "w"(x));
#else
  asm("vaddss %2, %1, %0" : "=x"(r) : "x"(acc), "x"(x));
#endif
  return r;
}

TEST_CASE("embag jit: sums add acc + x in that operand order (which NaN payload survives)") {
  const float nan_a = from_bits(0x7FC0AAAA), nan_b = from_bits(0xFFC0BBBB);
  HandCall c{3, {nan_a, 1.0f, 2.0f, nan_b, nan_b, 5.0f}, {0, 1}, {0}, 12};
  for (Isa isa : host_isas()) {
    EmbagKey key;
    key.isa = isa;
    key.dim = 3;
    asmjit::JitRuntime rt;
    const HandResult r = run_hand(key, c, rt);
    CHECK(bits_of(r.output[0]) == bits_of(add_acc_first(add_acc_first(0.0f, nan_a), nan_b)));
    CHECK(bits_of(r.output[1]) == bits_of(add_acc_first(1.0f, nan_b)));
    CHECK(r.output[2] == 7.0f);
  }
}


// An f32 mean as wide as the registers keeps its divisor in the block's last accumulator, its
// sum parked in the output row meanwhile (x86 mean_divisor): rows of whole blocks, and block
// loops ending in a one-vector block (AVX2 D=520 and 1160, AVX-512 D=2064), where the parked
// sum comes back through the block's unused slot.
TEST_CASE("embag jit: mean with the divisor in an accumulator (rows as wide as the registers)") {
  using namespace shapejit::test::embag_jit;
  const uint64_t seed = shapejit::test::test_seed(0xd1f150);
  asmjit::JitRuntime rt;
  int64_t number = 0;
  for (Isa isa : host_isas()) {
    if (isa != Isa::kAvx2 && isa != Isa::kAvx512) continue;
    const std::vector<int64_t> dims = isa == Isa::kAvx2 ? std::vector<int64_t>{128, 136, 256, 520, 1160}
                                                        : std::vector<int64_t>{512, 1024, 2064};
    for (int64_t dim : dims)
      for (int prefetch : {0, 16})
        for (int padding = 0; padding < 2; ++padding, ++number) {
          JitProblem p;
          p.key.isa = isa;
          p.key.dim = dim;
          p.key.mode = Mode::kMean;
          p.key.padding = padding != 0;
          p.key.prefetch = prefetch;
          Rng rng(mix(seed ^ uint64_t(number)));
          make_problem(p, rng);
          const auto kernel = shapejit::jit::generate_embag_kernel(p.key, rt);
          shapejit::test::note_direct_run(isa);
          const std::string diff = run_and_compare(p, kernel.fn, std::nullopt);
          rt.release(kernel.fn);
          INFO("case " << number << ", seed " << seed << "\n" << p.describe());
          CHECK_MESSAGE(diff.empty(), diff);
        }
  }
  if (number == 0) MESSAGE("SKIPPED: the host runs no x86 ISA");
}
