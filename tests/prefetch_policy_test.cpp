// The prefetch rule of the API's kernel keys (runtime/embag/prefetch_policy.hpp): none for a table
// that stays in the core's private cache (half of L2; for rows longer than a line an eighth on
// AVX2 and a quarter on AVX-512; none for max on AVX-512), so a small hot table gets the kernel
// without per-row prefetch work (and with two bags in flight); else the distance of the host
// class: on AVX2 about 6 KiB of row bytes ahead within [6, 16] indices; on AVX-512 8 KiB within
// [6, 16] for a table within half of L3 and 16 KiB within [6, 32] beyond it; 16 on NEON. And
// what a kernel prefetches of each row (jit/embag_plan.hpp, embag_prefetch_head_bytes).
#include <doctest/doctest.h>

#include <asmjit/x86.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "jit/embag_codegen.hpp"
#include "jit/embag_plan.hpp"
#include "jit/host_features.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/prefetch_policy.hpp"
#include "runtime/embag/validate.hpp"

namespace {

using shapejit::rt::make_embag_key;
using shapejit::rt::last_level_cache_bytes;
using shapejit::rt::private_cache_bytes;

// The API's key for a valid call over `rows` x `dim` (rows row_stride apart) that reads only
// row 0.
shapejit::jit::EmbagKey api_key(int64_t rows, int64_t dim, int64_t row_stride, shapejit::jit::Isa isa,
                                shapejit_dtype table, shapejit_mode mode, bool output_only = false) {
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
  a.mode = mode;
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &a);
  e.skip_index_outputs = output_only;
  return make_embag_key(shapejit::rt::plan_embedding_bag(e), isa);
}

int key_prefetch(int64_t rows, int64_t dim, int64_t row_stride, shapejit::jit::Isa isa = shapejit::jit::Isa::kAvx2,
                 shapejit_dtype table = SHAPEJIT_F32, shapejit_mode mode = SHAPEJIT_SUM) {
  return api_key(rows, dim, row_stride, isa, table, mode).prefetch;
}

bool key_head(int64_t rows, int64_t dim, shapejit::jit::Isa isa, shapejit_mode mode = SHAPEJIT_SUM,
              shapejit_dtype table = SHAPEJIT_F32) {
  return api_key(rows, dim, dim, isa, table, mode).prefetch_head;
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
  // On AVX-512 max prefetches a cached table as well, and rows longer than a line (every other
  // mode) a table beyond a quarter of L2; one-line rows follow the rule.
  using shapejit::jit::Isa;
  CHECK(key_prefetch(half_rows, dim, dim, Isa::kAvx512, SHAPEJIT_F32, SHAPEJIT_MAX) == 16);
  CHECK(key_prefetch(1, dim, dim, Isa::kAvx512, SHAPEJIT_F32, SHAPEJIT_MAX) == 16);
  CHECK(key_prefetch(half_rows, dim, dim, Isa::kAvx512, SHAPEJIT_F32, SHAPEJIT_MEAN) == 0);  // one line
  const int64_t two_lines = 2 * dim, quarter_rows = l2 / 4 / (two_lines * 4);
  CHECK(key_prefetch(quarter_rows + 1, two_lines, two_lines, Isa::kAvx512, SHAPEJIT_F32, SHAPEJIT_MEAN) == 16);
  CHECK(key_prefetch(quarter_rows, two_lines, two_lines, Isa::kAvx512, SHAPEJIT_F32, SHAPEJIT_MEAN) == 0);
  CHECK(key_prefetch(quarter_rows + 1, two_lines, two_lines, Isa::kAvx512) == 16);  // sum too
  CHECK(key_prefetch(quarter_rows, two_lines, two_lines, Isa::kAvx512) == 0);
  const int64_t q8_dim = 128, q8_row = q8_dim + 8, q8_quarter_rows = l2 / 4 / q8_row;  // codes, scale, bias
  CHECK(key_prefetch(q8_quarter_rows + 1, q8_dim, q8_row, Isa::kAvx512, SHAPEJIT_Q8) == 16);
  CHECK(key_prefetch(q8_quarter_rows, q8_dim, q8_row, Isa::kAvx512, SHAPEJIT_Q8) == 0);
  CHECK(key_prefetch(half_rows, dim, dim, Isa::kAvx512) == 0);  // one-line rows: half of L2
  CHECK(key_prefetch(half_rows, dim, dim, Isa::kAvx2, SHAPEJIT_F32, SHAPEJIT_MAX) == 0);
  CHECK(key_prefetch(half_rows, dim, dim, Isa::kAvx2, SHAPEJIT_F32, SHAPEJIT_MEAN) == 0);
  // On AVX2 rows longer than a cache line count as cached only within an eighth of L2.
  const int64_t wide = 2 * dim, eighth_rows = l2 / 8 / (wide * 4);
  for (shapejit_mode mode : {SHAPEJIT_SUM, SHAPEJIT_MEAN, SHAPEJIT_MAX}) {
    CAPTURE(mode);
    CHECK(key_prefetch(eighth_rows, wide, wide, Isa::kAvx2, SHAPEJIT_F32, mode) == 0);
    CHECK(key_prefetch(eighth_rows + 1, wide, wide, Isa::kAvx2, SHAPEJIT_F32, mode) == 16);
  }
  CHECK(key_prefetch(eighth_rows + 1, wide, wide, Isa::kAvx512) == 0);  // AVX-512: L2/4
  // A declared extent of 2^62 bytes (found by fuzz/: doubling it overflowed) is not cached.
  CHECK(key_prefetch(int64_t(1) << 42, int64_t(1) << 18, int64_t(1) << 18) == 6);
}

