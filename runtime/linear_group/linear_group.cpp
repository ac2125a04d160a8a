// Linear groups: building (validate, pack weights and compile kernels) and running (validate,
// compute) behind both the C++ API and the C ABI. ISAs with a GEMM generator run the packed JIT
// path; the others (scalar) run the scalar reference.
#include "runtime/linear_group/linear_group.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ref/linear_group.hpp"
#include "ref/linear_group_quant.hpp"
#include "runtime/engine/c_enum.hpp"
#include "runtime/engine/engine_stats.hpp"
#include "runtime/engine/isa_select.hpp"
#include "runtime/linear_group/linear_group_exec.hpp"
#include "runtime/linear_group/linear_group_input_quant.hpp"
#include "runtime/linear_group/linear_weight_quant.hpp"
#include "runtime/linear_group/validate_linear_group.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

// Validation of a run is a pure function of the group's plan (fixed at create) and the io
// entries. So each thread remembers its last run that passed: a run repeating it exactly (same
// group, same pointers, sizes and strides: the steady state of a model calling a layer on the
// same buffers) passes again, and is not checked again; it costs a 64-byte compare per part
// instead. Keyed by the group's serial, as a later group may reuse a destroyed one's address.
struct LastValidRun {
  static constexpr int64_t kMaxParts = 8;
  uint64_t serial = 0;  // 0: none (serials start at 1)
  int64_t num_io = 0;
  std::array<shapejit_linear_group_io, kMaxParts> io;
};
static_assert(sizeof(shapejit_linear_group_io) == 64 &&
                  std::has_unique_object_representations_v<shapejit_linear_group_io>,
              "io entries are compared byte for byte: no padding");

thread_local LastValidRun t_last_valid_run;
std::atomic<uint64_t> g_next_serial{1};

void validate_run(const shapejit_linear_group& group, const shapejit_linear_group_io* io, int64_t num_io) {
  LastValidRun& last = t_last_valid_run;
  if (io && last.serial == group.serial && last.num_io == num_io &&
      std::memcmp(last.io.data(), io, size_t(num_io) * sizeof *io) == 0)
    return;
  validate_linear_group_run(group.plan.parts, io, num_io);
  if (num_io > LastValidRun::kMaxParts) return;
  last.serial = group.serial;
  last.num_io = num_io;
  std::memcpy(last.io.data(), io, size_t(num_io) * sizeof *io);
}

// Packs for the JIT; false (and `why`) when the ISA has no GEMM generator or the shape is beyond
// it (pack_linear_group's kUnsupported).
bool try_pack(shapejit_linear_group& group, std::string& why) {
  try {
    group.packed = pack_linear_group(group.plan.parts, group.plan.isa, group.plan.quant);
  } catch (const Error& e) {
    if (e.status() != Status::kUnsupported) throw;
    why = e.what();
    return false;
  }
  return true;
}

// The reference path's own dense copy of every part's f32 weight rows (none for a quantized
// form: the plan owns its codes) and bias, which the plan's parts then point into, so a run
// never looks at the caller's memory again.
void copy_for_reference(shapejit_linear_group& group) {
  size_t floats = 0;
  for (const LinearPartPlan& part : group.plan.parts)
    floats += (part.weight ? size_t(part.n * part.k) : 0) + (part.bias ? size_t(part.n) : 0);
  group.copies.resize(floats);
  float* next = group.copies.data();
  for (LinearPartPlan& part : group.plan.parts) {
    if (part.weight) {
      for (int64_t r = 0; r < part.n; ++r)
        std::copy_n(part.weight + r * part.ldw, part.k, next + r * part.k);
      part.weight = next;
      part.ldw = part.k;
      next += part.n * part.k;
    }
    if (!part.bias) continue;
    std::copy_n(part.bias, part.n, next);
    part.bias = next;
    next += part.n;
  }
}

// The packed panels hold the weights (or codes) and biases: neither the caller's pointers nor
// the plan's codes are kept.
void drop_caller_pointers(LinearGroupPlan& plan) {
  for (LinearPartPlan& part : plan.parts) {
    part.weight = part.bias = part.wscale = nullptr;
    part.codes = nullptr;
  }
  plan.codes = {};
  plan.scales = {};
}

