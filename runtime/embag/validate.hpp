// Validation of embedding-bag calls: every rule of embedding-bag-semantics.md and of
// quantized-tables-semantics.md ("Beyond ATen" 7), in one place, run once per call before any
// output is written. Its product is the call's plan (runtime/embag/embag_call_plan.hpp).
#pragma once

#include <span>

#include "runtime/embag/embag_call_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Where the range check of a call's indices runs (plan_embedding_bag).
enum class IndexRangeCheck {
  kInPlan,    ///< during validation, like every other rule
  kByRunner,  ///< by the runner of the plan, before it writes any output
};

/// The complete extended form of a caller's ex struct: fields its struct_size covers are the
/// caller's, later ones take shapejit_embedding_bag_ex_init's defaults. Rejects a struct_size
/// that does not cover `call` or exceeds this library's struct (a newer caller's options
/// cannot be honoured, so they are not silently ignored).
shapejit_embedding_bag_ex_args complete_ex_args(const shapejit_embedding_bag_ex_args& caller);

/// Checks every input rule of the call (dtypes of the table, output and weights; sizes and
/// byte-count overflow; alignment of the input buffers; padding_idx; offsets as spans or as
/// lengths; every index; every mapping entry an index reads) and returns its plan. Throws
/// shapejit::Error naming the argument, the value and the rule (kInvalidArgument, or
/// kUnsupported for valid-but-unsupported requests). `args` must be complete (complete_ex_args).
///
/// Quantized tables (Q8/Q4/Q2) need no alignment: their rows are read bytewise (Q8's f32 scale
/// and bias sit at byte D of the row, Q4/Q2's f16 ones at byte ceil(D/2) or ceil(D/4)); their
/// row_stride counts bytes and must be >= the packed row. Pruned tables: indices lie in
/// [0, mapping_len), padding_idx in [-mapping_len, mapping_len) names an index as given.
///
/// `when`: kByRunner leaves the range check of the indices to whoever runs the plan
/// (plan.index_range_deferred; run_embedding_bag does it inside its parallel region), unless
/// the table is pruned or the indices are few. Every other rule is checked here either way.
EmbagCallPlan plan_embedding_bag(const shapejit_embedding_bag_ex_args& args,
                                 IndexRangeCheck when = IndexRangeCheck::kInPlan);
/// A plain call, extended with the defaults of shapejit_embedding_bag_ex_init.
EmbagCallPlan plan_embedding_bag(const shapejit_embedding_bag_args& args,
                                 IndexRangeCheck when = IndexRangeCheck::kInPlan);

/// The batch of a call: its indices, offsets, their counts and its weights' pointer.
shapejit_embedding_bag_batch batch_of(const shapejit_embedding_bag_args& call);
/// Puts `batch` into `call` (batch_of's inverse): with batch_of, the one place that says which
/// fields of a call are the batch's.
void put_batch(shapejit_embedding_bag_args& call, const shapejit_embedding_bag_batch& batch);

/// The form of a call (every rule that does not read the batch: indices, offsets, their counts
/// and the weights' pointer; whether there are weights is the form's), for a prepared call: the
/// plan's batch fields stay unset. `args` must be complete (complete_ex_args).
EmbagCallPlan plan_embedding_bag_form(const shapejit_embedding_bag_ex_args& args);
/// The plan of the call `form` (plan_embedding_bag_form) makes with `batch`: the batch's rules,
/// in the order plan_embedding_bag checks them, so a batch is rejected with the message the
/// whole call would get; and the prepared call's own rule that the batch has weights exactly
/// when the form has.
EmbagCallPlan plan_embedding_bag_batch(const EmbagCallPlan& form, const shapejit_embedding_bag_batch& batch,
                                       IndexRangeCheck when = IndexRangeCheck::kInPlan);

/// plan_embedding_bag_batch into `plan`, a copy of the same form (copy_of_form) that earlier
/// batches may have filled: every field of the batch is rewritten. With `passed_ranges`, the
/// batch's input buffers passed their rules before with these very pointers and counts (a
/// prepared call's memory of its last buffers: the rules read nothing else), and their ranges
/// are taken as given instead of checked again.
void plan_embedding_bag_batch_into(EmbagCallPlan& plan, const shapejit_embedding_bag_batch& batch,
                                   IndexRangeCheck when, const InputRanges* passed_ranges = nullptr);

/// The index positions validation checks: [0, index_check_end(plan)) (the positions a bag
/// covers, and for spans every position).
int64_t index_check_end(const EmbagCallPlan& plan);

/// Whether the indices at positions [begin, end) lie in the plan's index space (the range
/// rule of check_indices, on a part; no message).
bool indices_in_range(const EmbagCallPlan& plan, int64_t begin, int64_t end);

/// The index rules: every checked index in range, else an Error naming the first one out of
/// range; for a pruned table also the mapping entries the indices read.
void check_indices(const EmbagCallPlan& plan);

/// Checks the output buffers of a planned call: every non-empty one is non-null (a zero-length
/// output may be null) and aligned to its element size, and none shares a byte with an input
/// (the table from its first row to the end of its last, indices, offsets, per_sample_weights,
/// compressed_indices_mapping) or with another output.
void validate_embedding_bag_outputs(const EmbagCallPlan& plan, const void* output, const void* offset2bag,
                                    const void* bag_size, const void* max_indices);

/// The buffer rule across the calls of a group (run_embedding_bags), once each call's own
/// buffers have passed validate_embedding_bag_outputs: no output of one call shares a byte with
/// an input or an output of another (inputs may be shared: two calls reading one table). Throws
/// an Error naming both calls and buffers. O(B log B) in the B buffers of the group.
void validate_group_outputs(std::span<const EmbagCallPlan> plans, std::span<const EmbagOutputs> outputs);

/// The shapes of a plain call (plan_embedding_bag(args).shapes).
shapejit_embedding_bag_shapes validate_embedding_bag(const shapejit_embedding_bag_args& args);

}  // namespace shapejit::rt