TEST_CASE("prefetch distance per host class: AVX2 by row bytes, AVX-512 by row bytes and L3, NEON 16") {
  if (std::getenv("SHAPEJIT_PREFETCH_DISTANCE")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_DISTANCE is set and fixes the distance for every call");
    return;
  }
  using shapejit::jit::Isa;
  const int64_t rows = 1 << 20;  // 128 MiB and more: beyond any private cache
  // AVX2: 6 KiB of rows ahead, within [6, 16] indices, wherever the table lives.
  CHECK(key_prefetch(rows, 8, 8) == 16);      // 32-byte rows: capped at 16
  CHECK(key_prefetch(rows, 64, 64) == 16);    // 256 bytes: 24, capped
  CHECK(key_prefetch(rows, 128, 128) == 12);  // 512
  CHECK(key_prefetch(rows, 160, 160) == 9);   // 640: 6144 / 640 rounds down
  CHECK(key_prefetch(rows, 256, 256) == 6);   // 1 KiB
  CHECK(key_prefetch(rows, 512, 512) == 6);   // 2 KiB: 3, raised to the floor
  // The bytes a row holds, not its stride: padding between rows is never prefetched.
  CHECK(key_prefetch(rows, 128, 1024) == 12);
  CHECK(key_prefetch(rows, 256, 256, Isa::kAvx2, SHAPEJIT_F16) == 12);  // 512 bytes of f16
  CHECK(key_prefetch(rows, 512, 512, Isa::kNeon) == 16);

  // AVX-512: a table within half of L3 (its rows come from L3) about 8 KiB ahead within
  // [6, 16]; one row more and it is beyond L3 (rows from memory): 16 KiB within [6, 32].
  const int64_t l2 = private_cache_bytes(), l3 = last_level_cache_bytes();
  MESSAGE("caches: L2 " << l2 << " bytes, L3 " << l3 << " bytes");
  struct Case {
    int64_t dim, in_l3, beyond_l3;
  };
  for (const Case c : {Case{64, 16, 32}, Case{128, 16, 32}, Case{256, 8, 16}, Case{512, 6, 8}}) {
    const int64_t row_bytes = c.dim * 4, in_l3_rows = l3 / 2 / row_bytes;
    CAPTURE(c.dim);
    if (in_l3_rows * row_bytes <= l2 / 2) {
      MESSAGE("SKIPPED: half of L3 is within half of L2 on this host (such a table stays cached)");
      continue;
    }
    CHECK(key_prefetch(in_l3_rows, c.dim, c.dim, Isa::kAvx512) == c.in_l3);
    CHECK(key_prefetch(in_l3_rows + 1, c.dim, c.dim, Isa::kAvx512) == c.beyond_l3);
  }
  CHECK(key_prefetch(int64_t(1) << 30, 16, 16, Isa::kAvx512) == 32);  // 64-byte rows: 256, capped
}

}  // namespace