// One part of the reference path and its run arguments, as the reference takes them.
ref::LinearPartView reference_view(const LinearPartPlan& part, const shapejit_linear_group_io& io) {
  ref::LinearPartView v;
  v.x = io.x;
  v.m = io.m;
  v.k = part.k;
  v.ldx = io.ldx;
  v.w = part.weight;
  v.n = part.n;
  v.ldw = part.ldw;
  v.bias = part.bias;
  v.activation = part.activation;
  v.scale = part.scale;
  v.layout = part.layout;
  v.heads = part.heads;
  v.batch = io.batch;
  v.y = io.y;
  v.ldy = io.ldy;
  return v;
}

// A quantized part of the reference path: its codes, and for qd8 the run's quantized rows (the
// same rows the kernels would read, so the integer parts are the engine's).
ref::QuantPartView reference_quant_view(const LinearGroupPlan& plan, size_t p, const shapejit_linear_group_io& io,
                                        std::span<const QuantizedInput> quantized) {
  ref::QuantPartView v;
  v.f = reference_view(plan.parts[p], io);
  v.quant = plan.quant;
  v.codes = plan.parts[p].codes;
  v.ldc = plan.parts[p].ldc;
  v.wscale = plan.parts[p].wscale;
  if (!quantized.empty()) {
    v.xu = quantized[p].u;
    v.ldu = quantized[p].ldu;
    v.x_scale = quantized[p].scale;
    v.x_zero = quantized[p].zero;
  }
  return v;
}

}  // namespace

std::unique_ptr<shapejit_linear_group> create_linear_group(const shapejit_linear_group_desc& desc) {
  shapejit_linear_group_ex_desc ex{};
  ex.struct_size = sizeof ex;
  ex.group = desc;
  ex.quant = SHAPEJIT_LINEAR_F32;
  return create_linear_group(ex);
}

std::unique_ptr<shapejit_linear_group> create_linear_group(const shapejit_linear_group_ex_desc& desc) {
  auto group = std::make_unique<shapejit_linear_group>();
  group->plan = plan_linear_group(desc, selected_isa());
  group->serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  std::string why;
  if (try_pack(*group, why)) {
    drop_caller_pointers(group->plan);
    return group;
  }
  copy_for_reference(*group);
  note_reference_linear_group(why);  // counted in the stats, said under SHAPEJIT_VERBOSE
  return group;
}

void quantize_linear_weights_checked(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k,
                                     int64_t stride, int8_t* codes, float* scales) {
  validate_quantize_weights_args(quant, w, rows, k, stride, codes, scales);
  quantize_weight_rows(quant, w, rows, k, stride, codes, scales);
}

void run_linear_group(const shapejit_linear_group& group, const shapejit_linear_group_io* io, int64_t num_io) {
  validate_run(group, io, num_io);
  const std::span<const shapejit_linear_group_io> ios(io, size_t(num_io));
  // qd8: every distinct input quantized once, before any output is written (a non-finite row
  // throws here), for the kernels and the reference alike.
  std::span<const QuantizedInput> quantized;
  if (linear_quantized_input(group.plan.quant)) quantized = quantize_run_inputs(ios, group.packed.signed_input);
  if (!group.packed.parts.empty()) {
    run_packed_group(group.packed, ios, {}, quantized);
    return;
  }
  for (size_t p = 0; p < group.plan.parts.size(); ++p) {
    if (group.plan.quant == SHAPEJIT_LINEAR_F32)
      ref::linear_part(reference_view(group.plan.parts[p], io[p]));
    else
      ref::quant_linear_part(reference_quant_view(group.plan, p, io[p], quantized));
  }
}

}  // namespace shapejit::rt

