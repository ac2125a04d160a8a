// plan -> kernel key -> cache -> bag schedule -> kernel. The reference runs only for the scalar
// ISA and for the opt-in ATen partial-final-offset quirk (which no kernel reproduces).
// Everything the call allocates (the plan's spans, the kernel, the schedule, the engine arena)
// is in hand before its first write, so running out of memory leaves every output as the
// caller passed it.
#include "runtime/embedding_bag.hpp"

#include "jit/embag_kernel.hpp"
#include "jit/generated_code_observer.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag_kernel_call.hpp"
#include "runtime/isa_select.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/partition.hpp"
#include "runtime/validate.hpp"

namespace shapejit::rt {

void run_embedding_bag(const EmbagCallPlan& plan, void* output, void* offset2bag, void* bag_size,
                       void* max_indices) {
  validate_embedding_bag_outputs(plan, output, offset2bag, bag_size, max_indices);

  const jit::Isa isa = selected_isa();
  if (isa == jit::Isa::kScalar || plan.partial_final_offset) {
    ref::embedding_bag(plan.args, output, offset2bag, bag_size, max_indices);
    return;
  }
  const EmbagKernelHandle kernel = embag_kernel_for(plan, isa);
  BagSchedule schedule(plan.offsets, plan.num_bags, plan.num_indices, plan.dim);
  // From here on nothing allocates but oneTBB, whose failures the schedule absorbs.
  zero_sum_mode_counts(plan, bag_size, max_indices);
  const jit::EmbagKernelArgs base = make_embag_kernel_args(plan, output, offset2bag, bag_size, max_indices);
  schedule.run([&](int64_t begin, int64_t end) {
    if (begin == base.bag_begin && end == base.bag_end) return kernel(base);  // one chunk: no copy
    jit::EmbagKernelArgs chunk = base;
    chunk.bag_begin = begin;
    chunk.bag_end = end;
    kernel(chunk);
  });
  fill_unbagged_positions(plan, offset2bag);
  // Test hook (jit/generated_code_observer.hpp): one atomic load per call when none is set.
  if (!kernel.generic() && plan.num_bags > 0)
    jit::notify_generated_code(jit::GeneratedCodeEvent::kRun, kernel.key().isa);
}

void run_embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  run_embedding_bag(plan_embedding_bag(args), output, offset2bag, bag_size, max_indices);
}

void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  run_embedding_bag(plan_embedding_bag(args), output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
