// Scalar reference of the embedding-bag forward for every table dtype: the executable form of
// embedding-bag-semantics.md (f32) and quantized-tables-semantics.md (f16, bf16, rowwise 8/4/2-bit).
// No SIMD, no threads; every kernel is checked against it. It derives shapes and bags on its own
// (not from the runtime's plan), so a wrong rule there fails a test that needs no libtorch.
#pragma once

#include <cstdint>
#include <vector>

#include "shapejit/shapejit.h"

namespace shapejit::ref {

/// Number of bags B = len(offsets) - include_last_offset (never negative).
int64_t embedding_bag_num_bags(const shapejit_embedding_bag_args& args);

/// dtype of offset2bag, bag_size and max_indices: the common index type, int64 when they differ.
shapejit_dtype embedding_bag_index_out_dtype(const shapejit_embedding_bag_args& args);

/// Output shapes exactly as ATen's forward-only path returns them (the one place these rules live).
shapejit_embedding_bag_shapes embedding_bag_shapes(const shapejit_embedding_bag_args& args);
/// The same for an extended call (the shapes do not depend on the extended options).
shapejit_embedding_bag_shapes embedding_bag_shapes(const shapejit_embedding_bag_ex_args& args);

/// The extended form of a plain call: what shapejit_embedding_bag_ex_init gives (output and
/// weight dtypes from the table's, f32 for quantized tables; nothing pruned; offsets as spans).
shapejit_embedding_bag_ex_args embedding_bag_ex_defaults(const shapejit_embedding_bag_args& args);

/// Whether a call follows the arithmetic of ATen's own loop (rule 2, H6): with padding_idx, or
/// when the caller asks for it (aten_loop_arithmetic).
inline bool aten_loop_arithmetic(const shapejit_embedding_bag_ex_args& ex) {
  return ex.call.has_padding_idx != 0 || ex.aten_loop_arithmetic != 0;
}

/// Computes all four outputs of a call that runtime/validate accepted. Outputs are dense
/// buffers of the shapes above (output of the table's dtype); a zero-length output may be null.
void embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                   void* bag_size, void* max_indices);

/// The same for an extended call (output of args.output_dtype, rows args.output_row_stride
/// elements apart when that is nonzero; the gaps are not written). Its struct_size is ignored:
/// every field is read. With offsets_as_lengths, positions after the last bag (which no bag takes)
/// get offset2bag = B, as the positions after a partial final offset do.
void embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                   void* bag_size, void* max_indices);

/// The working rows of one call: a row of results, and of max's winning indices.
struct EmbagScratch {
  std::vector<float> row;
  std::vector<int64_t> winners;
};

/// The scratch `args` needs, allocated (the one allocation of a reference call).
EmbagScratch embedding_bag_scratch(const shapejit_embedding_bag_ex_args& args);

/// embedding_bag with scratch from embedding_bag_scratch(args): allocates nothing, so a caller
/// that has written other outputs already (a group of calls) cannot fail halfway.
void embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag, void* bag_size,
                   void* max_indices, EmbagScratch& scratch);

}  // namespace shapejit::ref
