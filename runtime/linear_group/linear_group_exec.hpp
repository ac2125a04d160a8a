// Running a packed linear group: every part's tiles in one parallel region on the engine arena.
// Parts given the same input are one GEMM over their concatenated panels (the input rows stay in
// L1 while the kernels of all those parts pass over them); each output tile is computed by
// exactly one kernel call with a fixed k order, so results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/linear_group/linear_group_input_quant.hpp"
#include "runtime/linear_group/linear_group_pack.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Tuning of one run (tests force the blocked, parallel path with inline_flops = 0).
struct LinearExecOptions {
  /// Calls with fewer flops run part by part on the calling thread, without blocking; the
  /// others are blocked for the caches and run on the engine arena.
  double inline_flops = 2.0e6;
};

/// Computes every part of `group` (io holds one entry per part, as the caller passed it, already
/// validated: shapes, strides, no overlap). Parts with equal (x, m, ldx) are run as one GEMM. Runs on the calling
/// thread when the engine has one thread or the call is small; otherwise on the engine arena.
/// Both paths use the same kernels and row blocks, so the result is the same bits either way.
/// qd8 groups (group.quant) take `quantized`, one entry per part (quantize_run_inputs): the
/// kernels read those rows instead of X; the other forms take none.
void run_packed_group(const PackedGroup& group, std::span<const shapejit_linear_group_io> io,
                      const LinearExecOptions& options = {}, std::span<const QuantizedInput> quantized = {});

}  // namespace shapejit::rt
