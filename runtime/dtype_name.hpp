// The name every error message gives a shapejit_dtype value.
#pragma once

#include <cstdint>

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// "float32", "float16", "bfloat16", "int32", "int64", "q8", "q4", "q2", or "unknown" for a value
/// outside the enum (callers print the value next to it).
constexpr const char* dtype_name(int64_t t) {
  switch (t) {
    case SHAPEJIT_F32: return "float32";
    case SHAPEJIT_F16: return "float16";
    case SHAPEJIT_BF16: return "bfloat16";
    case SHAPEJIT_I32: return "int32";
    case SHAPEJIT_I64: return "int64";
    case SHAPEJIT_Q8: return "q8";
    case SHAPEJIT_Q4: return "q4";
    case SHAPEJIT_Q2: return "q2";
  }
  return "unknown";
}

}  // namespace shapejit::rt
