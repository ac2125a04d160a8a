// From a call's plan to its kernel key and kernel arguments (one place, used by the API path and
// by the tests and fuzzers that drive kernels directly).
#pragma once

#include "jit/embag_kernel.hpp"
#include "runtime/embag_call_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

class EmbagKernelHandle;  // runtime/kernel_cache.hpp

/// The key the API runs a planned call with on `isa`. Where no generator applies (an ISA
/// without one, rows wider than jit::kMaxGeneratedEmbagDim, or a key
/// jit::embag_key_unsupported_reason refuses, e.g. a table dtype not generated yet) it is the
/// generic kernel's key: isa kScalar, the call's dim. So a dtype switches to JIT code as soon
/// as the generators accept its keys. The prefetch distance follows the table: none for a table
/// within half the core's L2 (rows stay cached), else per host class and, on AVX-512, whether
/// the table fits L3 (uncached_prefetch_distance); SHAPEJIT_PREFETCH_DISTANCE fixes it for
/// every call.
jit::EmbagKey make_embag_key(const EmbagCallPlan& plan, jit::Isa isa);

/// make_embag_key in two steps: the key the call asks for (every field from the plan and `isa`)
/// and the key that serves it (the generic kernel's where no generator applies; a function of
/// the key alone).
jit::EmbagKey wanted_embag_key(const EmbagCallPlan& plan, jit::Isa isa);
jit::EmbagKey resolve_embag_key(const jit::EmbagKey& wanted);

/// The kernel of make_embag_key(plan, isa) from the process cache, the calling thread's last
/// lookup remembered (EmbagKernelCache::get_remembered): what the API runs a planned call with.
EmbagKernelHandle embag_kernel_for(const EmbagCallPlan& plan, jit::Isa isa);

/// Bytes of the core's private (L2) cache as the prefetch rule reads it (512 KiB where the
/// system does not say).
int64_t private_cache_bytes();

/// Bytes of the last-level (L3) cache the core shares, from sysfs where Linux gives it (32 MiB
/// where the system does not say).
int64_t last_level_cache_bytes();

/// The software prefetch distance, in indices, of a kernel on `isa` reading rows of
/// `row_bytes` (values and trailer) from a table of `num_rows` rows `row_stride_bytes` apart that
/// does not stay in the private cache: about 6 KiB of rows ahead within [6, 16] on AVX2; on
/// AVX-512 about 8 KiB within [6, 16] for a table within half of L3 and 16 KiB within [6, 32]
/// beyond it; 16 on NEON. The benchmark's limit loops prefetch by it as well.
int uncached_prefetch_distance(jit::Isa isa, int64_t row_bytes, int64_t num_rows, int64_t row_stride_bytes);

/// Whether prefetching only the head of each row pays on `isa` for a table of `num_rows` rows
/// `row_stride_bytes` apart (f32 sum and mean rows; EmbagKey::prefetch_head): on AVX2 always, on
/// AVX-512 for a table within half of L3, elsewhere never. The benchmark's limit loops follow it.
bool row_head_prefetch_pays(jit::Isa isa, int64_t num_rows, int64_t row_stride_bytes);

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
