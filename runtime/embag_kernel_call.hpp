// From a validated embedding-bag call to its kernel key and kernel arguments (one place, used by
// the API path and by the tests that drive kernels directly).
#pragma once

#include "jit/embag_kernel.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// The key the API runs a validated call with on `isa`: the generic kernel's scalar key where no
/// generator applies (ISA without one, or rows wider than jit::kMaxGeneratedEmbagDim).
jit::EmbagKey make_embag_key(const shapejit_embedding_bag_args& args, jit::Isa isa);

/// Kernel arguments for every bag [0, B) of a validated call, writing into the given outputs.
jit::EmbagKernelArgs make_embag_kernel_args(const shapejit_embedding_bag_args& args, void* output,
                                            void* offset2bag, void* bag_size, void* max_indices);

/// Sum mode reports zeros in bag_size and max_indices, which kernels never write: fills them.
void zero_sum_mode_counts(const shapejit_embedding_bag_args& args, void* bag_size, void* max_indices);

}  // namespace shapejit::rt
