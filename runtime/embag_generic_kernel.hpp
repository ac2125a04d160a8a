// The generic embedding-bag kernel: portable C++ with EmbagKernelFn's contract that reads D from
// EmbagKernelArgs::dim. It runs keys with dim == 0, the scalar ISA, and new shapes once the JIT
// code bound is reached. Bitwise equal to ref::embedding_bag (same operations, same order).
#pragma once

#include "jit/embag_kernel.hpp"

namespace shapejit::rt {

/// The generic kernel for the key's mode, weighting, padding and index/offset/output types
/// (key.dim and key.prefetch are ignored). Throws Error(kUnsupported) for tables other than f32.
jit::EmbagKernelFn generic_embag_kernel(const jit::EmbagKey& key);

}  // namespace shapejit::rt
