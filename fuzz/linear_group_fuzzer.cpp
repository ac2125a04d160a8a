// libFuzzer harness of the linear-group C ABI: the bytes become a group description (form,
// parts, row ranges, K, strides, bias, activations, scales, layouts and heads, with invalid
// enum values, hostile sizes and null pointers) and one or two runs (m, K, strides, head-split
// batch and sequence length, shared and overlapping buffers). Every input checks:
//  - create and run return OK, INVALID_ARGUMENT or UNSUPPORTED (OUT_OF_MEMORY never happens at
//    these sizes), a failed create leaves *out alone, a failed run leaves every output as it was;
//  - a run that succeeds matches ref::reference_element within the documented bound, writes
//    nothing between output rows or around the outputs, and gives the same bits on 1 and 2
//    engine threads;
//  - the group copied its weights: the caller's weight and bias are scribbled over after create;
//  - quantized forms (docs/quantized-linear-semantics.md, shapejit_linear_group_create_ex with
//    weights quantized at build time; invalid form values too): a successful run matches
//    ref::quant_reference_element (bitwise for qd8 with none/relu), and a qd8 run over a
//    non-finite input row is rejected with every output untouched.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "ref/linear_group.hpp"
#include "ref/linear_group_quant.hpp"
#include "shapejit/shapejit.h"

