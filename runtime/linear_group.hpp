// The object behind a linear-group handle and the one path every create and run takes:
// validate, build (copy the weights), run. Shared by the C++ API and the C ABI.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/linear_group_pack.hpp"
#include "runtime/validate_linear_group.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// One built part for the reference path (ISAs without a GEMM generator): its own dense copy
/// of its weight rows and bias slice, and its epilogue.
struct LinearGroupPart {
  std::vector<float> weight;  ///< [n, k], dense
  std::vector<float> bias;    ///< empty (no bias) or n values
  shapejit_activation activation = SHAPEJIT_ACTIVATION_NONE;
  float scale = 1.0f;
};

}  // namespace shapejit::rt

/// The C handle's definition: what validation checks runs against, and either the JIT's packed
/// panels (`packed.parts` non-empty) or dense copies for the reference path.
struct shapejit_linear_group {
  uint64_t serial = 0;  ///< unique per group for the process's lifetime (never an address's reuse)
  std::vector<shapejit::rt::LinearPartShape> shapes;
  shapejit::rt::PackedGroup packed;
  std::vector<shapejit::rt::LinearGroupPart> parts;
};

namespace shapejit::rt {

/// Validates `desc` and builds a group owning copies of its weights and bias (throws Error).
std::unique_ptr<shapejit_linear_group> create_linear_group(const shapejit_linear_group_desc& desc);

/// Validates the whole run, then computes every part (throws Error before writing anything).
void run_linear_group(const shapejit_linear_group& group, const shapejit_linear_group_io* io, int64_t num_io);

}  // namespace shapejit::rt
