// The software prefetch policy of the embedding-bag kernels, per host class (the ISA the engine
// selected stands for it) and per table: how many index positions ahead a kernel prefetches,
// and whether it prefetches only the head of each row. Measurements are next to each rule in
// prefetch_policy.cpp; the benchmark's limit loops follow the same rules.
#pragma once

#include <cstdint>

#include "jit/isa.hpp"
#include "runtime/embag/embag_call_plan.hpp"

namespace shapejit::rt {

/// The policy's answer for one call (the key's EmbagKey::prefetch and prefetch_head).
struct EmbagPrefetch {
  int distance = 0;       ///< index positions ahead; 0 = no software prefetch
  /// Prefetching only the head of each row pays on this host class for this table; the key
  /// takes it where jit::embag_prefetch_head_defined admits it.
  bool row_head = false;
};

/// The policy for a planned call on `isa`: no prefetch for a table within half the core's L2
/// (rows stay cached; on AVX-512 max prefetches anyway; rows longer than a cache line beyond an
/// eighth of L2 on AVX2 and, in mean mode, beyond a quarter on AVX-512), else
/// uncached_prefetch_distance, and row_head_prefetch_pays. SHAPEJIT_PREFETCH_DISTANCE fixes the
/// distance for every call, SHAPEJIT_PREFETCH_HEAD (0 or 1) the head-of-row choice.
EmbagPrefetch embag_prefetch(const EmbagCallPlan& plan, jit::Isa isa);

/// Bytes of the core's private (L2) cache as the prefetch rule reads it (512 KiB where the
/// system does not say).
int64_t private_cache_bytes();

/// Bytes of the last-level (L3) cache the core shares, from sysfs where Linux gives it (32 MiB
/// where the system does not say).
int64_t last_level_cache_bytes();

/// The software prefetch distance, in indices, of a kernel on `isa` reading rows of
/// `row_bytes` (values and trailer) from a table of `num_rows` rows `row_stride_bytes` apart that
/// does not stay in the private cache: about 6 KiB of rows ahead within [6, 16] on AVX2; on
/// AVX-512 about 8 KiB within [6, 16] for a table within half of L3 and 16 KiB within [6, 32]
/// beyond it; 16 on NEON. The benchmark's limit loops prefetch by it as well.
int uncached_prefetch_distance(jit::Isa isa, int64_t row_bytes, int64_t num_rows, int64_t row_stride_bytes);

/// Whether prefetching only the head of each sum row pays on `isa` for a table of `num_rows`
/// rows `row_stride_bytes` apart (for the tables jit::embag_prefetch_head_defined admits): on
/// AVX2 always (max rows never), on AVX-512 for a table within half of L3 (max rows too),
/// elsewhere never; SHAPEJIT_PREFETCH_HEAD=0/1 forces it off/on. The benchmark's limit loops
/// (gather-sums) follow it.
bool row_head_prefetch_pays(jit::Isa isa, int64_t num_rows, int64_t row_stride_bytes);

}  // namespace shapejit::rt
