// The embedding-bag C ABI: argument null checks, then the same path as the C++ API. Every
// entry validates its call once (into a plan) and runs that plan.
#include "ref/embedding_bag.hpp"
#include "runtime/embag/embag_prepared.hpp"
#include "runtime/embag/embedding_bag.hpp"
#include "runtime/engine/last_error.hpp"
#include "runtime/embag/validate.hpp"

using shapejit::Error;
using shapejit::Status;

namespace {
void require_args(const void* p, const char* name) {
  if (!p) throw Error(Status::kInvalidArgument, std::string(name) + " must not be null");
}
}  // namespace

extern "C" {

shapejit_status shapejit_embedding_bag_output_shapes(const shapejit_embedding_bag_args* args,
                                                     shapejit_embedding_bag_shapes* shapes) {
  return shapejit::rt::guarded([&] {
    require_args(args, "args");
    require_args(shapes, "shapes");
    *shapes = shapejit::rt::plan_embedding_bag(*args).shapes;
  });
}

shapejit_status shapejit_embedding_bag(const shapejit_embedding_bag_args* args, void* output,
                                       void* offset2bag, void* bag_size, void* max_indices) {
  return shapejit::rt::guarded([&] {
    require_args(args, "args");
    shapejit::rt::run_embedding_bag(*args, output, offset2bag, bag_size, max_indices);
  });
}

void shapejit_embedding_bag_ex_init(shapejit_embedding_bag_ex_args* args, const shapejit_embedding_bag_args* call) {
  if (!args) return;
  const shapejit_embedding_bag_args none{};
  *args = shapejit::ref::embedding_bag_ex_defaults(call ? *call : none);
}

shapejit_status shapejit_embedding_bag_ex_output_shapes(const shapejit_embedding_bag_ex_args* args,
                                                        shapejit_embedding_bag_shapes* shapes) {
  return shapejit::rt::guarded([&] {
    require_args(args, "args");
    require_args(shapes, "shapes");
    *shapes = shapejit::rt::plan_embedding_bag(shapejit::rt::complete_ex_args(*args)).shapes;
  });
}

shapejit_status shapejit_embedding_bag_ex(const shapejit_embedding_bag_ex_args* args, void* output,
                                          void* offset2bag, void* bag_size, void* max_indices) {
  return shapejit::rt::guarded([&] {
    require_args(args, "args");
    shapejit::rt::run_embedding_bag(shapejit::rt::complete_ex_args(*args), output, offset2bag, bag_size,
                                    max_indices);
  });
}

shapejit_status shapejit_embedding_bag_prepare(const shapejit_embedding_bag_ex_args* form,
                                               shapejit_embedding_bag_prepared** out) {
  return shapejit::rt::guarded([&] {
    require_args(form, "form");
    require_args(out, "out");
    *out = new shapejit_embedding_bag_prepared{shapejit::rt::EmbagPrepared(shapejit::rt::complete_ex_args(*form))};
  });
}

shapejit_status shapejit_embedding_bag_prepared_output_shapes(const shapejit_embedding_bag_prepared* prepared,
                                                              const shapejit_embedding_bag_batch* batch,
                                                              shapejit_embedding_bag_shapes* shapes) {
  return shapejit::rt::guarded([&] {
    require_args(prepared, "prepared");
    require_args(batch, "batch");
    require_args(shapes, "shapes");
    *shapes = prepared->prepared.plan(*batch, shapejit::rt::IndexRangeCheck::kInPlan).shapes;
  });
}

shapejit_status shapejit_embedding_bag_prepared_run(const shapejit_embedding_bag_prepared* prepared,
                                                    const shapejit_embedding_bag_batch* batch, void* output,
                                                    void* offset2bag, void* bag_size, void* max_indices) {
  return shapejit::rt::guarded([&] {
    require_args(prepared, "prepared");
    require_args(batch, "batch");
    prepared->prepared.run(*batch, output, offset2bag, bag_size, max_indices);
  });
}

shapejit_status shapejit_embedding_bag_prepared_destroy(shapejit_embedding_bag_prepared* prepared) {
  return shapejit::rt::guarded([&] { delete prepared; });
}

shapejit_status shapejit_embedding_bags(const shapejit_embedding_bag_ex_args* const* calls,
                                       const shapejit_embedding_bag_outputs* outputs, int64_t count) {
  return shapejit::rt::guarded([&] { shapejit::rt::run_embedding_bags(calls, outputs, count); });
}

}  // extern "C"
