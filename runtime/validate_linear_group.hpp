// Validation of linear groups: every rule of split-gemm-semantics.md and of the linear-group
// API, in one place, shared by the reference and JIT paths, run before any output is written.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// What a run is checked against: the shape and layout of one built part.
struct LinearPartShape {
  int64_t n = 0;  ///< N_p, the part's output width
  int64_t k = 0;  ///< K_p, the width its input must have
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t heads = 1;  ///< H (1 for row-major)
};

/// Checks every rule of a group description (form, enums, sizes, strides, null pointers, 4-byte
/// alignment of the weights and bias, row ranges within the packed weight and bias, K per part,
/// heads dividing N_p, byte counts) and
/// returns each part's shape. Throws shapejit::Error(kInvalidArgument) naming the argument
/// (e.g. `desc.parts[1].rows`), its value and the rule.
std::vector<LinearPartShape> validate_linear_group_desc(const shapejit_linear_group_desc& desc);

/// Checks one run against the built parts: the io count, each part's m, K, strides, pointers
/// (non-NULL and 4-byte aligned when m > 0), head-split batch and sequence length, byte counts,
/// then that no output overlaps another
/// output or any input. Throws like validate_linear_group_desc (names such as `io[1].ldy`).
void validate_linear_group_run(std::span<const LinearPartShape> parts, const shapejit_linear_group_io* io,
                               int64_t num_io);

}  // namespace shapejit::rt
