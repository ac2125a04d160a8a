// Linear groups: building (validate, pack weights and compile kernels) and running (validate,
// compute) behind both the C++ API and the C ABI. ISAs with a GEMM generator run the packed JIT
// path; the others (scalar, and NEON until it has one) run the scalar reference.
#include "runtime/linear_group.hpp"

#include <array>
#include <atomic>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ref/linear_group.hpp"
#include "runtime/c_enum.hpp"
#include "runtime/engine_stats.hpp"
#include "runtime/isa_select.hpp"
#include "runtime/linear_group_exec.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

// One part's weight rows (the split of a packed weight resolved to a pointer) and epilogue.
LinearPartWeights part_weights(const shapejit_linear_group_desc& desc, int64_t p, const LinearPartShape& shape) {
  const shapejit_linear_part_desc& d = desc.parts[p];
  const bool packed = desc.form == SHAPEJIT_WEIGHTS_PACKED;
  LinearPartWeights w;
  w.weight = packed ? desc.weight + d.row_begin * desc.weight_stride : d.weight;
  w.ldw = packed ? desc.weight_stride : d.weight_stride;
  w.n = shape.n;
  w.k = shape.k;
  w.bias = desc.bias ? desc.bias + d.row_begin : nullptr;
  w.activation = d.activation;
  w.scale = d.has_scale ? d.scale : 1.0f;
  w.layout = d.layout;
  w.heads = d.layout == SHAPEJIT_LAYOUT_ROW_MAJOR ? 1 : d.heads;
  return w;
}

// Validation of a run is a pure function of the group's shapes (fixed at create) and the io
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
  validate_linear_group_run(group.shapes, io, num_io);
  if (num_io > LastValidRun::kMaxParts) return;
  last.serial = group.serial;
  last.num_io = num_io;
  std::memcpy(last.io.data(), io, size_t(num_io) * sizeof *io);
}

// Packs for the JIT; false (and `why`) when the ISA has no GEMM generator or the shape is beyond it.
bool try_pack(shapejit_linear_group& group, const shapejit_linear_group_desc& desc, std::string& why) {
  const jit::Isa isa = selected_isa();
  if (!gemm_isa_supported(isa)) {
    why = "no GEMM generator for ISA " + std::string(jit::isa_name(isa));
    return false;
  }
  std::vector<LinearPartWeights> weights;
  for (int64_t p = 0; p < desc.num_parts; ++p) weights.push_back(part_weights(desc, p, group.shapes[size_t(p)]));
  try {
    group.packed = pack_linear_group(weights, isa);
  } catch (const Error& e) {
    if (e.status() != Status::kUnsupported) throw;
    why = e.what();
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<shapejit_linear_group> create_linear_group(const shapejit_linear_group_desc& desc) {
  auto group = std::make_unique<shapejit_linear_group>();
  group->shapes = validate_linear_group_desc(desc);
  group->serial = g_next_serial.fetch_add(1, std::memory_order_relaxed);
  std::string why;
  if (try_pack(*group, desc, why)) return group;
  group->parts.resize(group->shapes.size());
  for (int64_t p = 0; p < desc.num_parts; ++p) {
    const shapejit_linear_part_desc& d = desc.parts[p];
    const LinearPartShape& shape = group->shapes[size_t(p)];
    LinearGroupPart& part = group->parts[size_t(p)];
    // The packed form's rows start at row_begin of the packed weight; the split is resolved
    // here, once, so a run never looks at the caller's weight again.
    const bool packed = desc.form == SHAPEJIT_WEIGHTS_PACKED;
    const float* w = packed ? desc.weight + d.row_begin * desc.weight_stride : d.weight;
    const int64_t ldw = packed ? desc.weight_stride : d.weight_stride;
    part.weight.resize(size_t(shape.n * shape.k));
    for (int64_t r = 0; r < shape.n; ++r)
      for (int64_t c = 0; c < shape.k; ++c) part.weight[size_t(r * shape.k + c)] = w[r * ldw + c];
    if (desc.bias) part.bias.assign(desc.bias + d.row_begin, desc.bias + d.row_begin + d.rows);
    part.activation = d.activation;
    part.scale = d.has_scale ? d.scale : 1.0f;
  }
  note_reference_linear_group(why);  // counted in the stats, said under SHAPEJIT_VERBOSE
  return group;
}

void run_linear_group(const shapejit_linear_group& group, const shapejit_linear_group_io* io, int64_t num_io) {
  validate_run(group, io, num_io);
  if (!group.packed.parts.empty()) {
    // A stack array for the usual few parts: a heap allocation shows in the tiny cases. (In a
    // union, so its elements are not initialized before being written: that shows too.)
    constexpr size_t kInlineParts = 8;
    union InlineIo {
      InlineIo() {}
      LinearPartIo items[kInlineParts];
    } inline_io;
    // More parts than the array holds go to the heap; a span never reaches past the array.
    std::vector<LinearPartIo> heap_io;
    if (size_t(num_io) > kInlineParts) heap_io.resize(size_t(num_io));
    const std::span<LinearPartIo> part_io =
        heap_io.empty() ? std::span<LinearPartIo>(inline_io.items, size_t(num_io)) : std::span<LinearPartIo>(heap_io);
    for (size_t p = 0; p < part_io.size(); ++p)
      new (&part_io[p]) LinearPartIo{io[p].x, io[p].m, io[p].ldx, io[p].y, io[p].ldy, io[p].batch};
    run_packed_group(group.packed, part_io);
    return;
  }
  for (size_t p = 0; p < group.parts.size(); ++p) {
    const LinearPartShape& shape = group.shapes[p];
    const LinearGroupPart& part = group.parts[p];
    ref::LinearPartView v;
    v.x = io[p].x;
    v.m = io[p].m;
    v.k = shape.k;
    v.ldx = io[p].ldx;
    v.w = part.weight.data();
    v.n = shape.n;
    v.ldw = shape.k;
    v.bias = part.bias.empty() ? nullptr : part.bias.data();
    v.activation = part.activation;
    v.scale = part.scale;
    v.layout = shape.layout;
    v.heads = shape.heads;
    v.batch = io[p].batch;
    v.y = io[p].y;
    v.ldy = io[p].ldy;
    ref::linear_part(v);
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
  group_ = rt::create_linear_group(c).release();
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

int64_t LinearGroup::num_parts() const { return group_ ? int64_t(group_->shapes.size()) : 0; }

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
    const rt::LinearPartShape& shape = group_->shapes[p];
    const LinearInput& in = inputs[p];
    const LinearOutput& out = outputs[p];
    io[p] = {in.x, in.m, in.k, in.ldx == 0 ? in.k : in.ldx, out.y, out.ldy == 0 ? shape.n : out.ldy, out.batch,
             out.seq_len};
  }
  rt::run_linear_group(*group_, io, parts);
}

}  // namespace shapejit
