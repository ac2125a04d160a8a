// From a validated call to what a kernel is specialised on and what it receives: the one
// translation the API path, the differential tests and the fuzzers share.
#include "runtime/embag_kernel_call.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ref/embedding_bag.hpp"

namespace shapejit::rt {
namespace {

/// Software prefetch distance (indices ahead) of the kernels the API runs: 16, or
/// SHAPEJIT_PREFETCH_DISTANCE (0..1024) for tuning on another machine.
int prefetch_distance() {
  static const int distance = [] {
    const char* text = std::getenv("SHAPEJIT_PREFETCH_DISTANCE");
    if (!text || !*text) return 16;
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    if (*end != '\0' || v < 0 || v > 1024) {
      std::fprintf(stderr, "shapejit: ignoring SHAPEJIT_PREFETCH_DISTANCE=%s (want 0..1024)\n", text);
      return 16;
    }
    return int(v);
  }();
  return distance;
}

// The ISAs that have an embedding-bag generator; others run the generic kernel.
bool has_embag_generator(jit::Isa isa) {
  return isa == jit::Isa::kAvx512 || isa == jit::Isa::kAvx2 || isa == jit::Isa::kNeon;
}

}  // namespace

jit::EmbagKey make_embag_key(const shapejit_embedding_bag_args& a, jit::Isa isa) {
  jit::EmbagKey key;
  // Rows wider than any generator takes (valid calls, e.g. with no bags) run the generic kernel.
  key.isa = has_embag_generator(isa) && a.dim <= jit::kMaxGeneratedEmbagDim ? isa : jit::Isa::kScalar;
  key.table = static_cast<DType>(a.weight_dtype);
  key.dim = a.dim;
  key.mode = static_cast<Mode>(a.mode);
  key.weighted = a.per_sample_weights != nullptr;
  key.padding = a.has_padding_idx != 0;
  key.index = static_cast<DType>(a.index_dtype);
  key.offset = static_cast<DType>(a.offset_dtype);
  key.prefetch = prefetch_distance();
  return key;
}

jit::EmbagKernelArgs make_embag_kernel_args(const shapejit_embedding_bag_args& a, void* output, void* offset2bag,
                                      void* bag_size, void* max_indices) {
  jit::EmbagKernelArgs k{};
  k.weight = a.weight;
  // Validation bounds num_rows * row_stride * 4 only; with no rows nothing is read and the
  // stride may be anything up to INT64_MAX.
  k.row_stride_bytes = a.num_rows > 0 ? a.row_stride * int64_t(sizeof(float)) : 0;
  k.dim = a.dim;
  k.indices = a.indices;
  k.offsets = a.offsets;
  k.num_offsets = a.num_offsets;
  k.num_indices = a.num_indices;
  k.per_sample_weights = static_cast<const float*>(a.per_sample_weights);
  k.padding_idx = a.has_padding_idx ? (a.padding_idx < 0 ? a.padding_idx + a.num_rows : a.padding_idx) : -1;
  k.output = static_cast<float*>(output);
  k.offset2bag = offset2bag;
  k.bag_size = bag_size;
  k.max_indices = max_indices;
  k.bag_begin = 0;
  k.bag_end = ref::embedding_bag_num_bags(a);
  return k;
}


void zero_sum_mode_counts(const shapejit_embedding_bag_args& a, void* bag_size, void* max_indices) {
  if (a.mode != SHAPEJIT_SUM) return;
  const shapejit_embedding_bag_shapes shapes = ref::embedding_bag_shapes(a);
  const size_t bytes = shapes.index_out_dtype == SHAPEJIT_I32 ? 4 : 8;
  if (bag_size) std::memset(bag_size, 0, size_t(shapes.bag_size_len) * bytes);
  if (max_indices) std::memset(max_indices, 0, size_t(shapes.max_indices_rows) * bytes);
}

}  // namespace shapejit::rt
