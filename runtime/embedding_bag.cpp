// validate -> kernel key -> cache -> bag partition -> kernel. The reference runs only for the
// scalar ISA and for the opt-in ATen partial-final-offset quirk (which no kernel reproduces).
#include "runtime/embedding_bag.hpp"

#include "jit/embag_kernel.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag_kernel_call.hpp"
#include "runtime/isa_select.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/partition.hpp"
#include "runtime/validate.hpp"

namespace shapejit::rt {

void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  const shapejit_embedding_bag_shapes shapes = validate_embedding_bag(args);
  validate_embedding_bag_outputs(shapes, output, offset2bag, bag_size, max_indices);

  const jit::Isa isa = selected_isa();
  if (isa == jit::Isa::kScalar || uses_partial_final_offset(args)) {
    ref::embedding_bag(args, output, offset2bag, bag_size, max_indices);
    return;
  }
  const EmbagKernelHandle kernel = embag_kernel_cache().get(make_embag_key(args, isa));
  zero_sum_mode_counts(args, bag_size, max_indices);
  const jit::EmbagKernelArgs base = make_embag_kernel_args(args, output, offset2bag, bag_size, max_indices);
  const OffsetsView offsets{args.offsets, static_cast<DType>(args.offset_dtype), args.num_offsets};
  parallel_for_bags(offsets, shapes.output_rows, args.num_indices, args.dim, [&](int64_t begin, int64_t end) {
    jit::EmbagKernelArgs chunk = base;
    chunk.bag_begin = begin;
    chunk.bag_end = end;
    kernel(chunk);
  });
}

}  // namespace shapejit::rt
