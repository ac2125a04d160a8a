// The one path every embedding-bag call takes: validate once into a plan, choose the
// implementation, run. Entry points that must size their outputs between validation and the
// run (the C++ allocating overload, the PyTorch op) plan first and then run the plan.
#pragma once

#include "runtime/embag_call_plan.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Runs a planned call (runtime/validate.hpp, plan_embedding_bag): checks the output buffers
/// against the plan (null, alignment, overlap), then computes all four outputs. Nothing is
/// validated twice. Throws shapejit::Error.
void run_embedding_bag(const EmbagCallPlan& plan, void* output, void* offset2bag, void* bag_size,
                       void* max_indices);

/// Validates a complete extended call (validate.hpp, complete_ex_args), then runs it.
void run_embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices);

/// Validates a plain call (extended with the ex_init defaults), then runs it.
void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices);

}  // namespace shapejit::rt
