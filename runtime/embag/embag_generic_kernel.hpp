// The generic embedding-bag kernel: portable C++ with EmbagKernelFn's contract that reads D from
// EmbagKernelArgs::dim. It runs keys with dim == 0, the scalar ISA, keys no generator takes yet
// (jit::embag_key_unsupported_reason), and new shapes once the JIT code bound is reached.
// Bitwise equal to ref::embedding_bag (same operations, same order) for every table dtype.
#pragma once

#include "jit/embag_kernel.hpp"

namespace shapejit::rt {

/// The generic kernel for the key's table, mode, weighting, padding, pruning, output and weight
/// dtypes and index/offset types (key.dim, key.isa and key.prefetch are ignored). Throws
/// Error(kUnsupported) for a dtype that is no table dtype, kInvalidArgument for index types
/// other than int32/int64 or an output/weight dtype the table does not allow.
jit::EmbagKernelFn generic_embag_kernel(const jit::EmbagKey& key);

}  // namespace shapejit::rt
