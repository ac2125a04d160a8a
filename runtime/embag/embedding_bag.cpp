// plan -> kernel key -> cache -> bag schedule -> kernel, for one call or a group of calls run as
// one (one validation pass over all of them, one parallel region). The reference runs only for
// the scalar ISA and for the opt-in ATen partial-final-offset quirk (which no kernel reproduces).
// Everything the call allocates (the plan's spans, the kernel, the schedule, the engine arena)
// is in hand before its first write, so running out of memory leaves every output as the
// caller passed it.
#include "runtime/embag/embedding_bag.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "jit/embag_kernel.hpp"
#include "jit/generated_code_observer.hpp"
#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/embag_prepared.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/engine/kernel_cache.hpp"
#include "runtime/engine/partition.hpp"
#include "runtime/embag/validate.hpp"

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

// The calls that no kernel runs.
bool runs_reference(const EmbagCallPlan& plan, jit::Isa isa) {
  return isa == jit::Isa::kScalar || plan.partial_final_offset;
}

// A kernel on bags [begin, end) of a call whose whole range `base` describes.
void run_kernel(const EmbagKernelHandle& kernel, const jit::EmbagKernelArgs& base, int64_t begin, int64_t end) {
  if (begin == base.bag_begin && end == base.bag_end) return kernel(base);  // one chunk: no copy
  jit::EmbagKernelArgs chunk = base;
  chunk.bag_begin = begin;
  chunk.bag_end = end;
  kernel(chunk);
}

// What the kernels leave to the runtime, once they ran.
void finish_kernel_call(const EmbagCallPlan& plan, const EmbagKernelHandle& kernel, const EmbagOutputs& out) {
  zero_sum_mode_counts(plan, out.bag_size, out.max_indices);
  fill_unbagged_positions(plan, out.offset2bag);
  // Test hook (jit/generated_code_observer.hpp): one atomic load per call when none is set.
  if (!kernel.generic() && plan.num_bags > 0)
    jit::notify_generated_code(jit::GeneratedCodeEvent::kRun, kernel.key().isa);
}

}  // namespace

namespace {

// A planned call whose outputs passed their rules, on `kernel`.
void run_on_kernel(const EmbagCallPlan& plan, const EmbagKernelHandle& kernel, const EmbagOutputs& out) {
  BagSchedule schedule =
      indices_first(plan, [&] { return BagSchedule(plan.offsets, plan.num_bags, plan.num_indices, plan.dim); });
  // From here on nothing allocates but oneTBB, whose failures the schedule absorbs. A deferred
  // index check runs in the kernels' region, before any of them (one fork for both).
  const jit::EmbagKernelArgs base =
      make_embag_kernel_args(plan, out.output, out.offset2bag, out.bag_size, out.max_indices);
  const bool indices_ok = schedule.run(
      plan.index_range_deferred ? index_check_end(plan) : 0,
      [&](int64_t begin, int64_t end) { return indices_in_range(plan, begin, end); },
      [&](int64_t begin, int64_t end) { run_kernel(kernel, base, begin, end); });
  if (!indices_ok) {  // no output written: the serial check names the first bad index
    check_indices(plan);
    throw Error(Status::kInternalError, "embedding_bag: a part of the indices failed its range check, the whole passed");
  }
  finish_kernel_call(plan, kernel, out);
}

// run_embedding_bag's body, with the kernel looked up on `isa` or, for a prepared call, bound.
void run_planned(const EmbagCallPlan& plan, jit::Isa isa, const EmbagKernelHandle* bound, void* output,
                 void* offset2bag, void* bag_size, void* max_indices, OutputRules rules) {
  if (rules == OutputRules::kCheck)
    indices_first(plan, [&] { validate_embedding_bag_outputs(plan, output, offset2bag, bag_size, max_indices); });
  if (runs_reference(plan, isa)) {
    if (plan.index_range_deferred) check_indices(plan);
    ref::embedding_bag(plan.args, output, offset2bag, bag_size, max_indices);
    return;
  }
  const EmbagOutputs out{output, offset2bag, bag_size, max_indices};
  // A prepared call's handle is used where it lives (a handle carries its whole key).
  if (bound) return run_on_kernel(plan, *bound, out);
  run_on_kernel(plan, indices_first(plan, [&] { return embag_kernel_for(plan, isa); }), out);
}

}  // namespace

void run_embedding_bag(const EmbagCallPlan& plan, void* output, void* offset2bag, void* bag_size,
                       void* max_indices) {
  run_planned(plan, selected_isa(), nullptr, output, offset2bag, bag_size, max_indices, OutputRules::kCheck);
}

void run_embedding_bag(const EmbagCallPlan& plan, jit::Isa isa, const EmbagKernelHandle& kernel, void* output,
                       void* offset2bag, void* bag_size, void* max_indices, OutputRules rules) {
  run_planned(plan, isa, &kernel, output, offset2bag, bag_size, max_indices, rules);
}

namespace {

// Runs a step of a group's call k; an Error it throws names the call: "embedding_bags:
// calls[k]: " and the single call's message without its own "embedding_bag: ".
template <class Step>
decltype(auto) for_call(size_t k, Step&& step) {
  try {
    return step();
  } catch (const Error& e) {
    static constexpr char kOwn[] = "embedding_bag: ";
    const char* rule = e.what();
    if (std::strncmp(rule, kOwn, sizeof kOwn - 1) == 0) rule += sizeof kOwn - 1;
    throw Error(e.status(), "embedding_bags: calls[" + std::to_string(k) + "]: " + rule);
  }
}

void check_group_sizes(size_t calls, size_t outputs) {
  if (calls != outputs)
    throw Error(Status::kInvalidArgument, "embedding_bags: " + std::to_string(calls) + " calls but " +
                                              std::to_string(outputs) + " sets of outputs (one per call)");
}

// How a group's call will run, next to its plan.
struct GroupRun {
  bool reference = false;
  ref::EmbagScratch scratch;  // when reference: allocated before the group writes anything
  EmbagKernelHandle kernel;   // when not reference
  jit::EmbagKernelArgs base{};
};

}  // namespace

