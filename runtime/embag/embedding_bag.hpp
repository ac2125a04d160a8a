// The one path every embedding-bag call takes: validate once into a plan, choose the
// implementation, run. Entry points that must size their outputs between validation and the
// run (the C++ allocating overload, the PyTorch op) plan first and then run the plan.
#pragma once

#include <span>

#include "jit/isa.hpp"
#include "runtime/embag/embag_call_plan.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Runs a planned call (runtime/embag/validate.hpp, plan_embedding_bag): checks the output buffers
/// against the plan (null, alignment, overlap), then computes all four outputs. Nothing is
/// validated twice. Throws shapejit::Error.
void run_embedding_bag(const EmbagCallPlan& plan, void* output, void* offset2bag, void* bag_size,
                       void* max_indices);

/// Whether a run tests its output buffers' rules (kCheck) or knows they pass: a prepared call
/// whose outputs and inputs are those of its last batch that passed (embag_prepared.cpp).
enum class OutputRules { kCheck, kPassed };

/// The same with the kernel already chosen (a prepared call, runtime/embag/embag_prepared.hpp):
/// `kernel` is embag_kernel_for(plan, isa) of a plan of the same form, not looked up again.
void run_embedding_bag(const EmbagCallPlan& plan, jit::Isa isa, const EmbagKernelHandle& kernel, void* output,
                       void* offset2bag, void* bag_size, void* max_indices, OutputRules rules = OutputRules::kCheck);

/// Validates a complete extended call (validate.hpp, complete_ex_args), then runs it: as a
/// batch of its form, which the thread remembers (embag_prepared.hpp,
/// run_embedding_bag_remembering), so a repeated form skips its rules, key and lookup.
void run_embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices);

/// Validates a plain call (extended with the ex_init defaults), then runs it (as above).
void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices);

/// Runs complete extended calls (complete_ex_args) as one, outputs[k] being call k's buffers:
/// every call validated and every index checked before any output of any call is written, the
/// buffer rule applied across the calls too (validate_group_outputs), then every call's bags in
/// one schedule (GroupSchedule). Each call's outputs are bitwise those of running it alone. An
/// Error names the call: "embedding_bags: calls[k]: ...".
void run_embedding_bags(std::span<const shapejit_embedding_bag_ex_args> calls, std::span<const EmbagOutputs> outputs);

/// Call k of a group, planned for run_embedding_bags (its index check left to the group's run);
/// an Error names the call. For entry points that size the outputs from the plans first.
EmbagCallPlan plan_group_call(const shapejit_embedding_bag_ex_args& call, size_t k);

/// Runs planned calls (plan_group_call) as one: the group form of run_embedding_bag(plan, ...).
void run_embedding_bags(std::span<const EmbagCallPlan> plans, std::span<const EmbagOutputs> outputs);

/// The C ABI's form: count caller structs, each of its own struct_size (complete_ex_args), and
/// their outputs; null arrays (count > 0), null entries and a negative count are rejected.
void run_embedding_bags(const shapejit_embedding_bag_ex_args* const* calls, const shapejit_embedding_bag_outputs* outputs,
                        int64_t count);

}  // namespace shapejit::rt
