// The `limit` implementation of the embedding-bag benchmarks: a minimal hand-written AVX-512
// gather loop (D/16 zmm accumulators, the row of the index 16 positions ahead prefetched) that
// measures what the memory system allows. It is not an embedding bag: no padding, no integer
// outputs, f32 tables and int64 indices/offsets only, D in kLimitDims.
//
// This header is shared between the AVX-512 translation unit (gather_limit.cpp, compiled with
// -mavx512*) and ordinary code, so it declares plain data and functions only: an inline
// function or template defined here could be emitted with AVX-512 instructions and picked by
// the linker for a non-AVX-512 caller.
#pragma once

#include <cstdint>

namespace shapejit::bench {

/// The per-bag arithmetic: the least work each embedding-bag mode needs per gathered row.
enum class LimitOp : int {
  kSum = 0,          ///< acc + x
  kMean = 1,         ///< acc + x, then one division by the count per bag
  kWeightedSum = 2,  ///< fma(w, x, acc)
  kMax = 3,          ///< max(acc, x) from -inf (empty bags give 0); no max_indices
};

/// One problem for the limit kernel. Bag b covers index positions [offsets[b], end_b) with
/// end_b = offsets[b + 1], or num_indices for the last bag (include_last_offset false).
struct LimitArgs {
  const float* table = nullptr;
  int64_t row_stride = 0;  ///< elements between rows
  int64_t dim = 0;
  const int64_t* indices = nullptr;
  int64_t num_indices = 0;
  const int64_t* offsets = nullptr;
  int64_t num_offsets = 0;                    ///< = number of bags
  const float* per_sample_weights = nullptr;  ///< kWeightedSum only
  LimitOp op = LimitOp::kSum;
  float* output = nullptr;  ///< [num_offsets, dim]
};

/// Prefetch distance of the limit kernel, in index positions.
inline constexpr int kLimitPrefetchDistance = 16;

/// True when the kernel has a specialisation for this row width (16, 32, ..., 512).
bool limit_dim_supported(int64_t dim);

/// Computes bags [bag_begin, bag_end) of `args` on the calling thread; the caller checks first
/// that the host runs AVX-512 code (jit::host_runs(Isa::kAvx512), the engine's rule, which
/// covers the -mavx512f/bw/dq/vl this file is compiled for). Returns false (computing nothing) for an unsupported dim.
bool limit_embedding_bag(const LimitArgs& args, int64_t bag_begin, int64_t bag_end);

}  // namespace shapejit::bench
