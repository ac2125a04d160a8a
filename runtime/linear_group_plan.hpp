// One validated linear-group description, decoded once (validation is its only producer:
// plan_linear_group in runtime/validate_linear_group): each part descriptor resolved to a part
// (its weight rows as a pointer and stride, its bias slice, its epilogue and output layout) and
// the ISA its kernels are generated for. Every later step (packing, the reference path, the
// run's validation) reads the plan and never the descriptor again, as the embedding bag's steps
// read its EmbagCallPlan.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/isa.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// One part, resolved: plain views with every stride explicit. While a group is built, `weight`
/// and `bias` point at the caller's memory (a row range of a packed weight, a slice of a packed
/// bias); a built group keeps them pointing at its own copies (the reference path) or null (the
/// packed panels hold them).
struct LinearPartPlan {
  const float* weight = nullptr;  ///< W_p [n, k], rows ldw floats apart
  int64_t ldw = 0;
  int64_t n = 0;                  ///< N_p, the part's output width
  int64_t k = 0;                  ///< K_p, the width its input must have
  const float* bias = nullptr;    ///< nullptr, or n values
  shapejit_activation activation = SHAPEJIT_ACTIVATION_NONE;
  float scale = 1.0f;             ///< 1 means no scaling step
  shapejit_layout layout = SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t heads = 1;              ///< H for the head-split layouts (divides n); 1 for row-major
};

/// A validated group: its parts in the caller's order and the ISA chosen at build time.
struct LinearGroupPlan {
  std::vector<LinearPartPlan> parts;
  jit::Isa isa = jit::Isa::kScalar;
};

/// Part `p` of a validated description: the only place a part descriptor becomes a part (the
/// packed form's rows and bias slice start at row_begin; a part without a scale has scale 1; a
/// row-major part has one head). The scalar reference keeps its own copy (ref::resolve_part).
/// Only for a validated description: plan_linear_group (runtime/validate_linear_group.hpp),
/// the plan's one producer, calls it after validation.
LinearPartPlan resolve_linear_part(const shapejit_linear_group_desc& desc, int64_t p);

}  // namespace shapejit::rt
