// The prefetch rule of the API's kernel keys (runtime/embag_kernel_call.hpp): none for a table
// that stays in the core's private cache, so a small hot table gets the kernel without per-row
// prefetch work (and with two bags in flight); else the distance of the host class: on AVX2
// about 6 KiB of row bytes ahead within [6, 16] indices, 16 on the other ISAs.
#include <doctest/doctest.h>

#include <cstdlib>
#include <vector>

#include "runtime/embag_kernel_call.hpp"
#include "runtime/validate.hpp"

namespace {

using shapejit::rt::make_embag_key;
using shapejit::rt::private_cache_bytes;

// A valid sum call over `rows` x `dim` (rows row_stride apart) that reads only row 0.
int key_prefetch(int64_t rows, int64_t dim, int64_t row_stride, shapejit::jit::Isa isa = shapejit::jit::Isa::kAvx2,
                 shapejit_dtype table = SHAPEJIT_F32) {
  static const float value = 1.0f;
  static const int64_t index = 0, offset = 0;
  shapejit_embedding_bag_args a{};
  a.weight = &value;  // never read past row 0: the plan needs the declared extent only
  a.weight_dtype = table;
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
  return make_embag_key(shapejit::rt::plan_embedding_bag(a), isa).prefetch;
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
  CHECK(key_prefetch(4096, 1024, 1024) == 6);          // 16 MiB, 4 KiB rows: the AVX2 floor
  // The extent counts the stride, not just the values read: padded rows take cache too.
  CHECK(key_prefetch(half_rows, dim, 2 * dim) == 16);
  // A declared extent of 2^62 bytes (found by fuzz/: doubling it overflowed) is not cached.
  CHECK(key_prefetch(int64_t(1) << 42, int64_t(1) << 18, int64_t(1) << 18) == 6);
}

TEST_CASE("prefetch distance per host class: AVX2 by row bytes, 16 indices elsewhere") {
  if (std::getenv("SHAPEJIT_PREFETCH_DISTANCE")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_DISTANCE is set and fixes the distance for every call");
    return;
  }
  using shapejit::jit::Isa;
  const int64_t rows = 1 << 20;  // 128 MiB and more: beyond any private cache
  // AVX2: 6 KiB of rows ahead, within [6, 16] indices.
  CHECK(key_prefetch(rows, 8, 8) == 16);      // 32-byte rows: capped at 16
  CHECK(key_prefetch(rows, 64, 64) == 16);    // 256 bytes: 24, capped
  CHECK(key_prefetch(rows, 128, 128) == 12);  // 512
  CHECK(key_prefetch(rows, 160, 160) == 9);   // 640: 6144 / 640 rounds down
  CHECK(key_prefetch(rows, 256, 256) == 6);   // 1 KiB
  CHECK(key_prefetch(rows, 512, 512) == 6);   // 2 KiB: 3, raised to the floor
  // The bytes a row holds, not its stride: padding between rows is never prefetched.
  CHECK(key_prefetch(rows, 128, 1024) == 12);
  CHECK(key_prefetch(rows, 256, 256, Isa::kAvx2, SHAPEJIT_F16) == 12);  // 512 bytes of f16
  // The other host classes keep the distance measured there.
  CHECK(key_prefetch(rows, 64, 64, Isa::kAvx512) == 16);
  CHECK(key_prefetch(rows, 512, 512, Isa::kAvx512) == 16);
  CHECK(key_prefetch(rows, 512, 512, Isa::kNeon) == 16);
}

}  // namespace
