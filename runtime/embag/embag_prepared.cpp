#include "runtime/embag/embag_prepared.hpp"

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/embedding_bag.hpp"
#include "runtime/engine/c_enum.hpp"
#include "runtime/engine/isa_select.hpp"

namespace shapejit::rt {

EmbagPrepared::EmbagPrepared(const shapejit_embedding_bag_ex_args& form) : EmbagPrepared(form, selected_isa()) {}

EmbagPrepared::EmbagPrepared(const shapejit_embedding_bag_ex_args& form, jit::Isa isa)
    : form_(plan_embedding_bag_form(form)), isa_(isa) {
  // The key reads only the form's fields (embag_kernel_call.cpp, wanted_embag_key), so every
  // batch's plan asks for this kernel. The scalar ISA runs the reference: no kernel.
  if (isa_ != jit::Isa::kScalar) kernel_ = embag_kernel_for(form_, isa_);
}

EmbagCallPlan EmbagPrepared::plan(const shapejit_embedding_bag_batch& batch, IndexRangeCheck when) const {
  return plan_embedding_bag_batch(form_, batch, when);
}

namespace {

// A batch's buffers as the buffer rules see them beside the form: pointers and counts (every
// byte count follows from the form and the two counts).
struct BatchBuffers {
  const void* indices;
  int64_t num_indices;
  const void* offsets;
  int64_t num_offsets;
  const void* per_sample_weights;
  const void* output;
  const void* offset2bag;
  const void* bag_size;
  const void* max_indices;
  bool operator==(const BatchBuffers&) const = default;
};

// What a thread keeps of the last batch of a form it ran, so the next batch of the same form
// costs its own rules only: the plan that batch filled (the form's copy, refilled instead of
// copied again) and the buffers that last passed the buffer rules (alignment, nulls, no output
// overlapping anything) with this form. Those rules read nothing but the form and BatchBuffers, so the same
// buffers pass again untested; their contents (offsets, indices) are checked on every batch.
// Nothing a run calls runs another prepared run on its thread, so the plan is never in use twice.
struct LastBatch {
  EmbagCallPlan plan;    // of the form plan.form_id (0 before the thread's first batch: no form's)
  bool passed = false;   // `buffers` passed the buffer rules with this form, their input ranges in `ranges`
  BatchBuffers buffers{};
  InputRanges ranges{};
};

// Storage a thread's plan keeps for the next batch (lengths-form spans, widened weights): a few
// thousand bags' or positions' worth. A larger batch's is freed after it, so no thread holds a
// large batch's memory.
constexpr size_t kKeptSpanBytes = size_t{64} << 10;

void release_large_spans(EmbagCallPlan& plan) {
  if (plan.span_storage64.capacity() * sizeof(int64_t) > kKeptSpanBytes)
    std::vector<int64_t>().swap(plan.span_storage64);
  if (plan.span_storage32.capacity() * sizeof(int32_t) > kKeptSpanBytes)
    std::vector<int32_t>().swap(plan.span_storage32);
  if (plan.wide_weights.capacity() * sizeof(float) > kKeptSpanBytes) std::vector<float>().swap(plan.wide_weights);
}

// How many forms a thread remembers (one-shot calls) and keeps the last batch of (every run):
// enough for a few tables called in turn (a number chosen, not tuned; a miss costs what every call cost
// before: the form's rules, key and lookup, or the copy of its plan and the buffer rules).
constexpr size_t kRememberedForms = 4;

// Whether two calls have the same form: every field of the args but the batch's (indices,
// offsets and their counts; of the weights only whether there are any). Field by field, each
// load as wide as the field: the args of a one-shot call were just written (the plain call's
// defaults, or the caller's struct), and a bytewise compare's 16-byte loads across those narrower
// stores stalled on store forwarding (38 % of this function's time, 1 bag x 1 index, Intel host).
// Enum fields compare as the ints the caller stored (c_enum.hpp).
bool same_form(const shapejit_embedding_bag_ex_args& a, const shapejit_embedding_bag_ex_args& b) {
  static_assert(sizeof(shapejit_embedding_bag_ex_args) == 176 && sizeof(shapejit_embedding_bag_args) == 120,
                "a field was added to the args: compare it here");
  const shapejit_embedding_bag_args &x = a.call, &y = b.call;
  return a.struct_size == b.struct_size && x.weight == y.weight &&
         c_enum_value(x.weight_dtype) == c_enum_value(y.weight_dtype) && x.num_rows == y.num_rows &&
         x.dim == y.dim && x.row_stride == y.row_stride && c_enum_value(x.index_dtype) == c_enum_value(y.index_dtype) &&
         c_enum_value(x.offset_dtype) == c_enum_value(y.offset_dtype) &&
         (x.per_sample_weights == nullptr) == (y.per_sample_weights == nullptr) &&
         c_enum_value(x.mode) == c_enum_value(y.mode) && x.has_padding_idx == y.has_padding_idx &&
         x.padding_idx == y.padding_idx && x.include_last_offset == y.include_last_offset &&
         x.aten_partial_final_offset == y.aten_partial_final_offset &&
         c_enum_value(a.output_dtype) == c_enum_value(b.output_dtype) &&
         c_enum_value(a.per_sample_weights_dtype) == c_enum_value(b.per_sample_weights_dtype) &&
         a.compressed_indices_mapping == b.compressed_indices_mapping && a.mapping_len == b.mapping_len &&
         a.offsets_as_lengths == b.offsets_as_lengths && a.skip_index_outputs == b.skip_index_outputs &&
         a.output_row_stride == b.output_row_stride && a.aten_loop_arithmetic == b.aten_loop_arithmetic;
}

struct RememberedForm {
  shapejit_embedding_bag_ex_args form{};  // the args of the call that made the slot (same_form)
  jit::Isa isa = jit::Isa::kScalar;
  std::optional<EmbagPrepared> prepared;  // engaged once the slot holds a form
};

struct RecentForms {
  std::array<RememberedForm, kRememberedForms> slots;
  size_t next = 0;  // the slot the next new form replaces (round robin)
};

// The last batches of as many forms as the thread remembers (a model's tables called in turn each
// find their own): searched by form id, the slot found last first; a new form takes the slots in
// turn. Form ids are never reused, so a slot of a form that no longer exists is simply not found.
struct LastBatches {
  std::array<LastBatch, kRememberedForms> slots;
  size_t found = 0;  // the slot the last batch used
  size_t next = 0;   // the slot the next new form takes (round robin)

