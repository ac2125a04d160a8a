// The name every error message gives a shapejit_dtype value (jit::kDtypeTraits' names).
#pragma once

#include <cstdint>

#include "jit/dtype_traits.hpp"

namespace shapejit::rt {

/// "float32", "float16", "bfloat16", "int32", "int64", "q8", "q4", "q2", or "unknown" for a value
/// outside the enum (callers print the value next to it).
constexpr const char* dtype_name(int64_t t) {
  const jit::DtypeTraits* d = jit::find_dtype_traits(t);
  return d ? d->name : "unknown";
}

}  // namespace shapejit::rt
