// Validation of linear groups: every rule of split-gemm-semantics.md and of the linear-group
// API, in one place, shared by the reference and JIT paths, run before any output is written.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/linear_group/linear_group_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Checks every rule of a group description (form, enums, sizes, strides, null pointers, 4-byte
/// alignment of the weights and bias, row ranges within the packed weight and bias, K per part,
/// heads dividing N_p, byte counts). Throws shapejit::Error(kInvalidArgument) naming the argument
/// (e.g. `desc.parts[1].rows`), its value and the rule.
void validate_linear_group_desc(const shapejit_linear_group_desc& desc);

/// The caller's ex description with struct_size checked (this or an older shapejit's) and the
/// fields it does not cover set to their defaults.
shapejit_linear_group_ex_desc complete_linear_group_ex_desc(const shapejit_linear_group_ex_desc& caller);

/// Every rule of a completed ex description: the form, the group's rules (with codes the f32
/// weights are NULL), the codes (count, strides, ranges, scales) or, without codes, finite f32
/// weights, and the qd8 forms' K limit (docs/quantized-linear-semantics.md).
void validate_linear_group_ex_desc(const shapejit_linear_group_ex_desc& desc);

/// Validates an ex description and resolves every part and its codes (resolve_linear_codes).
LinearGroupPlan plan_linear_group(const shapejit_linear_group_ex_desc& desc, jit::Isa isa);

/// The arguments of quantize_linear_weights (the form, sizes, pointers, alignment, finite
/// weights); throws Error(kInvalidArgument) naming the argument.
void validate_quantize_weights_args(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k,
                                    int64_t stride, const int8_t* codes, const float* scales);

/// Validates `desc` and resolves every part for `isa` (resolve_linear_part): the one way a
/// LinearGroupPlan is made, as plan_embedding_bag makes an EmbagCallPlan. Throws like
/// validate_linear_group_desc.
LinearGroupPlan plan_linear_group(const shapejit_linear_group_desc& desc, jit::Isa isa);

/// Checks one run against the built parts (their n, k, layout and heads): the io count, each part's m, K, strides, pointers
/// (non-NULL and 4-byte aligned when m > 0), head-split batch and sequence length, byte counts,
/// then that no output overlaps another
/// output or any input. Throws like validate_linear_group_desc (names such as `io[1].ldy`).
void validate_linear_group_run(std::span<const LinearPartPlan> parts, const shapejit_linear_group_io* io,
                               int64_t num_io);

}  // namespace shapejit::rt
