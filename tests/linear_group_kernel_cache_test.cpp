// Linear groups' GEMM kernels live in the process's kernel cache: they show in the engine
// statistics, are shared by groups of the same shape, and count against the one code-memory
// limit (together with the embedding bags' kernels); a group whose kernel the limit has no room
// for runs the reference and is counted as such.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"
#include "support/one_part_group.hpp"

namespace {

using shapejit::test::OnePartGroup;

// Restores the process's code-memory limit on every exit of a test.
struct LimitRestorer {
  ~LimitRestorer() { shapejit::set_code_memory_limit(-1); }
};

// Skipped (doctest reports it) where the selected ISA has no GEMM generator: no kernel is cached.
bool no_gemm_generator() { return !shapejit::rt::gemm_isa_supported(shapejit::rt::selected_isa()); }

}  // namespace

TEST_CASE("linear group kernel cache: GEMM kernels show in the engine statistics and are shared"
          * doctest::skip(no_gemm_generator())) {
  const shapejit::KernelCacheStats before = shapejit::kernel_cache_stats();
  const shapejit::rt::KernelCacheCounters gemm_before = shapejit::rt::gemm_kernel_cache().stats();
  {
    const OnePartGroup g(19, 37);
    g.check_one_row();
  }
  const shapejit::KernelCacheStats built = shapejit::kernel_cache_stats();
  const shapejit::rt::KernelCacheCounters gemm_built = shapejit::rt::gemm_kernel_cache().stats();
  CHECK(gemm_built.kernels > gemm_before.kernels);
  CHECK(gemm_built.code_bytes > gemm_before.code_bytes);
  // The engine's statistics are the sum over the caches: the GEMM kernels are in them.
  CHECK(built.kernels - before.kernels >= gemm_built.kernels - gemm_before.kernels);
  CHECK(built.code_bytes - before.code_bytes >= gemm_built.code_bytes - gemm_before.code_bytes);
  CHECK(built.compilations - before.compilations >= gemm_built.compilations - gemm_before.compilations);
  CHECK(built.reference_linear_groups == before.reference_linear_groups);

  // The first group is destroyed; a second of the same shape finds its kernels in the cache.
  const OnePartGroup again(19, 37);
  again.check_one_row();
  const shapejit::rt::KernelCacheCounters gemm_again = shapejit::rt::gemm_kernel_cache().stats();
  CHECK(gemm_again.kernels == gemm_built.kernels);
  CHECK(gemm_again.compilations == gemm_built.compilations);
  CHECK(gemm_again.hits > gemm_built.hits);
}

TEST_CASE("linear group kernel cache: the code-memory limit applies to GEMM kernels"
          * doctest::skip(no_gemm_generator())) {
  const LimitRestorer restore;
  const shapejit::KernelCacheStats before = shapejit::kernel_cache_stats();
  // No room for one more byte of code: the group's kernels are refused and it runs the reference.
  REQUIRE(shapejit_set_code_memory_limit(before.code_bytes) == SHAPEJIT_OK);
  {
    const OnePartGroup g(23, 41);
    g.check_one_row();
  }
  const shapejit::KernelCacheStats refused = shapejit::kernel_cache_stats();
  CHECK(refused.kernels == before.kernels);
  CHECK(refused.code_bytes == before.code_bytes);
  CHECK(refused.generic_fallbacks > before.generic_fallbacks);
  CHECK(refused.reference_linear_groups == before.reference_linear_groups + 1);

  // With the default limit the same shape compiles and runs generated code.
  REQUIRE(shapejit_set_code_memory_limit(-1) == SHAPEJIT_OK);
  {
    const OnePartGroup g(23, 41);
    g.check_one_row();
  }
  const shapejit::KernelCacheStats compiled = shapejit::kernel_cache_stats();
  CHECK(compiled.kernels > refused.kernels);
  CHECK(compiled.reference_linear_groups == refused.reference_linear_groups);
}

TEST_CASE("linear group kernel cache: GEMM code counts against the embedding bags' limit too"
          * doctest::skip(no_gemm_generator())) {
  const LimitRestorer restore;
  const shapejit::KernelCacheStats start = shapejit::kernel_cache_stats();
  // One more group's GEMM kernels, then a limit at exactly the code held: no room is left.
  {
    const OnePartGroup g(29, 43);
    g.check_one_row();
  }
  const shapejit::KernelCacheStats with_gemm = shapejit::kernel_cache_stats();
  REQUIRE(with_gemm.code_bytes > start.code_bytes);
  REQUIRE(shapejit_set_code_memory_limit(with_gemm.code_bytes) == SHAPEJIT_OK);
  // An embedding bag whose kernel is not cached: the GEMM code left it no room. Tests that ran
  // earlier in this process (the whole binary in one process under qemu) may have compiled any
  // dim, so odd dims are tried in turn until one is not cached; a cache hit moves no counter.
  bool fell_back = false;
  for (int64_t dim = 51; dim < 51 + 2 * 64 && !fell_back; dim += 2) {
    CAPTURE(dim);
    std::vector<float> table(size_t(4 * dim), 1.0f), out(size_t(dim), -1.0f);
    std::vector<int64_t> indices{0, 3}, offsets{0};
    shapejit_embedding_bag_args a{};
    a.weight = table.data();
    a.weight_dtype = SHAPEJIT_F32;
    a.num_rows = 4, a.dim = dim, a.row_stride = dim;
    a.indices = indices.data(), a.index_dtype = SHAPEJIT_I64, a.num_indices = 2;
    a.offsets = offsets.data(), a.offset_dtype = SHAPEJIT_I64, a.num_offsets = 1;
    a.mode = SHAPEJIT_SUM;
    std::vector<int64_t> offset2bag(2), bag_size(1), max_indices(1);
    REQUIRE(shapejit_embedding_bag(&a, out.data(), offset2bag.data(), bag_size.data(), max_indices.data()) ==
            SHAPEJIT_OK);
    for (float v : out) CHECK(v == 2.0f);
    const shapejit::KernelCacheStats after = shapejit::kernel_cache_stats();
    CHECK(after.kernels == with_gemm.kernels);
    fell_back = after.generic_fallbacks > with_gemm.generic_fallbacks;
  }
  CHECK(fell_back);
}
