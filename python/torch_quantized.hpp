// Rowwise-quantized tables from PyTorch: torch.ops.shapejit.quantized_embedding_bag (all four
// results over 8/4/2-bit packed rows) and rowwise_prepack / rowwise_unpack (torch's
// embedding_bag_{byte,4bit,2bit}_prepack and _unpack). python/shapejit/quantized.py puts
// torch's signatures on top.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include "python/torch_bag_inputs.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {

/// One call over packed rows of `bits` bits: the tensors its arguments point into, and the
/// arguments. `op` names the operator in messages; dim (when given) is D, else the row width's.
struct QuantizedCall {
  at::Tensor table, mapping;
  BagInputs in;
  shapejit_embedding_bag_ex_args ex;
};
QuantizedCall quantized_call(const char* op, const at::Tensor& weight, int64_t bits, const at::Tensor& indices,
                             const c10::optional<at::Tensor>& offsets, int64_t mode,
                             const c10::optional<at::Tensor>& per_sample_weights, c10::optional<int64_t> padding_idx,
                             bool include_last_offset, const c10::optional<at::Tensor>& compressed_indices_mapping,
                             bool offsets_as_lengths, c10::optional<at::ScalarType> output_dtype,
                             c10::optional<int64_t> dim);

/// Registers quantized_embedding_bag, rowwise_prepack and rowwise_unpack in the shapejit library.
void register_quantized(torch::Library& m);

}  // namespace shapejit::torch_ext
