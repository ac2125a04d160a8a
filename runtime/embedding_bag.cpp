// validate -> kernel key -> cache -> bag partition -> kernel. The reference runs only for the
// scalar ISA and for the opt-in ATen partial-final-offset quirk (which no kernel reproduces).
#include "runtime/embedding_bag.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "jit/embag_kernel.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/isa_select.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/partition.hpp"
#include "runtime/validate.hpp"

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

jit::EmbagKey make_key(const shapejit_embedding_bag_args& a, jit::Isa isa) {
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

jit::EmbagKernelArgs make_kernel_args(const shapejit_embedding_bag_args& a, void* output, void* offset2bag,
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
  return k;
}

}  // namespace

void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  const shapejit_embedding_bag_shapes shapes = validate_embedding_bag(args);
  validate_embedding_bag_outputs(shapes, output, offset2bag, bag_size, max_indices);

  const jit::Isa isa = selected_isa();
  if (isa == jit::Isa::kScalar || uses_partial_final_offset(args)) {
    ref::embedding_bag(args, output, offset2bag, bag_size, max_indices);
    return;
  }
  const jit::EmbagKey key = make_key(args, isa);
  const EmbagKernelHandle kernel = embag_kernel_cache().get(key);

  if (args.mode == SHAPEJIT_SUM) {  // sum reports zeros here; kernels leave these untouched
    const size_t bytes = key.index_out() == DType::kI32 ? 4 : 8;
    if (bag_size) std::memset(bag_size, 0, size_t(shapes.bag_size_len) * bytes);
    if (max_indices) std::memset(max_indices, 0, size_t(shapes.max_indices_rows) * bytes);
  }
  const jit::EmbagKernelArgs base = make_kernel_args(args, output, offset2bag, bag_size, max_indices);
  const OffsetsView offsets{args.offsets, static_cast<DType>(args.offset_dtype), args.num_offsets};
  parallel_for_bags(offsets, shapes.output_rows, args.num_indices, args.dim, [&](int64_t begin, int64_t end) {
    jit::EmbagKernelArgs chunk = base;
    chunk.bag_begin = begin;
    chunk.bag_end = end;
    kernel(chunk);
  });
}

}  // namespace shapejit::rt
