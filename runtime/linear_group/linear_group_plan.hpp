// One validated linear-group description, decoded once (validation is its only producer:
// plan_linear_group in runtime/validate_linear_group): each part descriptor resolved to a part
// (its weight rows as a pointer and stride, its bias slice, its epilogue and output layout) and
// the ISA its kernels are generated for. Every later step (packing, the reference path, the
// run's validation) reads the plan and never the descriptor again, as the embedding bag's steps
// read its EmbagCallPlan.
#pragma once

#include <cstdint>
#include <vector>

#include "jit/gemm_kernel.hpp"
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
  // Quantized forms (LinearGroupPlan::quant): the weights as codes, which the plan owns. `weight`
  // is then null: the f32 weights (if any) were quantized while planning.
  const int8_t* codes = nullptr;  ///< [n, k], rows ldc bytes apart, one code per byte
  int64_t ldc = 0;
  const float* wscale = nullptr;  ///< [n] per-channel scales
};

/// A validated group: its parts in the caller's order, its form and the ISA chosen at build
/// time. For a quantized form the plan owns every part's codes and scales (quantized from the
/// caller's f32 weights or copied from the caller's codes), dense, which the parts point into:
/// moving the plan keeps those pointers valid.
struct LinearGroupPlan {
  std::vector<LinearPartPlan> parts;
  jit::Isa isa = jit::Isa::kScalar;
  shapejit_linear_quant quant = SHAPEJIT_LINEAR_F32;
  std::vector<int8_t> codes;
  std::vector<float> scales;
};

/// True for the forms whose input is quantized per row at each run (qd8).
constexpr bool linear_quantized_input(shapejit_linear_quant q) {
  return q == SHAPEJIT_LINEAR_QD8_QC8W || q == SHAPEJIT_LINEAR_QD8_QC4W;
}
/// True for the int4 weight forms.
constexpr bool linear_int4_weights(shapejit_linear_quant q) {
  return q == SHAPEJIT_LINEAR_QD8_QC4W || q == SHAPEJIT_LINEAR_F32_QC4W;
}
/// Largest K of a qd8 part: the kernels' (jit::kGemmQd8MaxK), so their int32 accumulator is exact.
inline constexpr int64_t kQd8MaxK = jit::kGemmQd8MaxK;

/// Part `p` of a validated description: the only place a part descriptor becomes a part (the
/// packed form's rows and bias slice start at row_begin; a part without a scale has scale 1; a
/// row-major part has one head). The scalar reference keeps its own copy (ref::resolve_part).
/// Only for a validated description: plan_linear_group (runtime/linear_group/validate_linear_group.hpp),
/// the plan's one producer, calls it after validation.
LinearPartPlan resolve_linear_part(const shapejit_linear_group_desc& desc, int64_t p);

/// The codes of part `p` as the caller gave them (desc.codes non-null): a row range of the
/// packed entry or the part's own entry. Only for a validated description.
shapejit_linear_weight_codes resolve_part_codes(const shapejit_linear_group_ex_desc& desc, int64_t p);

/// Gives every part of `plan` its codes and scales, owned by the plan: quantized from the
/// resolved f32 weights when desc.codes is null, else copied from the caller's codes. Only for a
/// validated description (finite weights, codes in range).
void resolve_linear_codes(const shapejit_linear_group_ex_desc& desc, LinearGroupPlan& plan);

}  // namespace shapejit::rt
