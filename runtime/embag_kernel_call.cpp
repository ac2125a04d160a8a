// From a planned call to what a kernel is specialised on and what it receives: the one
// translation the API path, the differential tests and the fuzzers share.
#include "runtime/embag_kernel_call.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "jit/embag_plan.hpp"
#include "ref/int_access.hpp"
#include "runtime/validate.hpp"

namespace shapejit::rt {
namespace {

constexpr int kPrefetchDistance = 16;  // indices ahead, measured best on Zen 2 and Zen 5

/// SHAPEJIT_PREFETCH_DISTANCE (0..1024) when set (tuning on another machine), else -1: the
/// distance then follows the table (prefetch_distance).
int prefetch_override() {
  static const int distance = [] {
    const char* text = std::getenv("SHAPEJIT_PREFETCH_DISTANCE");
    if (!text || !*text) return -1;
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*end != '\0' || v < 0 || v > 1024) {
      std::fprintf(stderr, "shapejit: ignoring SHAPEJIT_PREFETCH_DISTANCE=%s (want 0..1024)\n", text);
      return -1;
    }
    return int(v);
  }();
  return distance;
}

/// Software prefetch only pays for rows that come from beyond the core's private cache: a table
/// that fits in half of L2 (the rest holds indices, outputs and the caller's data) stays there
/// across calls, and there the prefetch's index load, multiply and clamp per row cost more than
/// they hide (about 1.5x on a hot D=16 table on Zen 2), and they rule out two bags in flight
/// (jit/embag_plan.hpp, embag_pairs_bags). At a table of the whole L2 size prefetch won again.
int prefetch_distance(const EmbagCallPlan& p) {
  if (const int forced = prefetch_override(); forced >= 0) return forced;
  // rows * stride <= budget, by division: a declared extent near 2^63 bytes must not overflow.
  const int64_t budget = private_cache_bytes() / 2;
  const bool cached = p.row_stride_bytes <= 0 || p.num_rows <= budget / p.row_stride_bytes;
  return cached ? 0 : kPrefetchDistance;
}

// The ISAs that have an embedding-bag generator; others run the generic kernel.
bool has_embag_generator(jit::Isa isa) {
  return isa == jit::Isa::kAvx512 || isa == jit::Isa::kAvx2 || isa == jit::Isa::kNeon;
}

size_t index_out_bytes(const EmbagCallPlan& p) { return p.index_out == DType::kI32 ? 4 : 8; }

}  // namespace

int64_t private_cache_bytes() {
  static const int64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? int64_t(l2) : int64_t(512) << 10;
  }();
  return bytes;
}

jit::EmbagKey make_embag_key(const EmbagCallPlan& p, jit::Isa isa) {
  jit::EmbagKey key;
  key.isa = isa;
  key.table = p.table;
  key.dim = p.dim;
  key.mode = p.mode;
  key.weighted = p.weighted;
  key.padding = p.padding;
  key.out = p.out;
  key.psw = p.weighted ? p.psw : DType::kF32;  // canonical when there are no weights
  key.pruned = p.pruned;
  key.index = p.index;
  key.offset = p.offset;
  key.prefetch = prefetch_distance(p);
  // Rows wider than any generator takes (valid calls, e.g. with no bags), dim 0, and keys the
  // generators refuse run the generic kernel.
  if (!has_embag_generator(isa) || jit::embag_key_unsupported_reason(key)) key.isa = jit::Isa::kScalar;
  return key;
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
  k.per_sample_weights = p.weighted ? a.per_sample_weights : nullptr;
  k.padding_idx = p.padding_index;
  k.bag_begin = 0;
  k.bag_end = p.num_bags;
  k.output = output;
  k.mapping = p.pruned ? p.mapping : nullptr;
  k.offset2bag = offset2bag;
  k.bag_size = bag_size;
  k.max_indices = max_indices;
  return k;
}

void zero_sum_mode_counts(const EmbagCallPlan& p, void* bag_size, void* max_indices) {
  if (p.mode != Mode::kSum) return;
  if (bag_size) std::memset(bag_size, 0, size_t(p.shapes.bag_size_len) * index_out_bytes(p));
  if (max_indices) std::memset(max_indices, 0, size_t(p.shapes.max_indices_rows) * index_out_bytes(p));
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