  LastBatch& of(const EmbagCallPlan& form) {
    if (slots[found].plan.form_id == form.form_id) [[likely]]
      return slots[found];
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].plan.form_id == form.form_id) return slots[found = i];
    LastBatch& fresh = slots[found = next];
    next = (next + 1) % slots.size();
    fresh.passed = false;
    fresh.plan = form.copy_of_form();  // the copy, then a move that cannot fail: form_id comes whole
    return fresh;
  }
};

// Everything a thread keeps between embedding-bag calls, reached through one trivial
// thread_local pointer: one TLS access per call (thread_local objects with destructors add an
// initialisation guard's access). The owner frees it when the thread ends.
struct ThreadCalls {
  LastBatches last;
  RecentForms recent;
};
constinit thread_local ThreadCalls* t_calls = nullptr;

[[gnu::noinline]] ThreadCalls& make_thread_calls() {
  struct Owner {
    std::unique_ptr<ThreadCalls> calls;
    ~Owner() { t_calls = nullptr; }
  };
  thread_local Owner owner;
  owner.calls = std::make_unique<ThreadCalls>();
  t_calls = owner.calls.get();
  return *t_calls;
}

ThreadCalls& thread_calls() {
  if (ThreadCalls* calls = t_calls) [[likely]]
    return *calls;
  return make_thread_calls();
}

// A batch of `prepared`, its plan filled in the thread's LastBatch of its form.
[[gnu::always_inline]] inline void run_batch(const EmbagPrepared& prepared, LastBatches& batches,
                                             const shapejit_embedding_bag_batch& batch, void* output, void* offset2bag,
                                             void* bag_size, void* max_indices) {
  LastBatch& last = batches.of(prepared.form());
  const BatchBuffers buffers{batch.indices, batch.num_indices, batch.offsets, batch.num_offsets,
                             batch.per_sample_weights, output, offset2bag, bag_size, max_indices};
  const bool known = last.passed && buffers == last.buffers;
  plan_embedding_bag_batch_into(last.plan, batch, IndexRangeCheck::kByRunner, known ? &last.ranges : nullptr);
  run_embedding_bag(last.plan, prepared.isa(), prepared.kernel(), output, offset2bag, bag_size, max_indices,
                    known ? OutputRules::kPassed : OutputRules::kCheck);
  release_large_spans(last.plan);
  if (!known) {
    last.buffers = buffers;
    last.ranges = last.plan.input_ranges;
    last.passed = true;
  }
}

}  // namespace

void EmbagPrepared::run(const shapejit_embedding_bag_batch& batch, void* output, void* offset2bag, void* bag_size,
                        void* max_indices) const {
  run_batch(*this, thread_calls().last, batch, output, offset2bag, bag_size, max_indices);
}

void run_embedding_bag_remembering(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                                   void* bag_size, void* max_indices) {
  const shapejit_embedding_bag_batch batch = batch_of(args.call);
  const jit::Isa isa = selected_isa();
  ThreadCalls& calls = thread_calls();
  RecentForms& recent = calls.recent;
  for (const RememberedForm& slot : recent.slots) {
    if (!slot.prepared || slot.isa != isa || !same_form(slot.form, args)) continue;
    if (isa != jit::Isa::kScalar) embag_kernel_cache().count_remembered(slot.prepared->kernel());
    return run_batch(*slot.prepared, calls.last, batch, output, offset2bag, bag_size, max_indices);
  }
  // A new form: its rules checked here, so a call breaking one gets the whole call's message.
  EmbagPrepared prepared(args, isa);
  if (isa != jit::Isa::kScalar && EmbagKernelCache::bound_fallback(prepared.kernel()))
    return run_batch(prepared, calls.last, batch, output, offset2bag, bag_size, max_indices);
  RememberedForm& slot = recent.slots[recent.next];
  recent.next = (recent.next + 1) % kRememberedForms;
  slot.prepared.reset();  // the form below must never describe another slot's
  slot.form = args;
  slot.isa = isa;
  slot.prepared.emplace(std::move(prepared));
  run_batch(*slot.prepared, calls.last, batch, output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
