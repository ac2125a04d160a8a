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
namespace {

// Runs one step of a call before its kernels. When it throws and the plan left its index range
// check to the run, a bad index is reported instead: validation, which checks the indices
// before these steps, would have found it first.
template <class Step>
decltype(auto) indices_first(const EmbagCallPlan& plan, Step&& step) {
  try {
    return step();
  } catch (...) {
    if (plan.index_range_deferred) check_indices(plan);
    throw;
  }
}

}  // namespace

void run_embedding_bag(const EmbagCallPlan& plan, void* output, void* offset2bag, void* bag_size,
                       void* max_indices) {
  indices_first(plan, [&] { validate_embedding_bag_outputs(plan, output, offset2bag, bag_size, max_indices); });

  const jit::Isa isa = selected_isa();
  if (isa == jit::Isa::kScalar || plan.partial_final_offset) {
    if (plan.index_range_deferred) check_indices(plan);
    ref::embedding_bag(plan.args, output, offset2bag, bag_size, max_indices);
    return;
  }
  const EmbagKernelHandle kernel = indices_first(plan, [&] { return embag_kernel_for(plan, isa); });
  BagSchedule schedule =
      indices_first(plan, [&] { return BagSchedule(plan.offsets, plan.num_bags, plan.num_indices, plan.dim); });
  // From here on nothing allocates but oneTBB, whose failures the schedule absorbs. A deferred
  // index check runs in the kernels' region, before any of them (one fork for both).
  const jit::EmbagKernelArgs base = make_embag_kernel_args(plan, output, offset2bag, bag_size, max_indices);
  const bool indices_ok = schedule.run(
      plan.index_range_deferred ? index_check_end(plan) : 0,
      [&](int64_t begin, int64_t end) { return indices_in_range(plan, begin, end); },
      [&](int64_t begin, int64_t end) {
        if (begin == base.bag_begin && end == base.bag_end) return kernel(base);  // one chunk: no copy
        jit::EmbagKernelArgs chunk = base;
        chunk.bag_begin = begin;
        chunk.bag_end = end;
        kernel(chunk);
      });
  if (!indices_ok) {  // no output written: the serial check names the first bad index
    check_indices(plan);
    throw Error(Status::kInternalError, "embedding_bag: a part of the indices failed its range check, the whole passed");
  }
  zero_sum_mode_counts(plan, bag_size, max_indices);
  fill_unbagged_positions(plan, offset2bag);
  // Test hook (jit/generated_code_observer.hpp): one atomic load per call when none is set.
  if (!kernel.generic() && plan.num_bags > 0)
    jit::notify_generated_code(jit::GeneratedCodeEvent::kRun, kernel.key().isa);
}

void run_embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  run_embedding_bag(plan_embedding_bag(args, IndexRangeCheck::kByRunner), output, offset2bag, bag_size, max_indices);
}

void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  run_embedding_bag(plan_embedding_bag(args, IndexRangeCheck::kByRunner), output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
