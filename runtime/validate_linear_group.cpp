// Each check names the argument, the offending value and the rule. Checks run in argument order,
// so the first message a caller sees is about the first bad argument.
#include "runtime/validate_linear_group.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

using std::to_string;
__extension__ typedef __int128 Int128;  // address arithmetic that cannot overflow

[[noreturn]] void invalid(const std::string& message) {
  throw Error(Status::kInvalidArgument, "linear_group: " + message);
}

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void require_at_least(const std::string& name, int64_t value, int64_t min, const char* rule) {
  if (value < min) invalid(name + " = " + to_string(value) + " must be >= " + to_string(min) + " (" + rule + ")");
}

// Byte count of a strided [rows, width] f32 matrix: ((rows - 1) * stride + width) * 4, which
// must fit in int64 (so every later address computation is exact).
int64_t matrix_bytes(const std::string& name, int64_t rows, int64_t width, int64_t stride) {
  if (rows == 0) return 0;
  int64_t elems = 0, bytes = 0;
  if (__builtin_mul_overflow(rows - 1, stride, &elems) || __builtin_add_overflow(elems, width, &elems) ||
      __builtin_mul_overflow(elems, int64_t{4}, &bytes))
    invalid(name + " spans " + to_string(rows) + " rows of " + to_string(width) + " floats, " + to_string(stride) +
            " apart, whose byte count overflows int64");
  return bytes;
}

// A C caller may store any integer in an enum field; read it as its underlying integer, since
// loading an out-of-range value as the enum type is undefined behaviour.
template <class Enum>
int64_t enum_value(const Enum& e) {
  std::underlying_type_t<Enum> v;
  std::memcpy(&v, &e, sizeof v);
  return int64_t(v);
}

void check_packed_weight(const shapejit_linear_group_desc& d) {
  require_at_least("desc.weight_rows", d.weight_rows, 1, "the packed weight must have rows");
  require_at_least("desc.k", d.k, 1, "K must be positive");
  if (d.weight_stride < d.k)
    invalid("desc.weight_stride = " + to_string(d.weight_stride) + " is less than desc.k = " + to_string(d.k) +
            " (rows of the packed weight must not overlap)");
  matrix_bytes("desc.weight", d.weight_rows, d.k, d.weight_stride);
  if (!d.weight) invalid("desc.weight is NULL but the packed weight has " + to_string(d.weight_rows) + " rows");
}

void check_separate_form(const shapejit_linear_group_desc& d) {
  if (d.weight)
    invalid("desc.weight = " + hex(uintptr_t(d.weight)) + " must be NULL in the separate form (each part brings its weight)");
  if (d.weight_rows != 0 || d.k != 0 || d.weight_stride != 0)
    invalid("desc.weight_rows, desc.k, desc.weight_stride = " + to_string(d.weight_rows) + ", " + to_string(d.k) +
            ", " + to_string(d.weight_stride) + " must be 0 in the separate form (each part brings its weight)");
}

void check_bias(const shapejit_linear_group_desc& d) {
  require_at_least("desc.bias_len", d.bias_len, 0, "a length");
  matrix_bytes("desc.bias", 1, d.bias_len, d.bias_len);
  if (!d.bias && d.bias_len > 0) invalid("desc.bias is NULL but desc.bias_len = " + to_string(d.bias_len));
  if (d.bias && d.bias_len == 0)
    invalid("desc.bias_len = 0 with a non-NULL desc.bias (pass NULL for no bias, or the packed bias's length)");
}

