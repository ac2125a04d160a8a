// The one path every embedding-bag call takes: validate, choose the implementation, run.
#pragma once

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Validates the call (before touching any output), then computes all four outputs.
/// Throws shapejit::Error on invalid input.
void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices);

}  // namespace shapejit::rt
