// Which instruction sets the embedding-bag benchmark measures, and the limit loop of each: the
// engine's own ISA (its selection, SHAPEJIT_ISA cap included) and every lower vector ISA of
// the same family the host runs (avx2 on AVX-512 hosts), so each ISA's kernels are compared
// with the limit loop of the same ISA in one run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gather_limit.hpp"
#include "jit/isa.hpp"

namespace shapejit::bench {

using LimitLoop = bool (*)(const LimitArgs& args, int64_t bag_begin, int64_t bag_end);

/// The limit loop of `isa` when this build has one and the host runs it; otherwise nullptr and
/// `why_not` says which of the two is missing.
LimitLoop limit_loop(jit::Isa isa, std::string& why_not);

using ByteLimitLoop = bool (*)(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end);

/// The byte-row limit loop of `isa` (tables of other dtypes than f32), as limit_loop.
ByteLimitLoop byte_limit_loop(jit::Isa isa, std::string& why_not);

/// Sets args.prefetch_distance and prefetch_head for a loop on `isa` over a table of `num_rows`
/// rows: the engine's distance for a table beyond the private cache
/// (rt::uncached_prefetch_distance) and its head-of-row rule (rt::row_head_prefetch_pays).
/// The limit prefetches even where the engine's kernels skip it for a table that stays in L2.
void set_limit_prefetch(LimitArgs& args, jit::Isa isa, int64_t num_rows);

/// args.prefetch_distance of a byte-row loop on `isa` over a table of `num_rows` rows: the
/// engine's distance for a table beyond the private cache, for rows of args.row_bytes.
void set_byte_limit_prefetch(ByteLimitArgs& args, jit::Isa isa, int64_t num_rows);

/// True when the limit loops have a specialisation for this row width (16, 32, ..., 512).
bool limit_dim_supported(int64_t dim);

/// The ISAs the benchmark rows cover, the engine's selection first, then the lower vector ISAs
/// of its family that the host runs (never scalar: the `ref` rows are that).
std::vector<jit::Isa> bench_isas();

}  // namespace shapejit::bench
