// torch.classes.shapejit.LinearGroup and torch.ops.shapejit.linear_group_run.
#pragma once

#include <torch/library.h>

namespace shapejit::torch_ext {

/// Registers the LinearGroup class and the linear_group_run operator in the shapejit library.
void register_linear_group(torch::Library& m);

}  // namespace shapejit::torch_ext