// Returns the part's shape after checking its own fields against the group's form.
LinearPartShape check_part(const shapejit_linear_group_desc& d, int64_t p) {
  const shapejit_linear_part_desc& part = d.parts[p];
  const std::string name = "desc.parts[" + to_string(p) + "]";
  if (const int64_t a = enum_value(part.activation); a < SHAPEJIT_ACTIVATION_NONE || a > SHAPEJIT_ACTIVATION_SILU)
    invalid(name + ".activation = " + to_string(a) +
            " is not an activation (0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu)");
  if (const int64_t l = enum_value(part.layout); l < SHAPEJIT_LAYOUT_ROW_MAJOR || l > SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST)
    invalid(name + ".layout = " + to_string(l) +
            " is not a layout (0 row-major, 1 heads sequence-first, 2 heads batch-first)");
  require_at_least(name + ".rows", part.rows, 1, "a part must have at least one output row");
  require_at_least(name + ".row_begin", part.row_begin, 0, "a row index");

  LinearPartShape shape{part.rows, 0, part.layout, 1};
  if (d.form == SHAPEJIT_WEIGHTS_PACKED) {
    if (part.row_begin > d.weight_rows - part.rows)
      invalid(name + ".row_begin = " + to_string(part.row_begin) + " with rows = " + to_string(part.rows) +
              " lies outside the packed weight's " + to_string(d.weight_rows) + " rows (row_begin + rows must be <= " +
              to_string(d.weight_rows) + ")");
    if (part.weight)
      invalid(name + ".weight = " + hex(uintptr_t(part.weight)) + " must be NULL in the packed form (rows come from desc.weight)");
    if (part.k != 0 && part.k != d.k)
      invalid(name + ".k = " + to_string(part.k) + " does not match the packed weight's K = " + to_string(d.k) +
              " (0 means the packed K)");
    if (part.weight_stride != 0)
      invalid(name + ".weight_stride = " + to_string(part.weight_stride) + " must be 0 in the packed form");
    shape.k = d.k;
  } else {
    require_at_least(name + ".k", part.k, 1, "K must be positive");
    if (part.weight_stride < part.k)
      invalid(name + ".weight_stride = " + to_string(part.weight_stride) + " is less than " + name +
              ".k = " + to_string(part.k) + " (rows of a weight must not overlap)");
    matrix_bytes(name + ".weight", part.rows, part.k, part.weight_stride);
    if (!part.weight) invalid(name + ".weight is NULL but the part has " + to_string(part.rows) + " rows");
    shape.k = part.k;
  }
  if (d.bias && part.row_begin > d.bias_len - part.rows)
    invalid(name + ".row_begin = " + to_string(part.row_begin) + " with rows = " + to_string(part.rows) +
            " lies outside the packed bias's " + to_string(d.bias_len) + " values (row_begin + rows must be <= " +
            to_string(d.bias_len) + ")");
  if (part.layout != SHAPEJIT_LAYOUT_ROW_MAJOR) {
    require_at_least(name + ".heads", part.heads, 1, "a head-split layout needs at least one head");
    if (part.rows % part.heads != 0)
      invalid(name + ".heads = " + to_string(part.heads) + " does not divide " + name + ".rows = " +
              to_string(part.rows) + " (N_p = heads * head_dim)");
    shape.heads = part.heads;
  }
  return shape;
}

// The bytes a strided matrix touches: rows of `width` bytes, `stride` bytes apart.
struct Region {
  std::string name;
  uintptr_t base = 0;
  int64_t rows = 0, width = 0, stride = 0;
};

// Exact test: do any two rows of a and b share a byte? Outputs interleaved column-wise in one
// matrix (q, k, v written side by side with ldy = 3E) are legal and must pass.
bool overlaps(const Region& a, const Region& b) {
  const Int128 a_end = Int128(a.base) + Int128(a.rows - 1) * a.stride + a.width;
  const Int128 b_end = Int128(b.base) + Int128(b.rows - 1) * b.stride + b.width;
  if (a_end <= Int128(b.base) || b_end <= Int128(a.base)) return false;
  const Region& s = a.rows <= b.rows ? a : b;  // walk the rows of the shorter one
  const Region& t = a.rows <= b.rows ? b : a;
  for (int64_t i = 0; i < s.rows; ++i) {
    const Int128 lo = Int128(s.base) + Int128(i) * s.stride, hi = lo + s.width;
    const Int128 first_end = Int128(t.base) + t.width;  // the first row of t that ends after lo
    const Int128 j = lo < first_end ? 0 : (lo - first_end) / t.stride + 1;
    if (j >= t.rows) return false;  // later rows of s start even further on
    if (Int128(t.base) + j * t.stride < hi) return true;
  }
  return false;
}

Region make_region(std::string name, const void* base, int64_t rows, int64_t width_elems, int64_t stride_elems) {
  Region r{std::move(name), uintptr_t(base), rows, width_elems * 4, stride_elems * 4};
  if (rows == 1) r.stride = r.width;
  return r;
}

std::string describe(const Region& r) {
  const Int128 end = Int128(r.base) + Int128(r.rows - 1) * r.stride + r.width;
  return r.name + " = " + hex(r.base) + " (" + to_string(r.rows) + " rows of " + to_string(r.width) + " bytes, " +
         to_string(r.stride) + " apart, ending at " + hex(uintptr_t(end)) + ")";
}

