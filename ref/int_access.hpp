// Reading and writing the int32/int64 tensors of the C ABI by dtype (scalar code only).
#pragma once

#include <cstdint>

#include "shapejit/shapejit.h"

namespace shapejit::ref {

/// Element i of an int32 or int64 array.
inline int64_t load_int(const void* data, shapejit_dtype dtype, int64_t i) {
  return dtype == SHAPEJIT_I32 ? static_cast<const int32_t*>(data)[i]
                               : static_cast<const int64_t*>(data)[i];
}

/// Stores v (known to fit) as element i of an int32 or int64 array.
inline void store_int(void* data, shapejit_dtype dtype, int64_t i, int64_t v) {
  if (dtype == SHAPEJIT_I32)
    static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
  else
    static_cast<int64_t*>(data)[i] = v;
}

}  // namespace shapejit::ref