// ---- The C++ API -------------------------------------------------------------------------
namespace shapejit {

shapejit_linear_part_desc LinearPart::to_c(WeightForm form) const {
  shapejit_linear_part_desc d{};
  d.row_begin = row_begin;
  d.rows = rows;
  d.weight = weight;
  d.k = k;
  d.weight_stride = form == WeightForm::kSeparate && weight_stride == 0 ? k : weight_stride;
  rt::set_c_enum(d.activation, activation);  // any int reaches validation, without UB
  d.has_scale = scale != 1.0f;
  d.scale = scale;
  rt::set_c_enum(d.layout, layout);
  d.heads = heads;
  return d;
}

LinearGroupDesc LinearGroupDesc::packed(const float* weight, int64_t rows, int64_t k, std::span<const float> bias,
                                        std::vector<LinearPart> parts) {
  LinearGroupDesc d;
  d.form = WeightForm::kPacked;
  d.weight = weight;
  d.weight_rows = rows;
  d.k = k;
  d.bias = bias;
  d.parts = std::move(parts);
  return d;
}

LinearGroupDesc LinearGroupDesc::separate(std::vector<LinearPart> parts, std::span<const float> bias) {
  LinearGroupDesc d;
  d.form = WeightForm::kSeparate;
  d.bias = bias;
  d.parts = std::move(parts);
  return d;
}

LinearGroup::LinearGroup(const LinearGroupDesc& desc) {
  std::vector<shapejit_linear_part_desc> parts;
  parts.reserve(desc.parts.size());
  for (const LinearPart& p : desc.parts) parts.push_back(p.to_c(desc.form));
  std::vector<shapejit_linear_weight_codes> codes;
  codes.reserve(desc.codes.size());
  for (size_t i = 0; i < desc.codes.size(); ++i) {
    const LinearWeightCodes& c = desc.codes[i];
    // A stride of 0 means dense rows of the entry's k (the packed k, or part i's).
    int64_t k = desc.k;
    if (desc.form == WeightForm::kSeparate && i < desc.parts.size()) k = desc.parts[i].k;
    codes.push_back({c.codes, c.stride == 0 ? k : c.stride, c.scales});
  }
  shapejit_linear_group_desc c{};
  rt::set_c_enum(c.form, desc.form);
  c.weight = desc.weight;
  c.weight_rows = desc.weight_rows;
  c.k = desc.k;
  c.weight_stride = desc.form == WeightForm::kPacked && desc.weight_stride == 0 ? desc.k : desc.weight_stride;
  c.bias = desc.bias.empty() ? nullptr : desc.bias.data();
  c.bias_len = int64_t(desc.bias.size());
  c.parts = parts.data();
  c.num_parts = int64_t(parts.size());
  shapejit_linear_group_ex_desc ex{};
  ex.struct_size = sizeof ex;
  ex.group = c;
  rt::set_c_enum(ex.quant, desc.quant);
  ex.codes = codes.empty() ? nullptr : codes.data();
  ex.num_codes = int64_t(codes.size());
  group_ = rt::create_linear_group(ex).release();
}

void quantize_linear_weights(LinearQuant quant, const float* w, int64_t rows, int64_t k, int64_t stride,
                             int8_t* codes, float* scales) {
  shapejit_linear_quant q{};
  rt::set_c_enum(q, quant);
  rt::quantize_linear_weights_checked(q, w, rows, k, stride == 0 ? k : stride, codes, scales);
}

LinearGroup::LinearGroup(LinearGroup&& other) noexcept : group_(std::exchange(other.group_, nullptr)) {}

LinearGroup& LinearGroup::operator=(LinearGroup&& other) noexcept {
  if (this != &other) {
    delete group_;
    group_ = std::exchange(other.group_, nullptr);
  }
  return *this;
}

LinearGroup::~LinearGroup() { delete group_; }

int64_t LinearGroup::num_parts() const { return group_ ? int64_t(group_->plan.parts.size()) : 0; }

void LinearGroup::run(std::span<const LinearInput> inputs, std::span<const LinearOutput> outputs) const {
  if (!group_) throw Error(Status::kInvalidArgument, "linear_group: run on a moved-from LinearGroup");
  const int64_t parts = num_parts();
  if (int64_t(inputs.size()) != parts || int64_t(outputs.size()) != parts)
    throw Error(Status::kInvalidArgument, "linear_group: inputs.size() = " + std::to_string(inputs.size()) +
                                              " and outputs.size() = " + std::to_string(outputs.size()) +
                                              " must both equal the group's " + std::to_string(parts) + " parts");
  // A stack array for the usual few parts: a heap allocation shows in the tiny cases.
  constexpr size_t kInlineParts = 8;
  std::array<shapejit_linear_group_io, kInlineParts> inline_io;
  std::vector<shapejit_linear_group_io> heap_io;
  shapejit_linear_group_io* io = inline_io.data();
  if (size_t(parts) > kInlineParts) {
    heap_io.resize(size_t(parts));
    io = heap_io.data();
  }
  for (size_t p = 0; p < size_t(parts); ++p) {
    const rt::LinearPartPlan& part = group_->plan.parts[p];
    const LinearInput& in = inputs[p];
    const LinearOutput& out = outputs[p];
    io[p] = {in.x, in.m, in.k, in.ldx == 0 ? in.k : in.ldx, out.y, out.ldy == 0 ? part.n : out.ldy, out.batch,
             out.seq_len};
  }
  rt::run_linear_group(*group_, io, parts);
}

}  // namespace shapejit
