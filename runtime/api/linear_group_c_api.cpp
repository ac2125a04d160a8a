// The linear-group C ABI: null checks on the handles, then the same path as the C++ API;
// runtime/engine/last_error.hpp's guarded() turns exceptions into statuses and the thread's message.
#include <string>

#include "runtime/engine/last_error.hpp"
#include "runtime/linear_group/linear_group.hpp"

using shapejit::Error;
using shapejit::Status;

namespace {
void require(const void* p, const char* name) {
  if (!p) throw Error(Status::kInvalidArgument, std::string("linear_group: ") + name + " must not be NULL");
}
}  // namespace

extern "C" {

shapejit_status shapejit_linear_group_create(const shapejit_linear_group_desc* desc, shapejit_linear_group** out) {
  return shapejit::rt::guarded([&] {
    require(desc, "desc");
    require(out, "out");
    *out = shapejit::rt::create_linear_group(*desc).release();
  });
}

void shapejit_linear_group_ex_init(shapejit_linear_group_ex_desc* desc, const shapejit_linear_group_desc* group) {
  if (!desc) return;
  const shapejit_linear_group_desc copy = group ? *group : shapejit_linear_group_desc{};  // group may alias desc->group
  *desc = shapejit_linear_group_ex_desc{};
  desc->struct_size = sizeof *desc;
  desc->group = copy;
  desc->quant = SHAPEJIT_LINEAR_F32;
}

shapejit_status shapejit_linear_group_create_ex(const shapejit_linear_group_ex_desc* desc,
                                                shapejit_linear_group** out) {
  return shapejit::rt::guarded([&] {
    require(desc, "desc");
    require(out, "out");
    *out = shapejit::rt::create_linear_group(*desc).release();
  });
}

shapejit_status shapejit_linear_quantize_weights(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k,
                                                 int64_t stride, int8_t* codes, float* scales) {
  return shapejit::rt::guarded(
      [&] { shapejit::rt::quantize_linear_weights_checked(quant, w, rows, k, stride, codes, scales); });
}

shapejit_status shapejit_linear_group_run(const shapejit_linear_group* group, const shapejit_linear_group_io* io,
                                          int64_t num_io) {
  return shapejit::rt::guarded([&] {
    require(group, "group");
    shapejit::rt::run_linear_group(*group, io, num_io);
  });
}

shapejit_status shapejit_linear_group_destroy(shapejit_linear_group* group) {
  return shapejit::rt::guarded([&] { delete group; });
}

}  // extern "C"
