// The `limit` loops of the embedding-bag benchmarks: per instruction set, the minimal
// hand-written gather loop (accumulators in vector registers, the row of the index
// LimitArgs::prefetch_distance positions ahead prefetched) that measures what the memory
// system allows. They are not embedding bags: no padding, no integer outputs, f32 tables and
// int64 indices/offsets only, D a multiple of 16 in 16..512 (limit_dim_supported). Tables of
// other dtypes have a byte-row loop (ByteLimitArgs): their rows' bytes at the gather rate.
// limit_select.hpp picks the loop of an ISA for the running host.
//
// One file per ISA (gather_limit_avx512.cpp, gather_limit_avx2.cpp, gather_limit_neon.cpp), each
// compiled for its ISA alone. This header is shared between them and ordinary code, so it
// declares plain data and functions only: an inline function or template defined here could be
// emitted with AVX-512 instructions and picked by the linker for a non-AVX-512 caller.
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

/// One problem for a limit loop. Bag b covers index positions [offsets[b], end_b) with
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
  /// Index positions ahead whose row is prefetched: the engine's distance for this table on the
  /// loop's ISA (set_limit_prefetch in limit_select.hpp), so the limit prefetches as the
  /// kernels do beyond the private cache.
  int64_t prefetch_distance = 16;
  /// Sum, mean and weighted sum prefetch only the head of each row, as the kernels do where it
  /// pays (set_limit_prefetch; limit_prefetch_bytes).
  bool prefetch_head = false;
};

/// Bytes of a column block spanning `block_bytes` of a row that a limit loop prefetches: the
/// kernels' head-of-row rule (jit::embag_prefetch_head_bytes) when args.prefetch_head and the op
/// is not max, else the whole block. Defined in limit_select.cpp (ordinary flags), called once
/// per column block.
int64_t limit_prefetch_bytes(const LimitArgs& args, int64_t block_bytes);

/// One problem for a byte-row limit loop: the rows of a table of any stored dtype (f16, bf16,
/// rowwise-quantized codes with their scale and bias) gathered as bytes, which is all the work
/// the memory system sees of any kernel over that table. Every byte of each indexed row is read
/// once and added, wrapping, into 16 byte lanes per bag (lane j takes the row's bytes at
/// positions j mod 16); with per-sample weights each index's weight is read too (its bytes
/// added to lanes 0..weight_bytes-1). The bag's 16 lanes are written across its output row, so
/// the output bytes of the real call are written too. The loops' results are defined by this
/// text alone (no ISA's vector width shows), so the benchmark checks them against a scalar loop.
struct ByteLimitArgs {
  const uint8_t* table = nullptr;
  int64_t row_stride_bytes = 0;
  int64_t row_bytes = 0;  ///< a multiple of 4
  const int64_t* indices = nullptr;
  int64_t num_indices = 0;
  const int64_t* offsets = nullptr;
  int64_t num_offsets = 0;                 ///< = number of bags; bags end as in LimitArgs
  const void* per_sample_weights = nullptr;  ///< read when set
  int64_t weight_bytes = 4;                ///< bytes of one per-sample weight: 2 or 4
  uint8_t* output = nullptr;               ///< [num_offsets, output_bytes]
  int64_t output_bytes = 0;                ///< a multiple of 16
  /// Index positions ahead whose row (every cache line of it) is prefetched.
  int64_t prefetch_distance = 16;
};

// Each computes bags [bag_begin, bag_end) of `args` on the calling thread and returns true, or
// returns false (computing nothing) when the sizes break ByteLimitArgs' rules or the build is
// for another CPU family; the caller checks first that the host runs the ISA's code
// (byte_limit_loop() in limit_select.hpp does).
bool limit_byte_rows_avx512(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end);
bool limit_byte_rows_avx2(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end);
bool limit_byte_rows_neon(const ByteLimitArgs& args, int64_t bag_begin, int64_t bag_end);

// Each computes bags [bag_begin, bag_end) of `args` on the calling thread and returns true, or
// returns false (computing nothing) for a dim it has no specialisation for, or when the build
// is for another CPU family. The caller checks first that the host runs the ISA's code
// (limit_loop() in limit_select.hpp does).

/// zmm loop; gather_limit_avx512.cpp, compiled with -mavx512f/bw/dq/vl.
bool limit_embedding_bag_avx512(const LimitArgs& args, int64_t bag_begin, int64_t bag_end);
/// ymm loop over column blocks of at most 16 registers; gather_limit_avx2.cpp, -mavx2 -mfma.
bool limit_embedding_bag_avx2(const LimitArgs& args, int64_t bag_begin, int64_t bag_end);
/// 128-bit NEON loop over column blocks of 16 registers; gather_limit_neon.cpp (AArch64 only).
bool limit_embedding_bag_neon(const LimitArgs& args, int64_t bag_begin, int64_t bag_end);

}  // namespace shapejit::bench
