// Rowwise-quantized tables from PyTorch: torch.ops.shapejit.quantized_embedding_bag (all four
// results over 8/4/2-bit packed rows) and rowwise_prepack / rowwise_unpack (torch's
// embedding_bag_{byte,4bit,2bit}_prepack and _unpack). python/shapejit/quantized.py puts
// torch's signatures on top.
#pragma once

#include <torch/library.h>

namespace shapejit::torch_ext {

/// Registers quantized_embedding_bag, rowwise_prepack and rowwise_unpack in the shapejit library.
void register_quantized(torch::Library& m);

}  // namespace shapejit::torch_ext
