// The part of an embedding-bag call that every shapejit op reads the same way, whatever the
// table: indices (1-D with offsets, or the 2-D fixed-length form), per_sample_weights, and the
// four ATen-shaped results. Used by torch.ops.shapejit.embedding_bag (float tables) and
// torch.ops.shapejit.quantized_embedding_bag (rowwise-quantized tables).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <c10/util/Optional.h>
#include <span>
#include <tuple>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {

using BagResults = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

/// Indices and offsets as shapejit reads them (1-D, contiguous), and the per-sample weights
/// flattened to one per index. `psw_given` is the caller's tensor (ATen's fast-path test reads
/// its stride).
struct BagInputs {
  at::Tensor indices, offsets, psw, psw_given;
};

/// How an op takes index and offset dtypes other than int32/int64. kPromotedLikeAten:
/// torch.embedding_bag's rule (both converted to their promoted dtype, which must be int32 or
/// int64); kInt32OrInt64: torch's quantized ops' rule (each must be int32 or int64).
enum class IndexDtypes { kPromotedLikeAten, kInt32OrInt64 };

/// Checks and normalises indices, offsets and per_sample_weights. 2-D indices [B, L] need
/// offsets None and mean offsets 0, L, 2L, ... (include_last_offset must then be false).
/// `op` names the operator in messages.
BagInputs bag_inputs(const char* op, const at::Tensor& indices, const c10::optional<at::Tensor>& offsets,
                     const c10::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                     IndexDtypes index_dtypes);

/// The fields of a call that come from BagInputs and the scalar arguments (the table's are left
/// to the caller).
void fill_bag_args(shapejit_embedding_bag_args& a, const BagInputs& in, int64_t mode,
                   c10::optional<int64_t> padding_idx, bool include_last_offset);

/// Validates `call` once (the engine's per-call plan), allocates the four results from the plan's
/// shapes (output of the plan's output dtype) and runs the call into them. Errors surface as
/// check_status reports them, `what` naming the operator.
BagResults run_bag(const shapejit_embedding_bag_ex_args& call, int64_t mode, const char* what);

/// As run_bag, but computes and returns the output alone (skip_index_outputs): what
/// nn.EmbeddingBag's forward keeps of torch.embedding_bag.
at::Tensor run_bag_output(const shapejit_embedding_bag_ex_args& call, const char* what);

/// Runs the calls as one group (shapejit_embedding_bags: one validation pass, one parallel
/// region) and returns each call's output alone; an engine error names the call (calls[k]).
std::vector<at::Tensor> run_bags_output(std::span<const shapejit_embedding_bag_ex_args> calls, const char* what);

/// As run_bags_output, but the outputs side by side in one [B, sum of D] tensor (torch.cat(...,
/// dim=1) of run_bags_output's, without the copy): call k writes its column slice through
/// output_row_stride. Every call needs the same number of bags and output dtype, and there must
/// be at least one.
at::Tensor run_bags_concat_output(std::span<const shapejit_embedding_bag_ex_args> calls, const char* what);

/// Each table's output (one [B, sum of D] tensor when `concat`) and its offset2bag, bag_size and
/// max_indices, the lists of a group op with index results.
using GroupResults =
    std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>>;

/// As run_bags_output (run_bags_concat_output when `concat`), but every call also computes its
/// index results (what the gradient reads); modes[k] is call k's mode (the max_indices shape).
GroupResults run_bags(std::span<const shapejit_embedding_bag_ex_args> calls, at::IntArrayRef modes, bool concat,
                      const char* what);

/// Empty results of the shapes shapejit reports; output has dtype `value_type`, max_indices is
/// [B, D] in max mode and 1-D otherwise (ATen's shapes).
BagResults allocate_results(const shapejit_embedding_bag_shapes& s, at::ScalarType value_type, int64_t mode);

}  // namespace shapejit::torch_ext
