// The software prefetch policy of the embedding-bag kernels; see prefetch_policy.hpp.
#include "runtime/embag/prefetch_policy.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "jit/embag_plan.hpp"
#include "jit/host_features.hpp"

namespace shapejit::rt {
namespace {

/// How far ahead a kernel prefetches a table beyond the private cache: about `ahead_bytes` of
/// rows, within [min, max] indices.
struct PrefetchReach {
  int64_t ahead_bytes;
  int min, max;
};

// AVX2 hosts (measured on the AVX2 EPYC host, 4096-row f32 tables in L3, D = 32..512,
// sum/mean/weighted, kernels alone against the limit loop): the best distance shrinks as rows
// grow. With the other core idle, 4-8 indices won from D=128 up (16 lost 5-20 % at D >= 256);
// with the other core busy, 12-16 won at D <= 128 (6 lost 7 % at D=128) while D=256 and 512
// still wanted 6-8. About 6 KiB of row bytes ahead, within [6, 16] indices, is within 3 % of the
// best in both states: 16 up to 256-byte rows (D <= 64), 12 at D=128, 6 from D=256.
constexpr PrefetchReach kAvx2Reach{6144, 6, 16};

// AVX-512 hosts (measured on the Zen 5 EPYC VM, f32 sum kernels alone, interleaved in one
// process): where the rows come from decides. A table in L3 (4096 rows) wants about 8 KiB
// ahead: D=512 ran 8-10 % faster at 6 indices than at 16, D=256 best at 8-12, D <= 128 at
// 12-16 (24 lost 5 % at D=128). A table beyond L3 (1e6 rows) wants twice that: 32 indices won
// 10-13 % over 16 at D=64 and 128, D=256 was best at 12-16 and D=512 at 8.
constexpr PrefetchReach kAvx512ReachInL3{8192, 6, 16};
constexpr PrefetchReach kAvx512ReachBeyondL3{16384, 6, 32};

// NEON: 16 indices at every width, the distance first tuned on Zen 5 (no Arm host has measured
// it).
constexpr PrefetchReach kFixedReach{0, 16, 16};

/// The whole number in environment variable `name` when it is set to one in [0, max]; -1 when it
/// is unset, or set to anything else (which is reported on stderr and ignored).
int env_override(const char* name, long max) {
  const char* text = std::getenv(name);
  if (!text || !*text) return -1;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > max) {
    std::fprintf(stderr, "shapejit: ignoring %s=%s (want 0..%ld)\n", name, text, max);
    return -1;
  }
  return int(v);
}

/// SHAPEJIT_PREFETCH_DISTANCE (0..1024) when set (tuning on another machine), else -1: the
/// distance then follows the table (embag_prefetch).
int prefetch_override() {
  static const int distance = env_override("SHAPEJIT_PREFETCH_DISTANCE", 1024);
  return distance;
}

/// SHAPEJIT_PREFETCH_HEAD when set: 0 = every kernel prefetches whole rows, 1 = the head wherever
/// the key admits it (jit::embag_prefetch_head_defined); else -1, the policy below. For comparing
/// the two on a host class the policy was not measured on (the benchmark's limit loops follow it
/// too), as SHAPEJIT_PREFETCH_DISTANCE does for the distance.
int prefetch_head_override() {
  static const int head = env_override("SHAPEJIT_PREFETCH_HEAD", 1);
  return head;
}

// Whether a table of `num_rows` rows, `row_stride_bytes` apart, spans more than `budget` bytes.
// Multiplied, not divided: this runs on every call, where a 64-bit division costs tens of
// cycles; a product that overflows is a table beyond any cache.
bool table_exceeds(int64_t num_rows, int64_t row_stride_bytes, int64_t budget) {
  int64_t bytes = 0;
  return row_stride_bytes > 0 && num_rows > 0 &&
         (__builtin_mul_overflow(num_rows, row_stride_bytes, &bytes) || bytes > budget);
}

// Half of L3, as half of L2 for the private cache: other cores and the call's other data share it.
bool beyond_l3(int64_t num_rows, int64_t row_stride_bytes) {
  return table_exceeds(num_rows, row_stride_bytes, last_level_cache_bytes() / 2);
}

}  // namespace

