// The prefetch rule of the API's kernel keys (runtime/embag_kernel_call.hpp): none for a table
// that stays in the core's private cache, the default distance for one that does not, so a small
// hot table gets the kernel without per-row prefetch work (and with two bags in flight).
#include <doctest/doctest.h>

#include <cstdlib>
#include <vector>

#include "runtime/embag_kernel_call.hpp"
#include "runtime/validate.hpp"

namespace {

using shapejit::rt::make_embag_key;
using shapejit::rt::private_cache_bytes;

// A valid f32 sum call over `rows` x `dim` (rows row_stride apart) that reads only row 0.
int key_prefetch(int64_t rows, int64_t dim, int64_t row_stride) {
  static const float value = 1.0f;
  static const int64_t index = 0, offset = 0;
  shapejit_embedding_bag_args a{};
  a.weight = &value;  // never read past row 0: the plan needs the declared extent only
  a.weight_dtype = SHAPEJIT_F32;
  a.num_rows = rows;
  a.dim = dim;
  a.row_stride = row_stride;
  a.indices = &index;
  a.index_dtype = SHAPEJIT_I64;
  a.num_indices = 1;
  a.offsets = &offset;
  a.offset_dtype = SHAPEJIT_I64;
  a.num_offsets = 1;
  a.mode = SHAPEJIT_SUM;
  return make_embag_key(shapejit::rt::plan_embedding_bag(a), shapejit::jit::Isa::kAvx2).prefetch;
}

TEST_CASE("prefetch follows the table's size against the private cache") {
  if (std::getenv("SHAPEJIT_PREFETCH_DISTANCE")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_DISTANCE is set and fixes the distance for every call");
    return;
  }
  const int64_t l2 = private_cache_bytes();
  MESSAGE("private cache: " << l2 << " bytes");
  CHECK(l2 >= 64 * 1024);
  const int64_t dim = 16, row_bytes = dim * 4;
  const int64_t half_rows = l2 / 2 / row_bytes;
  CHECK(key_prefetch(half_rows, dim, dim) == 0);       // exactly half of L2: stays cached
  CHECK(key_prefetch(half_rows + 1, dim, dim) == 16);  // one row more: prefetched
  CHECK(key_prefetch(4096, 1024, 1024) == 16);         // 16 MiB
  // The extent counts the stride, not just the values read: padded rows take cache too.
  CHECK(key_prefetch(half_rows, dim, 2 * dim) == 16);
  // A declared extent of 2^62 bytes (found by fuzz/: doubling it overflowed) is not cached.
  CHECK(key_prefetch(int64_t(1) << 42, int64_t(1) << 18, int64_t(1) << 18) == 16);
}

}  // namespace
