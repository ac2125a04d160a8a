// Scalar reference of ATen's CPU _embedding_bag forward: the executable form of
// embedding-bag-semantics.md. No SIMD, no threads; every kernel is checked against it.
#pragma once

#include <cstdint>

#include "shapejit/shapejit.h"

namespace shapejit::ref {

/// Number of bags B = len(offsets) - include_last_offset (never negative).
int64_t embedding_bag_num_bags(const shapejit_embedding_bag_args& args);

/// dtype of offset2bag, bag_size and max_indices: the common index type, int64 when they differ.
shapejit_dtype embedding_bag_index_out_dtype(const shapejit_embedding_bag_args& args);

/// Output shapes exactly as ATen's forward-only path returns them (the one place these rules live).
shapejit_embedding_bag_shapes embedding_bag_shapes(const shapejit_embedding_bag_args& args);

/// Computes all four outputs of a call that runtime/validate accepted. Outputs are dense
/// buffers of the shapes above; a zero-length output may be null.
void embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                   void* bag_size, void* max_indices);

}  // namespace shapejit::ref