int64_t private_cache_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? int64_t(l2) : int64_t(512) << 10;
  }();
  return bytes;
}

int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    // sysfs gives the L3 the core shares (one CCD's on AMD); sysconf may give the socket's sum.
    if (std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r")) {
      long kib = 0;
      char unit = 0;
      const int got = std::fscanf(f, "%ld%c", &kib, &unit);
      std::fclose(f);
      if (got == 2 && unit == 'K' && kib > 0) return int64_t(kib) << 10;
    }
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? int64_t(l3) : int64_t(32) << 20;
  }();
  return bytes;
}


namespace {

// How far ahead on `isa` for rows of `row_bytes` from a table within half of L3 or beyond it.
int distance_of(jit::Isa isa, int64_t row_bytes, bool beyond) {
  const PrefetchReach reach = isa == jit::Isa::kAvx2     ? kAvx2Reach
                              : isa == jit::Isa::kAvx512 ? (beyond ? kAvx512ReachBeyondL3 : kAvx512ReachInL3)
                                                         : kFixedReach;
  // A row beyond the reach gets the minimum; otherwise both fit in 32 bits, whose division is
  // several times faster than a 64-bit one on the hosts measured.
  if (row_bytes > reach.ahead_bytes) return reach.min;
  const uint32_t rows_ahead = uint32_t(reach.ahead_bytes) / uint32_t(std::max<int64_t>(row_bytes, 1));
  return int(std::clamp<int64_t>(rows_ahead, reach.min, reach.max));
}

/// Prefetching only the head of each row (for the rows jit::embag_prefetch_head_defined admits)
/// measured faster, kernel alone: on AVX2 (the EPYC host) +6-22 % at D = 32..192 for sum, mean
/// and weighted, tables in L3 and beyond (1e6 rows x D=128: +13 %); on AVX-512 (the Zen 5 host)
/// +2-5 % at D = 64..128 for a table in L3, but beyond L3 the whole row won by 4-7 % (the lines
/// not prefetched come from memory too late); NEON is not measured. Beyond L3 the Intel
/// AVX-512 host measured the opposite: heads took 18 % less time (f32 sum 1e6 rows x D=128,
/// 4 alternations of SHAPEJIT_PREFETCH_HEAD: 658 -> 537 us; the limit loop 646 -> 555; the
/// other dtypes, which prefetch whole rows, did not move), so there the vendor decides.
///
/// Max rows (the Zen 4 host, 4096-row tables, interleaved A/B): on AVX-512 +7-12 % at D=32,
/// +2-6 % at D=64, +1-5 % at D=128, even at D = 256..512; on AVX2, where max with ids splits a
/// row into column blocks from D=64 (a value and an id register per vector), -2..-7 % at
/// D = 64..128 (the AVX2 EPYC host: -5..-10 % at D=64). Max without ids (no index outputs)
/// keeps sum's blocks and gains like sum on AVX2: two A/B runs on the Zen 4 host, D=32 +1..+6 %,
/// D=64 +2 %, D=128 +3 %, D=256 -1..+2 %, D=512 -2..+16 %.
bool head_pays(jit::Isa isa, bool beyond, bool max_ids) {
  if (const int forced = prefetch_head_override(); forced >= 0) return forced == 1;
  if (isa == jit::Isa::kAvx2) return !max_ids;
  return isa == jit::Isa::kAvx512 && (!beyond || jit::host_features().intel);
}

/// The bytes within which a table counts as cached, so its kernel gets no software prefetch
/// (0: none does). Software prefetch only pays for rows that come from beyond the core's
/// private cache: a table that fits in half of L2 (the rest holds indices, outputs and the
/// caller's data) stays there across calls, and there the prefetch's index load, multiply and
/// clamp per row cost more than they hide (about 1.5x on a hot D=16 table on the AVX2 EPYC
/// host), and they rule out two bags in flight (jit/embag_plan.hpp, embag_pairs_bags). At a
/// table of the whole L2 size prefetch won again. Beyond that the distance is per host class.
///
/// On AVX-512 (the Zen 5 host, kernel alone) max, which never pairs bags, gains from prefetch
/// on smaller tables: it prefetches every table (1024-4096 rows x D=32: +5-16 %; its row loop is
/// twice sum's, so the prefetch's cost hides). Rows longer than a line prefetch a table beyond a
/// quarter of L2. Mean first: on the Zen 5 host before mean paired bags, 4096 x 32 and 8192 x 16
/// (half of L2) +7 %, 2048 x 32 even, 1024 x 32 -7 %; on the Zen 4 host with pairs, 4096 x 32
/// +4 %, 5461 x 24 +3 %, while one-line rows at half of L2 ran 12-22 % faster without prefetch
/// (8192 x 16, 16384 x 8), so they keep half of L2. Then sum and weighted sum, on the Intel
/// AVX-512 host (2 MiB L2; 4096-row tables, 3 processes x 3 interleaved repetitions, distance
/// 16 against none): between a quarter and half of L2, f16 and bf16 D = 128 (1 MiB) -7..-15 %
/// time, q8 D = 128 (544 KiB) -4..-10 %, f32 D = 64 (1 MiB) -4 %; at a quarter (f32 D = 32,
/// 512 KiB) prefetch lost 5 %, which the strict "beyond" keeps out.
///
/// On AVX2 (AVX2 kernels on the Zen 4 host, 1 MiB L2, interleaved A/B) it depends on the row:
/// rows of one cache line (D=16) keep the L2/2 rule (prefetch lost 5-18 % at 256 and 512 KiB),
/// longer rows gained from it down to a quarter of L2: at half of L2 (4096 x 32, 2048 x 64)
/// sum, mean and weighted +7-17 %, max +6-20 %; at a quarter (2048 x 32, 1024 x 64, 512 x 128)
/// -3..+13 %, most cases +2-8 %. At an eighth (1024 x 32) no prefetch won by 3-8 %.
int64_t cached_table_bytes(const EmbagCallPlan& p, jit::Isa isa, int64_t row_bytes) {
  const int64_t l2 = private_cache_bytes();
  if (isa == jit::Isa::kAvx512 && p.mode == Mode::kMax) return 0;
  if (row_bytes > jit::kCacheLineBytes) {
    if (isa == jit::Isa::kAvx2) return l2 / 8;
    if (isa == jit::Isa::kAvx512) return l2 / 4;
  }
  return l2 / 2;
}

}  // namespace

