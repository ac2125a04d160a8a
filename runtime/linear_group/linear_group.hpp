// The object behind a linear-group handle and the one path every create and run takes:
// validate and plan, build (pack or copy the weights), run. Shared by the C++ API and the C ABI.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/linear_group/linear_group_pack.hpp"
#include "runtime/linear_group/linear_group_plan.hpp"
#include "shapejit/shapejit.h"

/// The C handle's definition: the plan runs are validated against, and either the JIT's packed
/// panels (`packed.parts` non-empty) or, for the reference path, dense copies of the weights and
/// biases (`copies`) that the plan's parts point into.
struct shapejit_linear_group {
  uint64_t serial = 0;  ///< unique per group for the process's lifetime (never an address's reuse)
  shapejit::rt::LinearGroupPlan plan;
  shapejit::rt::PackedGroup packed;
  std::vector<float> copies;
};

namespace shapejit::rt {

/// Validates `desc` and builds a group owning copies of its weights and bias (throws Error).
std::unique_ptr<shapejit_linear_group> create_linear_group(const shapejit_linear_group_desc& desc);
/// The same with a quantized form: the weights quantized (or the codes copied) and packed once.
/// Groups whose form no generator takes run the scalar reference (counted, as for f32).
std::unique_ptr<shapejit_linear_group> create_linear_group(const shapejit_linear_group_ex_desc& desc);

/// Validates the arguments, then quantizes (the public quantize_linear_weights; throws Error).
void quantize_linear_weights_checked(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k,
                                     int64_t stride, int8_t* codes, float* scales);

/// Validates the whole run, then computes every part (throws Error before writing anything).
void run_linear_group(const shapejit_linear_group& group, const shapejit_linear_group_io* io, int64_t num_io);

}  // namespace shapejit::rt
