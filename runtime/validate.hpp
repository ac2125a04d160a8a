// Validation of embedding-bag calls: every rule of embedding-bag-semantics.md, in one place,
// shared by the reference and JIT paths, run before any output is written.
#pragma once

#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Checks every input rule of `args` (dtypes, sizes, byte-count overflow, alignment of the input
/// buffers, padding_idx, offsets, every index) and returns the output shapes. Throws
/// shapejit::Error naming the argument, the value and the rule (kInvalidArgument, or
/// kUnsupported for valid-but-unsupported dtypes).
shapejit_embedding_bag_shapes validate_embedding_bag(const shapejit_embedding_bag_args& args);

/// Checks the output buffers of a call that passed validate_embedding_bag: every non-empty one
/// is non-null (a zero-length output may be null) and aligned to its element size, and none
/// shares a byte with an input (the table from its first row to its last, indices, offsets,
/// per_sample_weights) or with another output.
void validate_embedding_bag_outputs(const shapejit_embedding_bag_args& args,
                                    const shapejit_embedding_bag_shapes& shapes, const void* output,
                                    const void* offset2bag, const void* bag_size, const void* max_indices);

/// True when the call uses the opt-in ATen partial-final-offset quirk (offsets[B] < N), which
/// only the reference implements.
bool uses_partial_final_offset(const shapejit_embedding_bag_args& args);

}  // namespace shapejit::rt