bool row_head_prefetch_pays(jit::Isa isa, int64_t num_rows, int64_t row_stride_bytes) {
  return head_pays(isa, beyond_l3(num_rows, row_stride_bytes), false);
}

int uncached_prefetch_distance(jit::Isa isa, int64_t row_bytes, int64_t num_rows, int64_t row_stride_bytes) {
  return distance_of(isa, row_bytes, beyond_l3(num_rows, row_stride_bytes));
}

EmbagPrefetch embag_prefetch(const EmbagCallPlan& p, jit::Isa isa) {
  EmbagPrefetch out;
  const bool beyond = beyond_l3(p.num_rows, p.row_stride_bytes);
  out.row_head = head_pays(isa, beyond, p.mode == Mode::kMax && p.index_outputs);
  if (const int forced = prefetch_override(); forced >= 0) {
    out.distance = forced;
    return out;
  }
  const int64_t row_bytes = jit::embag_col_bytes(p.table, p.dim) + jit::embag_row_trailer_bytes(p.table);
  const int64_t budget = cached_table_bytes(p, isa, row_bytes);
  if (budget > 0 && !table_exceeds(p.num_rows, p.row_stride_bytes, budget)) return out;
  out.distance = distance_of(isa, row_bytes, beyond);
  return out;
}

}  // namespace shapejit::rt
