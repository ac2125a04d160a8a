// Engine-wide settings seen from PyTorch: the thread count the engine follows, and the
// torch.ops.shapejit.* queries behind shapejit.__version__, isa(), kernel_cache_stats() and
// get/set_num_threads() (torch_engine.cpp).
#pragma once

#include <torch/library.h>

namespace shapejit::torch_ext {

/// Called by every op before it runs the engine: unless shapejit.set_num_threads(n > 0) chose a
/// count explicitly, the engine's arena follows torch.get_num_threads() (resized only when that
/// changes, so the common case is one comparison).
void follow_torch_threads();

/// Registers version(), isa(), kernel_cache_stats(), get_num_threads() and set_num_threads().
void register_engine_ops(torch::Library& m);

}  // namespace shapejit::torch_ext
