// Rowwise prepack and unpack behind the C ABI and the C++ API (runtime/api/rowwise_api.cpp): every
// argument is checked before the first byte is written, then ref/rowwise_quantize.hpp runs per
// row. Throws shapejit::Error naming the argument, its value and the rule.
#pragma once

#include <cstdint>

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Bytes of one packed row of `dim` values of `qtype` (Q8, Q4 or Q2; any dim >= 0 whose row size
/// fits int64). `caller` prefixes the error message.
int64_t rowwise_row_bytes_checked(const char* caller, int64_t qtype, int64_t dim);

/// A prepack call whose arguments passed every rule that does not involve dst.
struct PrepackPlan {
  bool f16;                 ///< src is f16 (widened exactly), else f32
  int64_t row_bytes;        ///< bytes of one packed row
  int64_t dst_bytes;        ///< rows * row_bytes, what dst must hold
  int64_t src_bytes;        ///< bytes from src's first value to its last one (0 when none is read)
};
/// Checks everything but dst (which the C++ API allocates from the plan).
PrepackPlan plan_rowwise_prepack(const shapejit_rowwise_prepack_args& args);
/// Checks dst against the plan (not null when bytes are due, no overlap with src), then packs
/// args.rows rows into it. With optimized_qparams every row's search runs before anything is
/// written, so a row the search cannot finish leaves dst untouched.
void run_rowwise_prepack(const shapejit_rowwise_prepack_args& args, const PrepackPlan& plan, void* dst);

/// An unpack call whose arguments passed every rule that does not involve dst.
struct UnpackPlan {
  int64_t src_bytes;  ///< bytes from the first packed row to the end of the last one
  int64_t dst_bytes;  ///< rows * dim * 4, what dst must hold
};
/// Checks everything but dst.
UnpackPlan plan_rowwise_unpack(int64_t qtype, const void* src, int64_t rows, int64_t dim, int64_t row_bytes);
/// Checks dst against the plan (not null when bytes are due, aligned to 4, no overlap with src),
/// then dequantizes `rows` packed rows, `row_bytes` apart, to dst [rows, dim] f32.
void run_rowwise_unpack(int64_t qtype, const void* src, int64_t rows, int64_t dim, int64_t row_bytes,
                        const UnpackPlan& plan, float* dst);

}  // namespace shapejit::rt
