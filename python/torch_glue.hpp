// Shared helpers of the PyTorch extension: shapejit statuses as PyTorch errors, dtype mapping.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>

#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {

/// Turns a failed shapejit call into the PyTorch error Python sees: NotImplementedError for
/// what the engine does not support yet, RuntimeError (as ATen raises) for everything else.
[[noreturn]] inline void raise_failure(shapejit_status status, const char* detail, const char* what) {
  const std::string message = std::string("shapejit.") + what + ": " + detail;
  TORCH_CHECK_NOT_IMPLEMENTED(status != SHAPEJIT_UNSUPPORTED, message);
  TORCH_CHECK(false, message);
}

/// The same for a status of the C ABI, whose message is the thread's last error.
inline void check_status(shapejit_status status, const char* what) {
  if (status != SHAPEJIT_OK) raise_failure(status, shapejit_last_error(), what);
}

/// The shapejit dtype of a tensor's dtype, or an error naming the argument and its dtype.
inline shapejit_dtype to_shapejit_dtype(at::ScalarType type, const char* name) {
  switch (type) {
    case at::kFloat: return SHAPEJIT_F32;
    case at::kHalf: return SHAPEJIT_F16;
    case at::kBFloat16: return SHAPEJIT_BF16;
    case at::kInt: return SHAPEJIT_I32;
    case at::kLong: return SHAPEJIT_I64;
    default: break;
  }
  TORCH_CHECK(false, "shapejit: ", name, " has dtype ", type,
              ", but shapejit takes float32, float16, bfloat16, int32 or int64 tensors");
}

inline shapejit_dtype to_shapejit_dtype(const at::Tensor& t, const char* name) {
  return to_shapejit_dtype(t.scalar_type(), name);
}

/// The shapejit dtype of a floating-point tensor (a table, weights, an output), or an error naming
/// `op`, the argument and its dtype.
inline shapejit_dtype to_float_dtype(const at::Tensor& t, const char* name, const char* op) {
  const at::ScalarType type = t.scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kHalf || type == at::kBFloat16, op, ": ", name, " must be float32, "
              "float16 or bfloat16, but got ", type);
  return to_shapejit_dtype(type, name);
}

/// The PyTorch dtype of a shapejit dtype.
inline at::ScalarType to_scalar_type(shapejit_dtype t) {
  switch (t) {
    case SHAPEJIT_F32: return at::kFloat;
    case SHAPEJIT_F16: return at::kHalf;
    case SHAPEJIT_BF16: return at::kBFloat16;
    case SHAPEJIT_I32: return at::kInt;
    case SHAPEJIT_I64: return at::kLong;
    case SHAPEJIT_Q8:
    case SHAPEJIT_Q4:
    case SHAPEJIT_Q2: break;  // packed rows, held as uint8 tensors of row bytes
  }
  TORCH_CHECK(false, "shapejit: no tensor dtype holds shapejit dtype ", int(t));
}

/// Every tensor shapejit reads lives in host memory.
inline void check_cpu(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), "shapejit: ", name, " must be a CPU tensor, but is on ", t.device());
}

}  // namespace shapejit::torch_ext
