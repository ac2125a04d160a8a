// The contract between the runtime and a generated embedding-bag kernel: what it is
// specialised on (EmbagKey) and what it receives at run time (EmbagKernelArgs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "jit/dtype_traits.hpp"
#include "jit/isa.hpp"
#include "ref/table_rows.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::jit {

/// Everything generated code is specialised on. dim == 0 names the generic kernel, which
/// reads D from EmbagKernelArgs::dim (used once the code-memory bound is reached).
struct EmbagKey {
  Isa isa = Isa::kAvx512;
  DType table = DType::kF32;  ///< kF32, kF16, kBF16, or rowwise-quantized kQ8, kQ4, kQ2
  int64_t dim = 0;
  Mode mode = Mode::kSum;
  bool weighted = false;   ///< per_sample_weights present (sum only)
  bool padding = false;    ///< padding_idx present
  /// ATen's own loop's arithmetic without padding_idx (which implies it): set only where it
  /// changes a result, for weighted f32 sums and bf16 tables (aten_loop_arithmetic in shapejit.h).
  bool aten_loop = false;
  DType out = DType::kF32; ///< output dtype: kF32, kF16 or kBF16
  DType psw = DType::kF32; ///< per_sample_weights dtype (when weighted): kF32, kF16 or kBF16
  bool pruned = false;     ///< compressed_indices_mapping present: row = mapping[index], -1 skips
  DType index = DType::kI64;
  DType offset = DType::kI64;
  int prefetch = 16;       ///< software prefetch distance in indices (0 = none)
  /// Prefetch only the head of each row (embag_prefetch_head_bytes) instead of every line:
  /// f32 tables, prefetch > 0 (embag_prefetch_head_defined).
  /// The runtime's prefetch policy sets it per host class (runtime/embag/prefetch_policy.hpp).
  bool prefetch_head = false;
  /// Writes offset2bag, bag_size and max_indices (ATen's index outputs). false: the output rows
  /// only, for callers that need no backward (inference): no offset2bag fill, no counts stored
  /// (mean still divides by its count), and max keeps no row ids (a compare and a blend less per
  /// vector and row, and no max_indices stores). The output is bitwise the same either way.
  bool index_outputs = true;
  /// Elements from one output row to the next when they are not dense: 0 means dim (canonical
  /// for dense rows, so a call passing its own dim shares their kernel). The generic kernel
  /// (dim 0) keeps 0 and reads EmbagKernelArgs::output_row_stride.
  int64_t out_stride = 0;

  /// The arithmetic of ATen's own loop (padding_idx, or aten_loop), not torch's FBGEMM path.
  bool aten_loop_arithmetic() const { return padding || aten_loop; }
  /// Whether ATen's loop changes any result of a table: weighted f32 sums (products rounded) and
  /// bf16 tables (rule H6); elsewhere aten_loop stays false (canonical keys).
  static constexpr bool aten_loop_changes(DType table, bool weighted) {
    return table == DType::kBF16 || (table == DType::kF32 && weighted);
  }
  /// A weighted sum rounds each product before adding it (not one fma per term).
  bool rounds_products() const { return weighted && mode == Mode::kSum && !weighted_terms_fused(); }
  /// Rule H6's FBGEMM path (ref::bf16_fbgemm_path): a bf16 table there fuses weighted terms and
  /// rounds its sums half up.
  bool bf16_fbgemm_path() const { return ref::bf16_fbgemm_path(static_cast<int64_t>(table), aten_loop_arithmetic()); }
  /// A weighted sum's term is one fma (ref::weighted_terms_fused: the FBGEMM path, or f16), not
  /// a rounded product and an add.
  bool weighted_terms_fused() const {
    return ref::weighted_terms_fused(static_cast<int64_t>(table), aten_loop_arithmetic());
  }
  /// The bf16 output is rounded half up (sums and maxima on H6's FBGEMM path), not to nearest even.
  bool bf16_out_half_up() const { return bf16_fbgemm_path() && mode != Mode::kMean; }
  /// dtype of offset2bag, bag_size and max_indices (int64 when index and offset types differ).
  DType index_out() const { return index == offset ? index : DType::kI64; }
  bool operator==(const EmbagKey&) const = default;
  /// Canonical name, e.g. `embag.avx512.f32.d128.sum.i64.o64` (+ `.w`, `.pad`, `.pfN` when
  /// prefetch != 16, `.head` for prefetch_head, `.noidx` without index outputs and `.os<N>` for
  /// an output row stride; the generic kernel is `dgen`).
  std::string name() const;
};

/// Widest D the generators accept (dim * 8 and every offset stay in 32 bits); the runtime runs
/// wider rows on the generic kernel.
inline constexpr int64_t kMaxGeneratedEmbagDim = int64_t{1} << 24;

/// Inverse of EmbagKey::name(); nullopt when the text is not a canonical name.
std::optional<EmbagKey> parse_embag_key(std::string_view name);

struct EmbagKeyHash {
  size_t operator()(const EmbagKey& k) const noexcept;
};

/// Run-time arguments of one kernel call: a range of bags of one validated problem.
/// Bag b covers index positions [offsets[b], end_b) with end_b = offsets[b+1] when
/// b + 1 < num_offsets, else num_indices. Every index has already been range-checked.
struct EmbagKernelArgs {
  const void* weight;              ///< table base (row 0)
  int64_t row_stride_bytes;        ///< distance between rows
  int64_t dim;                     ///< D (the generic kernel reads it; others may assert it)
  const void* indices;             ///< key.index elements
  const void* offsets;             ///< key.offset elements
  int64_t num_offsets;             ///< len(offsets)
  int64_t num_indices;             ///< N
  const void* per_sample_weights;  ///< key.psw elements; read only when key.weighted
  int64_t padding_idx;             ///< non-negative; read only when key.padding
  int64_t bag_begin, bag_end;      ///< bags [bag_begin, bag_end) to compute
  void* output;                    ///< [B, D] of key.out elements, rows output_row_stride apart
  const int32_t* mapping;          ///< key.pruned: row of each index (every value in [-1, rows))
  // The index outputs: written only when key.index_outputs (else null: the generic kernel
  // tells the two apart by bag_size, never null when a call with index outputs has a bag).
  void* offset2bag;                ///< [N] of key.index_out(); written when mode != sum or padding
  void* bag_size;                  ///< [B]; written (counts) in mean and max mode
  void* max_indices;               ///< mean: [B] counts; max: [B, D] winning row ids
  /// Elements between output rows; 0 or D: dense. Generated kernels have it in their key
  /// (EmbagKey::out_stride) and never read it; the generic kernel does. Last, so that adding it
  /// moved no field the generated code addresses.
  int64_t output_row_stride;
};
static_assert(std::is_standard_layout_v<EmbagKernelArgs>);

/// Signature of every generated (and of the scalar fallback) embedding-bag kernel.
using EmbagKernelFn = void (*)(const EmbagKernelArgs*);

}  // namespace shapejit::jit