// Checks part p's run arguments and appends its input and output regions (when m > 0).
void check_io(const LinearPartShape& part, const shapejit_linear_group_io& io, int64_t p, std::vector<Region>& inputs,
              std::vector<Region>& outputs) {
  const std::string name = "io[" + to_string(p) + "]";
  require_at_least(name + ".m", io.m, 0, "a row count");
  if (io.k != part.k)
    invalid(name + ".k = " + to_string(io.k) + " does not match the part's weight K = " + to_string(part.k) +
            " (mismatched K)");
  if (io.ldx < io.k)
    invalid(name + ".ldx = " + to_string(io.ldx) + " is less than " + name + ".k = " + to_string(io.k) +
            " (input rows must not overlap)");
  const bool row_major = part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR;
  if (row_major && io.ldy < part.n)
    invalid(name + ".ldy = " + to_string(io.ldy) + " is less than the part's N = " + to_string(part.n) +
            " (output rows must not overlap)");
  if (!row_major) {
    require_at_least(name + ".batch", io.batch, 0, "a batch size");
    require_at_least(name + ".seq_len", io.seq_len, 0, "a sequence length");
    int64_t product = 0;
    if (__builtin_mul_overflow(io.batch, io.seq_len, &product) || product != io.m)
      invalid(name + ".batch * " + name + ".seq_len = " + to_string(io.batch) + " * " + to_string(io.seq_len) +
              " must equal " + name + ".m = " + to_string(io.m) + " for a head-split output");
  }
  matrix_bytes(name + ".x", io.m, io.k, io.ldx);
  // A head-split output is one dense block of m * N floats.
  const int64_t y_rows = row_major ? io.m : std::min<int64_t>(io.m, 1);
  int64_t y_width = part.n, y_stride = io.ldy, y_bytes = 0;
  if (!row_major) {
    if (__builtin_mul_overflow(io.m, part.n, &y_width) || __builtin_mul_overflow(y_width, int64_t{4}, &y_bytes))
      invalid(name + ".y holds " + name + ".m = " + to_string(io.m) + " times N = " + to_string(part.n) +
              " floats (head-split), whose byte count overflows int64");
    y_stride = y_width;
  }
  matrix_bytes(name + ".y", y_rows, y_width, y_stride);
  if (io.m == 0) return;
  if (!io.x) invalid(name + ".x is NULL but " + name + ".m = " + to_string(io.m));
  if (!io.y) invalid(name + ".y is NULL but " + name + ".m = " + to_string(io.m));
  inputs.push_back(make_region(name + ".x", io.x, io.m, io.k, io.ldx));
  outputs.push_back(make_region(name + ".y", io.y, y_rows, y_width, y_stride));
}

}  // namespace

std::vector<LinearPartShape> validate_linear_group_desc(const shapejit_linear_group_desc& d) {
  if (const int64_t f = enum_value(d.form); f != SHAPEJIT_WEIGHTS_PACKED && f != SHAPEJIT_WEIGHTS_SEPARATE)
    invalid("desc.form = " + to_string(f) + " is not a weight form (0 packed, 1 separate)");
  require_at_least("desc.num_parts", d.num_parts, 1, "a group has at least one part");
  if (!d.parts) invalid("desc.parts is NULL but desc.num_parts = " + to_string(d.num_parts));
  if (d.form == SHAPEJIT_WEIGHTS_PACKED)
    check_packed_weight(d);
  else
    check_separate_form(d);
  check_bias(d);
  std::vector<LinearPartShape> shapes;
  shapes.reserve(size_t(d.num_parts));
  for (int64_t p = 0; p < d.num_parts; ++p) shapes.push_back(check_part(d, p));
  return shapes;
}

void validate_linear_group_run(std::span<const LinearPartShape> parts, const shapejit_linear_group_io* io,
                               int64_t num_io) {
  if (num_io != int64_t(parts.size()))
    invalid("num_io = " + to_string(num_io) + " but the group has " + to_string(parts.size()) +
            " parts (one input and one output per part)");
  if (!io) invalid("io is NULL but the group has " + to_string(parts.size()) + " parts");
  std::vector<Region> inputs, outputs;
  for (size_t p = 0; p < parts.size(); ++p) check_io(parts[p], io[p], int64_t(p), inputs, outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (overlaps(outputs[i], outputs[j]))
        invalid(describe(outputs[i]) + " overlaps " + describe(outputs[j]) + " (outputs must not alias)");
    for (const Region& in : inputs)
      if (overlaps(outputs[i], in))
        invalid(describe(outputs[i]) + " overlaps " + describe(in) + " (an output must not overlap any input)");
  }
}

}  // namespace shapejit::rt