namespace {

using shapejit::fuzz::Draw;
using shapejit::fuzz::fail;

constexpr int64_t kMaxParts = 4;
constexpr int64_t kGuard = 16;  // floats of guard zone on each side of an output
constexpr uint32_t kSentinelBits = 0x7fa5a5a5;  // a NaN payload no kernel produces
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

shapejit::fuzz::Tally tally("linear_group_fuzzer");

// A size for the group: small and valid mostly, else one of the values validation must reject
// by itself (the harness can back only what it allocates).
int64_t group_size(Draw& d, int64_t lo, int64_t hi) {
  if (d.chance(94)) return d.in_range(lo, hi);
  static constexpr int64_t kHostile[] = {0, -1, std::numeric_limits<int64_t>::min(), int64_t{1} << 62, kI64Max};
  return kHostile[d.in_range(0, std::size(kHostile) - 1)];
}

// Backing floats for a [rows, width] matrix with rows `stride` apart (0 if it cannot be backed).
int64_t backing(int64_t rows, int64_t width, int64_t stride) {
  if (rows <= 0 || width <= 0 || stride < width || rows > 4096 || width > 4096) return 0;
  if (rows > 1 && stride > 4096) return 0;
  return (rows - 1) * stride + width;
}

struct GroupInput {
  shapejit_linear_group_desc desc{}, ref_desc{};
  int64_t quant = 0;  // shapejit_linear_quant, or an invalid value
  std::vector<shapejit_linear_part_desc> parts, ref_parts;
  std::vector<float> weight, ref_weight, bias, ref_bias;
  std::vector<std::vector<float>> part_weights, ref_part_weights;
  int num_runs = 1;
};

void fill(Draw& d, std::vector<float>& v, int64_t n) {
  v.assign(size_t(std::max<int64_t>(n, 1)), 0.0f);
  const int kind = d.chance(80) ? 0 : d.value_kind();
  for (auto& x : v) x = kind == 0 ? float(d.in_range(-16, 16)) / 8.0f : d.value(kind);
}

GroupInput draw_group(Draw& d) {
  GroupInput g;
  shapejit_linear_group_desc& desc = g.desc;
  const int64_t form = d.chance(96) ? d.in_range(0, 1) : (d.chance(50) ? 2 : -1);
  shapejit::fuzz::store_enum(desc.form, form);
  const int64_t num_parts = d.chance(95) ? d.in_range(1, kMaxParts) : (d.chance(50) ? 0 : -3);
  const int64_t real_parts = std::max<int64_t>(num_parts, 0);
  desc.num_parts = num_parts;
  if (form == SHAPEJIT_WEIGHTS_PACKED) {
    desc.k = group_size(d, 1, 70);
    desc.weight_rows = group_size(d, 1, 90);
    desc.weight_stride = d.chance(75) ? desc.k : group_size(d, 0, 80);
    fill(d, g.weight, backing(desc.weight_rows, desc.k, desc.weight_stride));
    const bool backed = backing(desc.weight_rows, desc.k, desc.weight_stride) > 0;
    desc.weight = d.chance(3) || !backed ? nullptr : g.weight.data();
  } else if (d.chance(5)) {  // fields that the separate form requires to be zero
    desc.k = d.in_range(1, 4);
    desc.weight_rows = d.in_range(0, 4);
  }
  int64_t next_row = 0, total_rows = 0;
  g.parts.resize(size_t(real_parts));
  g.part_weights.resize(size_t(real_parts));
  for (int64_t p = 0; p < real_parts; ++p) {
    shapejit_linear_part_desc& part = g.parts[size_t(p)];
    part.rows = group_size(d, 1, 40);
    part.row_begin = d.chance(85) ? next_row : group_size(d, 0, 100);
    if (part.rows > 0 && part.rows < 4096 && part.row_begin >= 0 && part.row_begin < 4096) next_row = part.row_begin + part.rows;
    total_rows = std::max(total_rows, next_row);
    if (form == SHAPEJIT_WEIGHTS_PACKED) {
      if (d.chance(10)) part.k = d.chance(50) ? desc.k : d.in_range(1, 80);
    } else {
      part.k = group_size(d, 1, 70);
      part.weight_stride = d.chance(75) ? part.k : group_size(d, 0, 80);
      const int64_t floats = backing(part.rows, part.k, part.weight_stride);
      fill(d, g.part_weights[size_t(p)], floats);
      part.weight = d.chance(3) || floats == 0 ? nullptr : g.part_weights[size_t(p)].data();
    }
    shapejit::fuzz::store_enum(part.activation, d.chance(96) ? d.in_range(0, 4) : (d.chance(50) ? 5 : -1));
    part.has_scale = d.chance(30) ? (d.chance(90) ? 1 : 7) : 0;
    part.scale = d.chance(70) ? float(d.in_range(-8, 8)) / 4.0f : d.value(3);
    shapejit::fuzz::store_enum(part.layout, d.chance(96) ? (d.chance(60) ? 0 : d.in_range(1, 2)) : 3);
    part.heads = d.chance(90) ? d.in_range(1, 6) : group_size(d, 1, 50);
    if (d.chance(70) && part.rows > 0 && part.rows < 4096 && part.heads < 64) {  // a divisor of rows, mostly
      while (part.heads > 1 && part.rows % part.heads != 0) --part.heads;
    }
  }
  if (d.chance(60)) {
    desc.bias_len = d.chance(85) ? total_rows : group_size(d, 0, 100);
    fill(d, g.bias, desc.bias_len > 0 && desc.bias_len <= 4096 ? desc.bias_len : 0);
    desc.bias = (desc.bias_len > 0 && desc.bias_len <= 4096) || d.chance(5) ? g.bias.data() : nullptr;
  }
  desc.parts = d.chance(2) ? nullptr : g.parts.data();
  g.num_runs = d.chance(70) ? 1 : 2;
  g.quant = d.chance(70) ? 0 : d.chance(95) ? d.in_range(1, 4) : (d.chance(50) ? 5 : -1);
  // The reference's view of the group: pristine copies of everything create reads.
  g.ref_weight = g.weight;
  g.ref_bias = g.bias;
  g.ref_part_weights = g.part_weights;
  g.ref_parts = g.parts;
  for (size_t p = 0; p < g.parts.size(); ++p)
    if (g.parts[p].weight) g.ref_parts[p].weight = g.ref_part_weights[p].data();
  g.ref_desc = desc;
  g.ref_desc.parts = g.ref_parts.data();
  if (desc.weight) g.ref_desc.weight = g.ref_weight.data();
  if (desc.bias) g.ref_desc.bias = g.ref_bias.data();
  return g;
}

// One run's buffers: inputs and guarded, sentinel-filled outputs.
struct RunInput {
  std::vector<shapejit_linear_group_io> io;
  std::vector<std::vector<float>> x, y;  // y[p] = guard | region | guard
  std::vector<int64_t> y_floats;
  int64_t num_io = 0;
  bool null_io = false;
};

float sentinel() {
  float f;
  std::memcpy(&f, &kSentinelBits, 4);
  return f;
}
bool is_sentinel(float f) { return std::memcmp(&f, &kSentinelBits, 4) == 0; }

RunInput draw_run(Draw& d, const GroupInput& g) {
  RunInput r;
  const size_t parts = g.parts.size();
  r.io.resize(parts);
  r.x.resize(parts);
  r.y.resize(parts);
  r.y_floats.assign(parts, 0);
  const bool share_x = parts >= 2 && d.chance(8);  // parts 0 and 1 read one input (legal)
  for (size_t p = 0; p < parts; ++p) {
    const shapejit_linear_part_desc& part = g.parts[p];
    shapejit_linear_group_io& io = r.io[p];
    const int64_t k = g.desc.form == SHAPEJIT_WEIGHTS_PACKED ? g.desc.k : part.k;
    io.m = d.chance(95) ? d.in_range(0, 20) : (d.chance(50) ? -1 : kI64Max);
    io.k = d.chance(95) ? k : d.in_range(0, 80);
    io.ldx = d.chance(80) ? io.k : (d.chance(80) ? io.k + d.in_range(1, 5) : d.in_range(-1, 8));
    if (share_x && p == 1) {  // the same matrix: same pointer, rows, width and stride
      io.m = r.io[0].m;
      io.k = r.io[0].k;
      io.ldx = r.io[0].ldx;
    }
    const bool heads = part.layout == SHAPEJIT_LAYOUT_HEADS_SEQ_FIRST || part.layout == SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST;
    io.ldy = d.chance(80) ? part.rows : (d.chance(80) ? part.rows + d.in_range(1, 5) : d.in_range(-1, 8));
    if (heads) {
      io.batch = d.chance(70) && io.m > 0 && io.m <= 4096 ? d.in_range(1, io.m) : d.in_range(0, 4);
      while (io.batch > 1 && io.m > 0 && io.m % io.batch != 0) --io.batch;
      io.seq_len = io.batch > 0 && io.m >= 0 ? io.m / io.batch : 0;
      if (d.chance(10)) io.seq_len = shapejit::fuzz::wrap_add(io.seq_len, 1);
    }
    // Back x and y when the sizes are sane; the library must reject anything it cannot trust.
    const int64_t x_floats = io.m == 0 ? 0 : backing(io.m, io.k, io.ldx);
    fill(d, r.x[p], x_floats);
    io.x = (x_floats > 0 || io.m == 0) && !d.chance(3) ? r.x[p].data() : nullptr;
    if (share_x && p == 1) io.x = r.io[0].x;
    int64_t y_floats = 0;
    if (io.m > 0 && part.rows > 0 && part.rows <= 4096)
      y_floats = heads ? (io.m <= 4096 ? io.m * part.rows : 0) : backing(io.m, part.rows, io.ldy);
    r.y_floats[p] = y_floats;
    r.y[p].assign(size_t(y_floats + 2 * kGuard), sentinel());
    io.y = (y_floats > 0 || io.m == 0) && !d.chance(3) ? r.y[p].data() + kGuard : nullptr;
  }
  // Aliasing that must be rejected: two outputs that share their first row, an output over an
  // input (only when both regions exist, so the harness never hands out a too-small buffer).
  if (parts >= 2 && r.io[0].m > 0 && r.io[1].m > 0 && d.chance(4)) r.io[1].y = r.io[0].y;
  if (parts >= 1 && r.io[0].m > 0 && d.chance(3)) r.io[0].y = const_cast<float*>(r.io[0].x);
  r.num_io = d.chance(96) ? int64_t(parts) : int64_t(parts) + (d.chance(50) ? 1 : -1);
  r.null_io = d.chance(2);
  return r;
}

std::string describe(const GroupInput& g) {
  int32_t form;
  std::memcpy(&form, &g.desc.form, 4);
  std::string s = "group: quant " + std::to_string(g.quant) + " form " + std::to_string(form) + " parts " + std::to_string(g.desc.num_parts) + " k " +
                  std::to_string(g.desc.k) + " weight_rows " + std::to_string(g.desc.weight_rows) + " stride " +
                  std::to_string(g.desc.weight_stride) + " bias_len " + std::to_string(g.desc.bias_len) +
                  (g.desc.bias ? "" : " (no bias)");
  for (const auto& p : g.parts) {
    int32_t act, layout;
    std::memcpy(&act, &p.activation, 4);
    std::memcpy(&layout, &p.layout, 4);
    s += "\n  part: rows " + std::to_string(p.rows) + " row_begin " + std::to_string(p.row_begin) + " k " +
         std::to_string(p.k) + " stride " + std::to_string(p.weight_stride) + " act " + std::to_string(act) +
         " scale " + (p.has_scale ? shapejit::fuzz::float_text(p.scale) : std::string("none")) + " layout " +
         std::to_string(layout) + " heads " + std::to_string(p.heads);
  }
  return s;
}

std::string describe(const RunInput& r) {
  std::string s = "run: num_io " + std::to_string(r.num_io) + (r.null_io ? " (io NULL)" : "");
  for (const auto& io : r.io)
    s += "\n  io: m " + std::to_string(io.m) + " k " + std::to_string(io.k) + " ldx " + std::to_string(io.ldx) +
         " ldy " + std::to_string(io.ldy) + " batch " + std::to_string(io.batch) + " seq_len " +
         std::to_string(io.seq_len) + (io.x ? "" : " x NULL") + (io.y ? "" : " y NULL");
  return s;
}

// True when Y[row, col] lies where the documented acceptance rule cannot hold for an f32
// kernel, so the element is counted rather than checked: the finite terms' magnitudes can
// overflow f32 on the way (inf - inf = NaN, or inf where the double sum comes back into range),
// the result is within its bound of overflowing, an infinite pre-activation meets a smooth
// activation (gelu(-inf) is -inf * 0), or an infinite scale meets an activated value whose
// zero-ness the bound leaves open (0 * inf = NaN). NaN inputs, and infinite inputs with no or
// a relu activation, stay checked.
bool unchecked(const shapejit::ref::LinearPartView& v, int64_t row, int64_t col, const shapejit::ref::ElementRef& want) {
  if (std::isinf(v.scale)) return true;
  double finite = 0.0;
  bool infinite = false;
  auto add = [&](double t) {
    if (std::isinf(t)) infinite = true;
    else if (!std::isnan(t)) finite += std::fabs(t);
  };
  if (v.bias) add(double(v.bias[col]));
  for (int64_t k = 0; k < v.k; ++k) add(double(v.x[row * v.ldx + k]) * double(v.w[col * v.ldw + k]));
  const double kMax = double(std::numeric_limits<float>::max());
  if (finite > kMax / 4) return true;
  if (infinite && v.activation != SHAPEJIT_ACTIVATION_NONE && v.activation != SHAPEJIT_ACTIVATION_RELU) return true;
  return std::isfinite(want.value) && std::fabs(double(want.value)) + want.bound > kMax;
}

// A quantized part of the reference: the part's f32 view and its codes from the reference's
// own quantizer (the group quantized the same weights at build time).
struct QuantRef {
  shapejit::ref::QuantPartView view;
  std::vector<int8_t> codes;
  std::vector<float> scales;
};

// A quantized element is counted rather than checked where its result is within its bound of
// overflowing, or where the f32 element would be (unchecked: the terms' magnitudes, an infinite
// input meeting a smooth activation, an infinite scale), or, for the weight-only forms, where
// the f32 sum of x * code (the kernels' accumulator before the weight scale) may overflow on
// the way: a tiny weight row scale makes its codes large against the weights (then a kernel's
// pre-activation can round to -inf where the reference's stays finite, and gelu(-inf) is NaN).
bool quant_unchecked(const QuantRef& q, const shapejit::ref::LinearPartView& v, int64_t row, int64_t col,
                     const shapejit::ref::ElementRef& want) {
  const double kMax = double(std::numeric_limits<float>::max());
  if (!std::isfinite(want.value) || std::fabs(double(want.value)) + want.bound > kMax / 4) return true;
  if (unchecked(v, row, col, want)) return true;
  if (shapejit::ref::quant_input(q.view.quant)) return false;
  double finite = 0.0;
  for (int64_t k = 0; k < v.k; ++k) {
    const double t = double(v.x[row * v.ldx + k]) * double(q.codes[size_t(col * v.k + k)]);
    if (std::isfinite(t)) finite += std::fabs(t);
  }
  return finite > kMax / 4;
}

QuantRef quant_ref(const GroupInput& g, const shapejit::ref::LinearPartView& v) {
  QuantRef q;
  q.view.f = v;
  q.view.quant = shapejit_linear_quant(g.quant);
  q.codes.resize(size_t(v.n * v.k));
  q.scales.resize(size_t(v.n));
  for (int64_t r = 0; r < v.n; ++r)
    shapejit::ref::quantize_weight_row(q.view.quant, v.w + r * v.ldw, v.k, q.codes.data() + r * v.k, &q.scales[size_t(r)]);
  q.view.codes = q.codes.data();
  q.view.ldc = v.k;
  q.view.wscale = q.scales.data();
  return q;
}

// Checks a successful run: every element within the reference bound, sentinels elsewhere.
void check_outputs(const GroupInput& g, const RunInput& r) {
  for (size_t p = 0; p < g.parts.size(); ++p) {
    const std::vector<float>& buf = r.y[p];
    std::vector<bool> written(buf.size(), false);
    const shapejit_linear_group_io& io = r.io[p];
    if (io.m > 0) {
      const shapejit::ref::LinearPartView v = shapejit::ref::resolve_part(g.ref_desc, int64_t(p), io);
      const QuantRef q = g.quant != 0 ? quant_ref(g, v) : QuantRef{};
      for (int64_t row = 0; row < io.m; ++row)
        for (int64_t col = 0; col < v.n; ++col) {
          const int64_t at = shapejit::ref::output_offset(v, row, col);
          const float got = io.y[at];
          const float* where = io.y + at;
          if (where >= buf.data() && where < buf.data() + buf.size()) written[size_t(where - buf.data())] = true;
          const shapejit::ref::ElementRef want = g.quant != 0 ? shapejit::ref::quant_reference_element(q.view, row, col)
                                                              : shapejit::ref::reference_element(v, row, col);
          if (g.quant != 0 ? quant_unchecked(q, v, row, col, want) : unchecked(v, row, col, want)) {
            ++tally.unchecked;
            continue;
          }
          ++tally.checked;
          if (!shapejit::ref::accepted(got, want.value, want.bound))
            fail("part " + std::to_string(p) + " y[" + std::to_string(row) + ", " + std::to_string(col) + "] = " +
                 shapejit::fuzz::float_text(got) + ", reference " + shapejit::fuzz::float_text(want.value) +
                 " within " + std::to_string(want.bound));
        }
    }
    for (size_t i = 0; i < buf.size(); ++i)
      if (!written[i] && !is_sentinel(buf[i]))
        fail("part " + std::to_string(p) + ": float " + std::to_string(int64_t(i) - kGuard) +
             " of its output buffer was written outside the output");
  }
}

void check_untouched(const RunInput& r) {
  for (size_t p = 0; p < r.y.size(); ++p)
    for (float f : r.y[p])
      if (!is_sentinel(f)) fail("a rejected run wrote to part " + std::to_string(p) + "'s output buffer");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  Draw d(fdp);
  GroupInput g = draw_group(d);
  shapejit::fuzz::set_call_description(describe(g));
  shapejit_linear_group* const kUnset = reinterpret_cast<shapejit_linear_group*>(uintptr_t(0x5a5a5a5a));
  shapejit_linear_group* group = kUnset;
  if (shapejit_set_num_threads(1) != SHAPEJIT_OK) fail("set_num_threads failed");
  shapejit_linear_group_ex_desc ex;
  shapejit_linear_group_ex_init(&ex, &g.desc);
  shapejit::fuzz::store_enum(ex.quant, g.quant);
  const shapejit_status created =
      g.quant == 0 ? shapejit_linear_group_create(&g.desc, &group) : shapejit_linear_group_create_ex(&ex, &group);
  shapejit::fuzz::check_status(created, "shapejit_linear_group_create");
  if (created != SHAPEJIT_OK) {
    if (std::getenv("SHAPEJIT_FUZZ_VERBOSE")) std::fprintf(stderr, "create: %s\n", shapejit_last_error());
    if (group != kUnset) fail("a failed create changed *out");
    ++tally.rejected;
    return 0;
  }
  if (group == nullptr || group == kUnset) fail("create succeeded without a group");
  // The group owns copies: what the caller does with its buffers afterwards must not matter.
  for (auto& x : g.weight) x = std::numeric_limits<float>::quiet_NaN();
  for (auto& x : g.bias) x = std::numeric_limits<float>::quiet_NaN();
  for (auto& w : g.part_weights)
    for (auto& x : w) x = std::numeric_limits<float>::quiet_NaN();

  for (int run = 0; run < g.num_runs; ++run) {
    RunInput r = draw_run(d, g);
    shapejit::fuzz::set_call_description(describe(g) + "\n" + describe(r));
    const shapejit_linear_group_io* io = r.null_io ? nullptr : r.io.data();
    const shapejit_status status = shapejit_linear_group_run(group, io, r.num_io);
    shapejit::fuzz::check_status(status, "shapejit_linear_group_run");
    if (status != SHAPEJIT_OK) {
      if (std::getenv("SHAPEJIT_FUZZ_VERBOSE")) std::fprintf(stderr, "run: %s\n", shapejit_last_error());
      check_untouched(r);
      ++tally.rejected;
      continue;
    }
    check_outputs(g, r);
    ++tally.accepted;
    // The same run on two engine threads gives the same bits.
    std::vector<std::vector<float>> first = r.y;
    for (auto& y : r.y) y.assign(y.size(), sentinel());
    if (shapejit_set_num_threads(2) != SHAPEJIT_OK) fail("set_num_threads failed");
    if (shapejit_linear_group_run(group, io, r.num_io) != SHAPEJIT_OK) fail("a run failed on its second try");
    shapejit_set_num_threads(1);
    for (size_t p = 0; p < r.y.size(); ++p)
      if (std::memcmp(first[p].data(), r.y[p].data(), first[p].size() * 4) != 0)
        fail("part " + std::to_string(p) + ": 1 and 2 engine threads give different bits");
  }
  if (shapejit_linear_group_destroy(group) != SHAPEJIT_OK) fail("destroy failed");
  return 0;
}