void run_embedding_bags(std::span<const EmbagCallPlan> plans, std::span<const EmbagOutputs> outputs) {
  check_group_sizes(plans.size(), outputs.size());
  std::vector<GroupRun> runs(plans.size());
  // As for one call, a bad index is what the group reports when a later step fails too: the
  // deferred checks, in call order.
  const auto check_all_indices = [&] {
    for (size_t k = 0; k < plans.size(); ++k)
      if (plans[k].index_range_deferred) for_call(k, [&] { check_indices(plans[k]); });
  };
  const auto group_indices_first = [&](auto&& step) {
    try {
      return step();
    } catch (...) {
      check_all_indices();
      throw;
    }
  };
  const jit::Isa isa = selected_isa();
  std::vector<GroupMember> members(plans.size());
  group_indices_first([&] {
    for (size_t k = 0; k < plans.size(); ++k) {
      const EmbagOutputs& o = outputs[k];
      for_call(k, [&] { validate_embedding_bag_outputs(plans[k], o.output, o.offset2bag, o.bag_size, o.max_indices); });
    }
    validate_group_outputs(plans, outputs);
    for (size_t k = 0; k < plans.size(); ++k) {
      const EmbagCallPlan& p = plans[k];
      const EmbagOutputs& o = outputs[k];
      runs[k].reference = runs_reference(p, isa);
      if (runs[k].reference) {
        // Checked here, as one reference call is, before its scratch (a row of D) is allocated:
        // a call with bad indices must not get to allocate for a D it never had the outputs for.
        if (p.index_range_deferred) for_call(k, [&] { check_indices(p); });
        runs[k].scratch = ref::embedding_bag_scratch(p.args);
      } else {
        runs[k].kernel = for_call(k, [&] { return embag_kernel_for(p, isa); });
        runs[k].base = make_embag_kernel_args(p, o.output, o.offset2bag, o.bag_size, o.max_indices);
      }
      // A call the reference runs is checked already and has no bags in the region.
      members[k] = {p.offsets, runs[k].reference ? 0 : p.num_bags, p.num_indices, p.dim,
                    !runs[k].reference && p.index_range_deferred ? index_check_end(p) : 0};
    }
  });
  GroupSchedule schedule = group_indices_first([&] { return GroupSchedule(members); });
  // From here on nothing allocates but oneTBB, whose failures the schedule absorbs.
  const bool indices_ok = schedule.run(
      [&](size_t k, int64_t begin, int64_t end) { return indices_in_range(plans[k], begin, end); },
      [&](size_t k, int64_t begin, int64_t end) { run_kernel(runs[k].kernel, runs[k].base, begin, end); });
  if (!indices_ok) {  // nothing written: the serial checks name the first bad index
    check_all_indices();
    throw Error(Status::kInternalError, "embedding_bags: a part of the indices failed its range check, the whole passed");
  }
  for (size_t k = 0; k < plans.size(); ++k) {
    const EmbagOutputs& o = outputs[k];
    if (runs[k].reference)
      ref::embedding_bag(plans[k].args, o.output, o.offset2bag, o.bag_size, o.max_indices, runs[k].scratch);
    else finish_kernel_call(plans[k], runs[k].kernel, o);
  }
}

// One-shot calls run as batches of their forms, which the thread remembers (embag_prepared.hpp).
void run_embedding_bag(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  run_embedding_bag_remembering(args, output, offset2bag, bag_size, max_indices);
}

void run_embedding_bag(const shapejit_embedding_bag_args& args, void* output, void* offset2bag,
                       void* bag_size, void* max_indices) {
  run_embedding_bag_remembering(ref::embedding_bag_ex_defaults(args), output, offset2bag, bag_size, max_indices);
}

void run_embedding_bags(std::span<const shapejit_embedding_bag_ex_args> calls, std::span<const EmbagOutputs> outputs) {
  check_group_sizes(calls.size(), outputs.size());
  std::vector<EmbagCallPlan> plans(calls.size());
  for (size_t k = 0; k < calls.size(); ++k) plans[k] = plan_group_call(calls[k], k);
  run_embedding_bags(plans, outputs);
}

EmbagCallPlan plan_group_call(const shapejit_embedding_bag_ex_args& call, size_t k) {
  return for_call(k, [&] { return plan_embedding_bag(call, IndexRangeCheck::kByRunner); });
}

void run_embedding_bags(const shapejit_embedding_bag_ex_args* const* calls, const shapejit_embedding_bag_outputs* outputs,
                        int64_t count) {
  if (count < 0) throw Error(Status::kInvalidArgument, "embedding_bags: count = " + std::to_string(count) + " is negative");
  if (count > 0 && (!calls || !outputs))
    throw Error(Status::kInvalidArgument, std::string("embedding_bags: ") + (!calls ? "calls" : "outputs") +
                                              " is null but count = " + std::to_string(count));
  std::vector<shapejit_embedding_bag_ex_args> complete(static_cast<size_t>(count));
  for (size_t k = 0; k < complete.size(); ++k) {
    if (!calls[k]) throw Error(Status::kInvalidArgument, "embedding_bags: calls[" + std::to_string(k) + "] is null");
    complete[k] = for_call(k, [&] { return complete_ex_args(*calls[k]); });
  }
  run_embedding_bags(complete, std::span<const EmbagOutputs>(outputs, complete.size()));
}

}  // namespace shapejit::rt
