// From a call's plan to its kernel key and kernel arguments (one place, used by the API path and
// by the tests and fuzzers that drive kernels directly).
#pragma once

#include "jit/embag_kernel.hpp"
#include "runtime/embag/embag_call_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

template <class Key>
class KernelHandle;  // runtime/engine/kernel_cache.hpp
using EmbagKernelHandle = KernelHandle<jit::EmbagKey>;

/// The key the API runs a planned call with on `isa`. Where no generator applies (an ISA
/// without one, rows wider than jit::kMaxGeneratedEmbagDim, or a key
/// jit::embag_key_unsupported_reason refuses, e.g. a table dtype not generated yet) it is the
/// generic kernel's key: isa kScalar, the call's dim. So a dtype switches to JIT code as soon
/// as the generators accept its keys. Its prefetch distance and head-of-row flag are
/// embag_prefetch's (runtime/embag/prefetch_policy.hpp).
jit::EmbagKey make_embag_key(const EmbagCallPlan& plan, jit::Isa isa);

/// make_embag_key in two steps: the key the call asks for (every field from the plan and `isa`)
/// and the key that serves it (the generic kernel's where no generator applies; a function of
/// the key alone).
jit::EmbagKey wanted_embag_key(const EmbagCallPlan& plan, jit::Isa isa);
jit::EmbagKey resolve_embag_key(const jit::EmbagKey& wanted);

/// The kernel of make_embag_key(plan, isa) from the process cache, the calling thread's last
/// lookup remembered (EmbagKernelCache::get_remembered): what the API runs a planned call with.
EmbagKernelHandle embag_kernel_for(const EmbagCallPlan& plan, jit::Isa isa);


/// Kernel arguments for every bag [0, B) of a planned call, writing into the given outputs
/// (offsets are the plan's spans; mapping is set for pruned tables).
jit::EmbagKernelArgs make_embag_kernel_args(const EmbagCallPlan& plan, void* output, void* offset2bag,
                                            void* bag_size, void* max_indices);

/// Sum mode reports zeros in bag_size and max_indices, which kernels never write: fills them.
void zero_sum_mode_counts(const EmbagCallPlan& plan, void* bag_size, void* max_indices);

/// Positions no bag takes (lengths that stop before N) are reported in offset2bag as bag B;
/// kernels write only their bags' positions. Call after the kernels.
void fill_unbagged_positions(const EmbagCallPlan& plan, void* offset2bag);

// Plain f32-style calls (tests written before the plan): validate the call into a plan first.
jit::EmbagKey make_embag_key(const shapejit_embedding_bag_args& args, jit::Isa isa);
jit::EmbagKernelArgs make_embag_kernel_args(const shapejit_embedding_bag_args& args, void* output,
                                            void* offset2bag, void* bag_size, void* max_indices);
void zero_sum_mode_counts(const shapejit_embedding_bag_args& args, void* bag_size, void* max_indices);

}  // namespace shapejit::rt
