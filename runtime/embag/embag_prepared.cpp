#include "runtime/embag/embag_prepared.hpp"

#include <array>
#include <cstring>
#include <optional>

#include "runtime/embag/embag_kernel_call.hpp"
#include "runtime/embag/embedding_bag.hpp"
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

void EmbagPrepared::run(const shapejit_embedding_bag_batch& batch, void* output, void* offset2bag, void* bag_size,
                        void* max_indices) const {
  run_embedding_bag(plan(batch, IndexRangeCheck::kByRunner), isa_, kernel_, output, offset2bag, bag_size,
                    max_indices);
}

namespace {

// How many forms a thread remembers: enough for a few tables called in turn (a number chosen,
// not tuned; a miss costs what every call cost before: the form's rules, key and lookup).
constexpr size_t kRememberedForms = 4;

// A call's form as the thread's memory compares it: the args with the batch's fields cleared and
// the weights' pointer reduced to whether there are weights. Compared bytewise: padding bytes
// the caller's struct carried can only make two equal forms differ (a miss), never two
// different forms equal.
shapejit_embedding_bag_ex_args form_key(const shapejit_embedding_bag_ex_args& args) {
  static const float kWeightsPresent = 0.0f;
  shapejit_embedding_bag_ex_args key;
  std::memcpy(&key, &args, sizeof key);
  put_batch(key.call, {nullptr, 0, nullptr, 0, args.call.per_sample_weights ? &kWeightsPresent : nullptr});
  return key;
}

struct RememberedForm {
  shapejit_embedding_bag_ex_args key{};
  jit::Isa isa = jit::Isa::kScalar;
  std::optional<EmbagPrepared> prepared;  // engaged once the slot holds a form
};

struct RecentForms {
  std::array<RememberedForm, kRememberedForms> slots;
  size_t next = 0;  // the slot the next new form replaces (round robin)
};
thread_local RecentForms t_recent_forms;

}  // namespace

void run_embedding_bag_remembering(const shapejit_embedding_bag_ex_args& args, void* output, void* offset2bag,
                                   void* bag_size, void* max_indices) {
  const shapejit_embedding_bag_ex_args key = form_key(args);
  const shapejit_embedding_bag_batch batch = batch_of(args.call);
  const jit::Isa isa = selected_isa();
  RecentForms& recent = t_recent_forms;
  for (const RememberedForm& slot : recent.slots) {
    if (!slot.prepared || slot.isa != isa || std::memcmp(&slot.key, &key, sizeof key) != 0) continue;
    if (isa != jit::Isa::kScalar) embag_kernel_cache().count_remembered(slot.prepared->kernel());
    return slot.prepared->run(batch, output, offset2bag, bag_size, max_indices);
  }
  // A new form: its rules checked here, so a call breaking one gets the whole call's message.
  EmbagPrepared prepared(args, isa);
  if (isa != jit::Isa::kScalar && EmbagKernelCache::bound_fallback(prepared.kernel()))
    return prepared.run(batch, output, offset2bag, bag_size, max_indices);
  RememberedForm& slot = recent.slots[recent.next];
  recent.next = (recent.next + 1) % kRememberedForms;
  slot.prepared.reset();  // the key below must never describe another slot's form
  std::memcpy(&slot.key, &key, sizeof key);  // bytewise, padding included, as it is compared
  slot.isa = isa;
  slot.prepared.emplace(std::move(prepared));
  slot.prepared->run(batch, output, offset2bag, bag_size, max_indices);
}

}  // namespace shapejit::rt
