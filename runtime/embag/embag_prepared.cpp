#include "runtime/embag/embag_prepared.hpp"

#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/embedding_bag.hpp"
#include "runtime/engine/isa_select.hpp"

namespace shapejit::rt {

EmbagPrepared::EmbagPrepared(const shapejit_embedding_bag_ex_args& form)
    : form_(plan_embedding_bag_form(form)), isa_(selected_isa()) {
  // The key reads only the form's fields (embag_kernel_call.cpp, wanted_embag_key), so every
  // batch's plan asks for this kernel. The scalar ISA runs the reference: no kernel.
  if (isa_ != jit::Isa::kScalar) kernel_ = embag_kernel_for(form_, isa_);
}

EmbagCallPlan EmbagPrepared::plan(const shapejit_embedding_bag_batch& batch, IndexRangeCheck when) const {
  return plan_embedding_bag_batch(form_, batch, when);
}

void EmbagPrepared::run(const shapejit_embedding_bag_batch& batch, void* output, void* offset2bag, void* bag_size,
                        void* max_indices) const {
  run_embedding_bag(plan(batch, IndexRangeCheck::kByRunner), isa_, kernel_, output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
