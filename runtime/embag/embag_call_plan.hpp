// One validated embedding-bag call, decoded once: what validation proved and derived, in the
// form every later step consumes (the kernel key, the kernel arguments, the sum-mode zeroing,
// the bag schedule and the output checks). Validation is the only producer (runtime/validate),
// so a call is validated exactly once whichever entry point it comes through.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/engine/byte_ranges.hpp"
#include "runtime/engine/partition.hpp"
#include "shapejit/shapejit.h"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {

/// The byte ranges of a call's five inputs (EmbagCallPlan::input_ranges).
using InputRanges = std::array<ByteRange, 5>;

/// Immutable once built: consumers receive it as `const EmbagCallPlan&`. Move-only, because
/// `offsets` may point into the plan's own storage.
struct EmbagCallPlan {
  /// The caller's call with every extended field present (a shorter struct_size filled with
  /// the defaults of shapejit_embedding_bag_ex_init). Its enum fields hold valid values.
  shapejit_embedding_bag_ex_args args{};
  /// ATen's output shapes (ref::embedding_bag_shapes' rules).
  shapejit_embedding_bag_shapes shapes{};

  DType table = DType::kF32;      ///< kF32, kF16, kBF16, kQ8, kQ4 or kQ2
  DType out = DType::kF32;        ///< dtype of `output`
  DType psw = DType::kF32;        ///< dtype of per_sample_weights (kF32 when there are none)
  /// dtype the kernels read the weights in (widen_weights.hpp): psw, or kF32 when the plan
  /// widens them into wide_weights.
  DType kernel_psw = DType::kF32;
  DType index = DType::kI64;      ///< dtype of indices
  DType offset = DType::kI64;     ///< dtype of `offsets` below (the caller's offsets dtype)
  DType index_out = DType::kI64;  ///< dtype of offset2bag, bag_size and max_indices
  Mode mode = Mode::kSum;

  int64_t num_rows = 0, dim = 0, num_indices = 0;
  int64_t num_bags = 0;           ///< B
  int64_t out_row_stride = 0;     ///< elements from one output row to the next (dim when dense)
  int64_t row_bytes = 0;          ///< bytes of one row's values (the packed row when quantized)
  int64_t row_stride_bytes = 0;   ///< distance between rows in bytes (0 when there are no rows)

  bool weighted = false;          ///< per_sample_weights present (sum mode only)
  bool padding = false;           ///< padding_idx present
  int64_t padding_index = -1;     ///< the index as given that pads, wrapped to >= 0 (-1: none)
  bool aten_loop = false;         ///< ATen's own loop's arithmetic (ref::aten_loop_arithmetic)
  bool pruned = false;            ///< compressed_indices_mapping present
  const int32_t* mapping = nullptr;  ///< index -> row (-1 skips); mapping_len entries
  int64_t mapping_len = 0;
  /// offset2bag, bag_size and max_indices are computed (not skip_index_outputs).
  bool index_outputs = true;

  /// Span offsets of the bags: bag b covers [offsets[b], offsets[b + 1]), the last bag up to
  /// num_indices when b + 1 == offsets.size. The caller's offsets, or (offsets_as_lengths) the
  /// normalised spans in span_storage, B + 1 entries of the caller's offsets dtype, built
  /// during validation before any output is written.
  OffsetsView offsets;
  /// Positions at and after it belong to no bag (N but for a partial final offset or lengths
  /// that stop early); offset2bag reports them as bag B.
  int64_t covered_end = 0;
  /// The opt-in ATen partial-final-offset quirk (offsets[B] < N), which only the reference runs.
  bool partial_final_offset = false;
  /// The range check of the indices is left to the plan's runner (IndexRangeCheck::kByRunner):
  /// it must pass before any output is written (runtime/embag/embedding_bag.cpp).
  bool index_range_deferred = false;

  /// The bytes the call reads of each input (weight from its first row to the end of its last,
  /// indices, offsets, per_sample_weights, compressed_indices_mapping), which no output may
  /// share; one it reads nothing of is the inverted range [2^64 - 1, 0) (runtime/validate_buffers).
  InputRanges input_ranges{};

  /// The prepared form the plan was made from (plan_embedding_bag_form: unique in the process,
  /// never reused), 0 for a one-shot call's plan.
  uint64_t form_id = 0;

  std::vector<int64_t> span_storage64;  ///< normalised spans for int64 offsets (lengths form)
  std::vector<int32_t> span_storage32;  ///< normalised spans for int32 offsets (lengths form)
  /// The batch's weights as f32 when kernel_psw != psw, built during validation (before any
  /// output is written); the reference reads the caller's.
  std::vector<float> wide_weights;

  EmbagCallPlan() = default;
  /// A plan of `call` before validation: every derived field still at its default.
  explicit EmbagCallPlan(const shapejit_embedding_bag_ex_args& call) : args(call) {}
  /// A plan of a plain call, extended with the defaults of shapejit_embedding_bag_ex_init.
  explicit EmbagCallPlan(const shapejit_embedding_bag_args& call);
  EmbagCallPlan(EmbagCallPlan&&) noexcept = default;
  EmbagCallPlan& operator=(EmbagCallPlan&&) noexcept = default;
  EmbagCallPlan& operator=(const EmbagCallPlan&) = delete;

  /// A copy of a form's plan (validate.hpp, plan_embedding_bag_form) to fill with one batch. A
  /// form holds no spans yet, so nothing in the copy points into the original.
  EmbagCallPlan copy_of_form() const { return *this; }

 private:
  EmbagCallPlan(const EmbagCallPlan&) = default;  // copy_of_form only: a batch's offsets may point into its plan
};

/// The caller's four output buffers of one call (any may be null where its shape is empty): the
/// C ABI's struct, so a group's outputs pass from the C ABI as they are.
using EmbagOutputs = shapejit_embedding_bag_outputs;

/// The C++ API's shapes type from the C one.
EmbeddingBagShapes to_cpp_shapes(const shapejit_embedding_bag_shapes& s);

}  // namespace shapejit::rt
