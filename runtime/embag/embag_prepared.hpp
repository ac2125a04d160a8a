// A prepared embedding bag (shapejit_embedding_bag_prepare): a call's form validated once and
// bound to its kernel, then run on batch after batch, each checked for what it brings. The
// batch's plan is the form's plan with the batch put in (validate.hpp, plan_embedding_bag_batch),
// and it runs on the one path every call takes (embedding_bag.hpp), the kernel not looked up.
// One-shot calls use the same: the thread remembers the forms of its last calls prepared
// (run_embedding_bag_remembering), so a call repeating a recent form runs as a batch of it.
// Each thread keeps its last batch's plan and the buffers that last passed the buffer rules
// (embag_prepared.cpp, LastBatch): a batch of the same form refills that plan instead of copying
// the form, and buffers equal to those (pointers and counts) skip the rules they passed.
#pragma once

#include "jit/isa.hpp"
#include "runtime/embag/embag_call_plan.hpp"
#include "runtime/embag/validate.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::rt {

/// Immutable once built: runs only read it, so threads may share one.
class EmbagPrepared {
 public:
  /// Validates a complete form (complete_ex_args; plan_embedding_bag_form) and binds the kernel
  /// of `isa` (the ISA selected now by default). Throws shapejit::Error.
  explicit EmbagPrepared(const shapejit_embedding_bag_ex_args& form);
  EmbagPrepared(const shapejit_embedding_bag_ex_args& form, jit::Isa isa);

  /// The plan of a batch, its rules checked (the index check where `when` says).
  EmbagCallPlan plan(const shapejit_embedding_bag_batch& batch, IndexRangeCheck when) const;
  /// The validated form (its batch fields unset).
  const EmbagCallPlan& form() const { return form_; }
  /// The bound kernel (none when the ISA runs the reference).
  const EmbagKernelHandle& kernel() const { return kernel_; }
  /// The ISA the form was prepared for.
  jit::Isa isa() const { return isa_; }
  /// Checks the batch and the outputs, then computes all four outputs.
  void run(const shapejit_embedding_bag_batch& batch, void* output, void* offset2bag, void* bag_size,
           void* max_indices) const;

 private:
  EmbagCallPlan form_;
  jit::Isa isa_;
  EmbagKernelHandle kernel_;  // none when isa_ runs the reference
};

/// A complete one-shot call (complete_ex_args) run as a batch of its form, prepared: the form
/// comes from the calling thread's recent forms when it is one of them (no form rules, no key,
/// no lookup: the cache counts the hit a lookup would), else it is prepared and remembered.
/// Outputs, status and message are those of run_embedding_bag(plan_embedding_bag(args), ...).
void run_embedding_bag_remembering(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                                   void* bag_size, void* max_indices);

}  // namespace shapejit::rt

/// The C ABI's opaque handle (shapejit.h), which the C++ API's PreparedEmbeddingBag holds too.
struct shapejit_embedding_bag_prepared {
  shapejit::rt::EmbagPrepared prepared;
};
