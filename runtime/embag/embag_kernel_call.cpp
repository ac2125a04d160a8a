// From a planned call to what a kernel is specialised on and what it receives: the one
// translation the API path, the differential tests and the fuzzers share.
#include "runtime/embag/embag_kernel_call.hpp"

#include <algorithm>
#include <cstring>

#include "jit/embag_plan.hpp"
#include "ref/int_access.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/embag/prefetch_policy.hpp"
#include "runtime/embag/validate.hpp"

namespace shapejit::rt {
namespace {

// The ISAs that have an embedding-bag generator (jit/isa.hpp); others run the generic kernel.
bool has_embag_generator(jit::Isa isa) { return jit::isa_traits(isa).embag_generator; }

size_t index_out_bytes(const EmbagCallPlan& p) { return p.index_out == DType::kI32 ? 4 : 8; }

// A one-bag call's single count is stored directly: a library call costs more than the store.
void zero_counts(void* counts, int64_t n, size_t element_bytes) {
  static constexpr int64_t kZero = 0;
  const size_t bytes = size_t(n) * element_bytes;
  if (bytes == sizeof(int64_t)) std::memcpy(counts, &kZero, sizeof(int64_t));
  else if (bytes == sizeof(int32_t)) std::memcpy(counts, &kZero, sizeof(int32_t));
  else std::memset(counts, 0, bytes);
}

}  // namespace

jit::EmbagKey wanted_embag_key(const EmbagCallPlan& p, jit::Isa isa) {
  jit::EmbagKey key;
  key.isa = isa;
  key.table = p.table;
  key.dim = p.dim;
  key.mode = p.mode;
  key.weighted = p.weighted;
  key.padding = p.padding;
  // Canonical: ATen's loop changes only weighted f32 sums and bf16 tables, and padding implies it.
  key.aten_loop = p.aten_loop && !p.padding && jit::EmbagKey::aten_loop_changes(p.table, p.weighted);
  key.out = p.out;
  key.psw = p.weighted ? p.kernel_psw : DType::kF32;  // canonical when there are no weights
  key.pruned = p.pruned;
  key.index = p.index;
  key.offset = p.offset;
  const EmbagPrefetch prefetch = embag_prefetch(p, isa);
  key.prefetch = prefetch.distance;
  key.prefetch_head = prefetch.row_head && jit::embag_prefetch_head_defined(key);
  // Canonical: a sum without padding writes no index output in its kernel either way.
  key.index_outputs = p.index_outputs || (p.mode == Mode::kSum && !p.padding);
  key.out_stride = p.out_row_stride == p.dim ? 0 : p.out_row_stride;  // canonical: dense rows are 0
  return key;
}

jit::EmbagKey resolve_embag_key(const jit::EmbagKey& wanted) {
  jit::EmbagKey key = wanted;
  // Rows wider than any generator takes (valid calls, e.g. with no bags), dim 0, and keys the
  // generators refuse run the generic kernel.
  if (!has_embag_generator(key.isa) || jit::embag_key_unsupported_reason(key)) key.isa = jit::Isa::kScalar;
  return key;
}

jit::EmbagKey make_embag_key(const EmbagCallPlan& p, jit::Isa isa) {
  return resolve_embag_key(wanted_embag_key(p, isa));
}

EmbagKernelHandle embag_kernel_for(const EmbagCallPlan& p, jit::Isa isa) {
  return embag_kernel_cache().get_remembered(wanted_embag_key(p, isa), resolve_embag_key);
}

jit::EmbagKernelArgs make_embag_kernel_args(const EmbagCallPlan& p, void* output, void* offset2bag, void* bag_size,
                                            void* max_indices) {
  const shapejit_embedding_bag_args& a = p.args.call;
  jit::EmbagKernelArgs k{};
  k.weight = a.weight;
  k.row_stride_bytes = p.row_stride_bytes;
  k.dim = p.dim;
  k.indices = a.indices;
  k.offsets = p.offsets.data;
  k.num_offsets = p.offsets.size;
  k.num_indices = p.num_indices;
  k.per_sample_weights = !p.weighted ? nullptr : p.kernel_psw != p.psw ? p.wide_weights.data() : a.per_sample_weights;
  k.padding_idx = p.padding_index;
  k.bag_begin = 0;
  k.bag_end = p.num_bags;
  k.output = output;
  k.output_row_stride = p.out_row_stride;
  k.mapping = p.pruned ? p.mapping : nullptr;
  // Without index outputs the kernels get none (the generic kernel tells by bag_size == null).
  k.offset2bag = p.index_outputs ? offset2bag : nullptr;
  k.bag_size = p.index_outputs ? bag_size : nullptr;
  k.max_indices = p.index_outputs ? max_indices : nullptr;
  return k;
}

void zero_sum_mode_counts(const EmbagCallPlan& p, void* bag_size, void* max_indices) {
  if (p.mode != Mode::kSum) return;
  if (bag_size) zero_counts(bag_size, p.shapes.bag_size_len, index_out_bytes(p));
  if (max_indices) zero_counts(max_indices, p.shapes.max_indices_rows, index_out_bytes(p));
}

void fill_unbagged_positions(const EmbagCallPlan& p, void* offset2bag) {
  if (p.shapes.offset2bag_len == 0) return;
  const shapejit_dtype t = static_cast<shapejit_dtype>(p.index_out);
  for (int64_t i = p.covered_end; i < p.num_indices; ++i) ref::store_int(offset2bag, t, i, p.num_bags);
}

jit::EmbagKey make_embag_key(const shapejit_embedding_bag_args& args, jit::Isa isa) {
  return make_embag_key(plan_embedding_bag(args), isa);
}

jit::EmbagKernelArgs make_embag_kernel_args(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                                            void* bag_size, void* max_indices) {
  // A plain call's spans are the caller's offsets, so the arguments outlive the plan.
  return make_embag_kernel_args(plan_embedding_bag(args), output, offset2bag, bag_size, max_indices);
}

void zero_sum_mode_counts(const shapejit_embedding_bag_args& args, void* bag_size, void* max_indices) {
  zero_sum_mode_counts(plan_embedding_bag(args), bag_size, max_indices);
}

}  // namespace shapejit::rt
