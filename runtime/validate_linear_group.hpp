// Validation of linear groups: every rule of split-gemm-semantics.md and of the linear-group
// API, in one place, shared by the reference and JIT paths, run before any output is written.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/linear_group_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Checks every rule of a group description (form, enums, sizes, strides, null pointers, 4-byte
/// alignment of the weights and bias, row ranges within the packed weight and bias, K per part,
/// heads dividing N_p, byte counts). Throws shapejit::Error(kInvalidArgument) naming the argument
/// (e.g. `desc.parts[1].rows`), its value and the rule.
void validate_linear_group_desc(const shapejit_linear_group_desc& desc);

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