namespace {

// prefetcht0 instructions in the listing of `key` (both copies of the bag loop).
int64_t prefetches_in_listing(const shapejit::jit::EmbagKey& key) {
  asmjit::CodeHolder code;
  code.init(asmjit::Environment(asmjit::Arch::kX64));
  asmjit::StringLogger logger;
  code.setLogger(&logger);
  shapejit::jit::emit_embag_kernel(key, code);
  const std::string text = logger.data();
  int64_t n = 0;
  for (size_t at = text.find("prefetcht0"); at != std::string::npos; at = text.find("prefetcht0", at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("head-of-row prefetch: f32 rows on AVX2 but max, and on AVX-512 for a table within half of L3 (any table on Intel)") {
  if (std::getenv("SHAPEJIT_PREFETCH_DISTANCE")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_DISTANCE is set and fixes the distance for every call");
    return;
  }
  if (std::getenv("SHAPEJIT_PREFETCH_HEAD")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_HEAD is set and fixes the head-of-row choice");
    return;
  }
  using shapejit::jit::Isa;
  const int64_t big = int64_t(1) << 30;  // rows of a table beyond any L3
  CHECK(key_head(big, 128, Isa::kAvx2));
  CHECK(key_head(big, 128, Isa::kAvx2, SHAPEJIT_MEAN));
  CHECK_FALSE(key_head(big, 128, Isa::kAvx2, SHAPEJIT_MAX));
  // Max without index outputs keeps no ids, so its rows are blocked like sum's: heads pay.
  CHECK(api_key(big, 128, 128, Isa::kAvx2, SHAPEJIT_F32, SHAPEJIT_MAX, true).prefetch_head);
  CHECK_FALSE(key_head(big, 128, Isa::kAvx2, SHAPEJIT_SUM, SHAPEJIT_F16));
  // Beyond L3, AVX-512: every line, but on Intel hosts the head (measured per vendor).
  const bool intel = shapejit::jit::host_features().intel;
  MESSAGE("AVX-512 beyond L3 expects " << std::string(intel ? "heads (Intel host)" : "whole rows (not an Intel host)"));
  CHECK(key_head(big, 128, Isa::kAvx512) == intel);
  CHECK_FALSE(key_head(big, 128, Isa::kNeon));
  const int64_t in_l3_rows = shapejit::rt::last_level_cache_bytes() / 2 / 512;
  if (in_l3_rows * 512 > private_cache_bytes() / 2) {
    CHECK(key_head(in_l3_rows, 128, Isa::kAvx512));
    CHECK(key_head(in_l3_rows + 1, 128, Isa::kAvx512) == intel);
    CHECK(key_head(in_l3_rows, 128, Isa::kAvx512, SHAPEJIT_MAX));
    CHECK(key_head(in_l3_rows + 1, 128, Isa::kAvx512, SHAPEJIT_MAX) == intel);
  } else {
    MESSAGE("SKIPPED (AVX-512 in L3): half of L3 is within half of L2 on this host");
  }
  CHECK_FALSE(key_head(16, 128, Isa::kAvx2));  // a cached table: no prefetch at all
  // The key names it, and no generator takes it where it is not defined.
  shapejit::jit::EmbagKey key = api_key(big, 128, 128, Isa::kAvx2, SHAPEJIT_F32, SHAPEJIT_SUM);
  CHECK(key.name() == "embag.avx2.f32.d128.sum.i64.o64.pf12.head");
  CHECK(shapejit::jit::parse_embag_key(key.name()) == key);
  key.mode = shapejit::Mode::kMax;
  CHECK_FALSE(shapejit::jit::embag_key_unsupported_reason(key).has_value());
  CHECK(shapejit::jit::parse_embag_key(key.name()) == key);
  key.table = shapejit::DType::kF16;
  CHECK(shapejit::jit::embag_key_unsupported_reason(key).has_value());
  key.table = shapejit::DType::kF32;
  key.prefetch = 0;
  CHECK(shapejit::jit::embag_key_unsupported_reason(key).has_value());
}

// ctest runs this file again with SHAPEJIT_PREFETCH_HEAD=0 and =1 (prefetch_policy_test.head0,
// .head1): every prefetching f32 key follows it, on every ISA and table size, max included; keys
// without prefetch or of other tables never prefetch heads.
TEST_CASE("SHAPEJIT_PREFETCH_HEAD forces the head-of-row choice") {
  const char* forced = std::getenv("SHAPEJIT_PREFETCH_HEAD");
  if (!forced || std::getenv("SHAPEJIT_PREFETCH_DISTANCE")) {
    MESSAGE("SKIPPED: SHAPEJIT_PREFETCH_HEAD is not set (ctest sets it in prefetch_policy_test.head0 and .head1)");
    return;
  }
  using shapejit::jit::Isa;
  REQUIRE((std::string(forced) == "0" || std::string(forced) == "1"));
  const bool head = std::string(forced) == "1";
  const int64_t big = int64_t(1) << 30, in_l3 = 4096;  // rows beyond any L3; within half of every L3 here
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    CAPTURE(shapejit::jit::isa_name(isa));
    for (int64_t rows : {big, in_l3}) {
      CAPTURE(rows);
      CHECK(key_head(rows, 128, isa) == head);
      CHECK(key_head(rows, 128, isa, SHAPEJIT_MEAN) == head);
      CHECK(key_head(rows, 128, isa, SHAPEJIT_MAX) == head);
      CHECK_FALSE(key_head(rows, 128, isa, SHAPEJIT_SUM, SHAPEJIT_F16));  // f32 rows only
    }
    CHECK_FALSE(key_head(16, 128, isa));  // a cached table: no prefetch at all
  }
}

TEST_CASE("a head-of-row key prefetches the head of an f32 row; other keys every line") {
  using shapejit::jit::embag_prefetch_head_bytes;
  // Rows of up to 6 lines: the first quarter of the lines, at least one.
  CHECK(embag_prefetch_head_bytes(32, 32) == 32);     // less than a line: the row
  CHECK(embag_prefetch_head_bytes(128, 128) == 64);   // D=32 f32
  CHECK(embag_prefetch_head_bytes(256, 256) == 64);   // D=64
  CHECK(embag_prefetch_head_bytes(80, 80) == 64);     // D=20: two lines, one prefetched
  CHECK(embag_prefetch_head_bytes(384, 384) == 128);  // D=96
  // Up to 12 lines: half of the block's lines.
  CHECK(embag_prefetch_head_bytes(512, 512) == 256);  // D=128
  CHECK(embag_prefetch_head_bytes(640, 320) == 192);  // D=160, a block of 5 lines
  CHECK(embag_prefetch_head_bytes(768, 384) == 192);  // D=192, a block of 6 lines
  // Wider rows: the whole block.
  CHECK(embag_prefetch_head_bytes(1024, 512) == 512);
  CHECK(embag_prefetch_head_bytes(2048, 512) == 512);

  // Each kernel has two copies of the row loop (unclamped and clamped prefetch positions).
  shapejit::jit::EmbagKey key;
  key.isa = shapejit::jit::Isa::kAvx2;
  key.dim = 64;  // 4 lines
  CHECK(prefetches_in_listing(key) == 2 * 4);
  key.prefetch_head = true;
  CHECK(prefetches_in_listing(key) == 2 * 1);
  key.dim = 128;  // 8 lines
  CHECK(prefetches_in_listing(key) == 2 * 4);
  key.mode = shapejit::Mode::kMean;
  CHECK(prefetches_in_listing(key) == 2 * 4);
  key.isa = shapejit::jit::Isa::kAvx512;
  CHECK(prefetches_in_listing(key) == 2 * 4);
  key.mode = shapejit::Mode::kMax;  // max rows too: half of the 8 lines in each row loop
  const int64_t max_head = prefetches_in_listing(key);
  key.prefetch_head = false;
  CHECK(prefetches_in_listing(key) == 2 * max_head);
  key.isa = shapejit::jit::Isa::kAvx2;
  key.mode = shapejit::Mode::kMax;  // every line: 4 per row where a 1-line row has 1
  key.dim = 16;
  const int64_t max_one_line = prefetches_in_listing(key);
  key.dim = 64;
  CHECK(prefetches_in_listing(key) == 4 * max_one_line);
  key.mode = shapejit::Mode::kSum;
  // 64 codes + 8 bytes of scale and bias, rows 72 bytes apart: 2 lines and the last byte's.
  key.table = shapejit::DType::kQ8;
  CHECK(prefetches_in_listing(key) == 2 * 3);
  key.table = shapejit::DType::kF16;  // 128 bytes: both lines
  key.out = shapejit::DType::kF16;
  CHECK(prefetches_in_listing(key) == 2 * 2);
  key.out = shapejit::DType::kF32;
  key.table = shapejit::DType::kF32;
  key.isa = shapejit::jit::Isa::kAvx512;
  CHECK(prefetches_in_listing(key) == 2 * 4);
}
