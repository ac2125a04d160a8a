// Each check names the argument, the offending value and the rule. Checks run in argument order,
// so the first message a caller sees is about the first bad argument.
#include "runtime/linear_group/validate_linear_group.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/byte_ranges.hpp"
#include "runtime/engine/c_enum.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit::rt {
namespace {

using std::to_string;
__extension__ typedef __int128 Int128;  // address arithmetic that cannot overflow

[[noreturn]] void invalid(const std::string& message) {
  throw Error(Status::kInvalidArgument, "linear_group: " + message);
}

// A run argument's name such as `io[2].ldx`, spelled out only when a check fails: a run's
// success path builds no strings (it is most of the cost of a tiny call).
struct IoName {
  int64_t part;
  const char* field;  // ".ldx"; "" for the entry itself
};

std::string str(const std::string& name) { return name; }
std::string str(const IoName& name) { return "io[" + to_string(name.part) + "]" + name.field; }

template <class Name>
void require_at_least(const Name& name, int64_t value, int64_t min, const char* rule) {
  if (value < min)
    invalid(str(name) + " = " + to_string(value) + " must be >= " + to_string(min) + " (" + rule + ")");
}

// A strided f32 matrix: `rows` rows of `width` floats, `stride` floats apart.
struct Matrix {
  int64_t rows, width, stride;
};

// Its byte count, ((rows - 1) * stride + width) * 4 (0 without rows), into `bytes`; false when
// that overflows int64. Every matrix passes this, so later address computations are exact.
bool matrix_byte_count(const Matrix& m, int64_t& bytes) {
  int64_t elems = 0;
  bytes = 0;
  return m.rows == 0 || (!__builtin_mul_overflow(m.rows - 1, m.stride, &elems) &&
                         !__builtin_add_overflow(elems, m.width, &elems) &&
                         !__builtin_mul_overflow(elems, int64_t{4}, &bytes));
}

template <class Name>
[[noreturn]] void report_byte_overflow(const Name& name, const Matrix& m) {
  invalid(str(name) + " spans " + to_string(m.rows) + " rows of " + to_string(m.width) + " floats, " +
          to_string(m.stride) + " apart, whose byte count overflows int64");
}

template <class Name>
void require_bytes_fit(const Name& name, int64_t rows, int64_t width, int64_t stride) {
  int64_t bytes = 0;
  if (!matrix_byte_count({rows, width, stride}, bytes)) report_byte_overflow(name, {rows, width, stride});
}

// Every f32 buffer (weights, bias, inputs, outputs) is aligned to 4 bytes (see shapejit.h).
template <class Name>
void require_aligned(const Name& name, const float* data) {
  if (!is_aligned(data, 4)) invalid(misaligned_message(str(name), data, 4, "float32"));
}

// `codes`: the weights come as codes (shapejit_linear_group_ex_desc::codes), so the f32 weight
// must be NULL and its stride is not used (0 or >= k).
void check_packed_weight(const shapejit_linear_group_desc& d, bool codes) {
  require_at_least("desc.weight_rows", d.weight_rows, 1, "the packed weight must have rows");
  require_at_least("desc.k", d.k, 1, "K must be positive");
  if (codes) {
    if (d.weight)
      invalid("desc.weight = " + hex_address(uintptr_t(d.weight)) +
              " must be NULL when the weights are given as codes (desc.codes)");
    if (d.weight_stride != 0 && d.weight_stride < d.k)
      invalid("desc.weight_stride = " + to_string(d.weight_stride) + " is less than desc.k = " + to_string(d.k) +
              " (with codes it is not used: pass 0 or >= k)");
    return;
  }
  if (d.weight_stride < d.k)
    invalid("desc.weight_stride = " + to_string(d.weight_stride) + " is less than desc.k = " + to_string(d.k) +
            " (rows of the packed weight must not overlap)");
  require_bytes_fit("desc.weight", d.weight_rows, d.k, d.weight_stride);
  if (!d.weight) invalid("desc.weight is NULL but the packed weight has " + to_string(d.weight_rows) + " rows");
  require_aligned("desc.weight", d.weight);
}

void check_separate_form(const shapejit_linear_group_desc& d) {
  if (d.weight)
    invalid("desc.weight = " + hex_address(uintptr_t(d.weight)) +
            " must be NULL in the separate form (each part brings its weight)");
  if (d.weight_rows != 0 || d.k != 0 || d.weight_stride != 0)
    invalid("desc.weight_rows, desc.k, desc.weight_stride = " + to_string(d.weight_rows) + ", " + to_string(d.k) +
            ", " + to_string(d.weight_stride) + " must be 0 in the separate form (each part brings its weight)");
}

void check_bias(const shapejit_linear_group_desc& d) {
  require_at_least("desc.bias_len", d.bias_len, 0, "a length");
  require_bytes_fit("desc.bias", 1, d.bias_len, d.bias_len);
  if (!d.bias && d.bias_len > 0) invalid("desc.bias is NULL but desc.bias_len = " + to_string(d.bias_len));
  if (d.bias && d.bias_len == 0)
    invalid("desc.bias_len = 0 with a non-NULL desc.bias (pass NULL for no bias, or the packed bias's length)");
  if (d.bias) require_aligned("desc.bias", d.bias);
}

// Checks one part's own fields against the group's form.
void check_part(const shapejit_linear_group_desc& d, int64_t p, bool codes) {
  const shapejit_linear_part_desc& part = d.parts[p];
  const std::string name = "desc.parts[" + to_string(p) + "]";
  if (const int64_t a = c_enum_value(part.activation); a < SHAPEJIT_ACTIVATION_NONE || a > SHAPEJIT_ACTIVATION_SILU)
    invalid(name + ".activation = " + to_string(a) +
            " is not an activation (0 none, 1 relu, 2 gelu, 3 gelu_tanh, 4 silu)");
  if (const int64_t l = c_enum_value(part.layout);
      l < SHAPEJIT_LAYOUT_ROW_MAJOR || l > SHAPEJIT_LAYOUT_HEADS_BATCH_FIRST)
    invalid(name + ".layout = " + to_string(l) +
            " is not a layout (0 row-major, 1 heads sequence-first, 2 heads batch-first)");
  require_at_least(name + ".rows", part.rows, 1, "a part must have at least one output row");
  require_at_least(name + ".row_begin", part.row_begin, 0, "a row index");

  if (d.form == SHAPEJIT_WEIGHTS_PACKED) {
    if (part.row_begin > d.weight_rows - part.rows)
      invalid(name + ".row_begin = " + to_string(part.row_begin) + " with rows = " + to_string(part.rows) +
              " lies outside the packed weight's " + to_string(d.weight_rows) + " rows (row_begin + rows must be <= " +
              to_string(d.weight_rows) + ")");
    if (part.weight)
      invalid(name + ".weight = " + hex_address(uintptr_t(part.weight)) +
              " must be NULL in the packed form (rows come from desc.weight)");
    if (part.k != 0 && part.k != d.k)
      invalid(name + ".k = " + to_string(part.k) + " does not match the packed weight's K = " + to_string(d.k) +
              " (0 means the packed K)");
    if (part.weight_stride != 0)
      invalid(name + ".weight_stride = " + to_string(part.weight_stride) + " must be 0 in the packed form");
  } else if (codes) {
    require_at_least(name + ".k", part.k, 1, "K must be positive");
    if (part.weight)
      invalid(name + ".weight = " + hex_address(uintptr_t(part.weight)) +
              " must be NULL when the weights are given as codes (desc.codes)");
    if (part.weight_stride != 0 && part.weight_stride < part.k)
      invalid(name + ".weight_stride = " + to_string(part.weight_stride) + " is less than " + name +
              ".k = " + to_string(part.k) + " (with codes it is not used: pass 0 or >= k)");
  } else {
    require_at_least(name + ".k", part.k, 1, "K must be positive");
    if (part.weight_stride < part.k)
      invalid(name + ".weight_stride = " + to_string(part.weight_stride) + " is less than " + name +
              ".k = " + to_string(part.k) + " (rows of a weight must not overlap)");
    require_bytes_fit(name + ".weight", part.rows, part.k, part.weight_stride);
    if (!part.weight) invalid(name + ".weight is NULL but the part has " + to_string(part.rows) + " rows");
    require_aligned(name + ".weight", part.weight);
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
  }
}

// ---- Run rules ---------------------------------------------------------------------------

// Part p's input X: [m, k] with rows ldx apart.
Matrix x_matrix(const shapejit_linear_group_io& io) { return {io.m, io.k, io.ldx}; }

// Part p's output Y: row-major [m, N] with rows ldy apart, or (head-split) one dense block of
// m * N floats, taken as one row. False when m * N overflows int64.
bool y_matrix(const LinearPartPlan& part, const shapejit_linear_group_io& io, Matrix& y) {
  if (part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR) {
    y = {io.m, part.n, io.ldy};
    return true;
  }
  int64_t block = 0;
  if (__builtin_mul_overflow(io.m, part.n, &block)) return false;
  y = {io.m > 0 ? 1 : 0, block, block};
  return true;
}

// The rules one part's run arguments must keep, in argument order.
enum class IoRule : uint8_t {
  kAllKept,
  kNegativeM,
  kMismatchedK,
  kLdxBelowK,
  kLdyBelowN,
  kNegativeBatch,
  kNegativeSeqLen,
  kBatchTimesSeqLenNotM,
  kXBytesOverflow,
  kYBytesOverflow,
  kNullX,
  kNullY,
  kMisalignedX,
  kMisalignedY,
};

// The first rule broken (kAllKept when none) and, when none is, the bytes X and Y span.
struct IoVerdict {
  IoRule broken;
  int64_t x_bytes, y_bytes;
};

// The one statement of the run rules: every run evaluates it inline (a few compares for the
// usual row-major part, laid out straight through: every broken rule is marked unlikely), and
// only a broken rule leads to report_broken_rule for the message.
[[gnu::always_inline]] inline IoVerdict judge_io(const LinearPartPlan& part, const shapejit_linear_group_io& io) {
  IoVerdict v{IoRule::kAllKept, 0, 0};
  const bool row_major = part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR;
  int64_t batch_times_seq_len = 0;
  Matrix y{};
  if (io.m < 0) [[unlikely]]
    v.broken = IoRule::kNegativeM;
  else if (io.k != part.k) [[unlikely]]
    v.broken = IoRule::kMismatchedK;
  else if (io.ldx < io.k) [[unlikely]]
    v.broken = IoRule::kLdxBelowK;
  else if (row_major && io.ldy < part.n) [[unlikely]]
    v.broken = IoRule::kLdyBelowN;
  else if (!row_major && io.batch < 0) [[unlikely]]
    v.broken = IoRule::kNegativeBatch;
  else if (!row_major && io.seq_len < 0) [[unlikely]]
    v.broken = IoRule::kNegativeSeqLen;
  else if (!row_major && (__builtin_mul_overflow(io.batch, io.seq_len, &batch_times_seq_len) ||
                          batch_times_seq_len != io.m)) [[unlikely]]
    v.broken = IoRule::kBatchTimesSeqLenNotM;
  else if (!matrix_byte_count(x_matrix(io), v.x_bytes)) [[unlikely]]
    v.broken = IoRule::kXBytesOverflow;
  else if (!y_matrix(part, io, y) || !matrix_byte_count(y, v.y_bytes)) [[unlikely]]
    v.broken = IoRule::kYBytesOverflow;
  else if (io.m == 0)
    return v;  // nothing is read or written: the pointers are not looked at
  else if (!io.x || !io.y) [[unlikely]]
    v.broken = !io.x ? IoRule::kNullX : IoRule::kNullY;
  else if (!is_aligned(io.x, 4) || !is_aligned(io.y, 4)) [[unlikely]]
    v.broken = !is_aligned(io.x, 4) ? IoRule::kMisalignedX : IoRule::kMisalignedY;
  return v;
}

// The message for the rule judge_io found broken in part p's arguments.
[[noreturn, gnu::cold, gnu::noinline]] void report_broken_rule(IoRule rule, const LinearPartPlan& part,
                                                               const shapejit_linear_group_io& io, int64_t p) {
  switch (rule) {
    case IoRule::kAllKept: break;
    case IoRule::kNegativeM: require_at_least(IoName{p, ".m"}, io.m, 0, "a row count"); break;
    case IoRule::kMismatchedK:
      invalid(str(IoName{p, ".k"}) + " = " + to_string(io.k) + " does not match the part's weight K = " +
              to_string(part.k) + " (mismatched K)");
    case IoRule::kLdxBelowK:
      invalid(str(IoName{p, ".ldx"}) + " = " + to_string(io.ldx) + " is less than " + str(IoName{p, ".k"}) + " = " +
              to_string(io.k) + " (input rows must not overlap)");
    case IoRule::kLdyBelowN:
      invalid(str(IoName{p, ".ldy"}) + " = " + to_string(io.ldy) + " is less than the part's N = " +
              to_string(part.n) + " (output rows must not overlap)");
    case IoRule::kNegativeBatch: require_at_least(IoName{p, ".batch"}, io.batch, 0, "a batch size"); break;
    case IoRule::kNegativeSeqLen: require_at_least(IoName{p, ".seq_len"}, io.seq_len, 0, "a sequence length"); break;
    case IoRule::kBatchTimesSeqLenNotM:
      invalid(str(IoName{p, ".batch"}) + " * " + str(IoName{p, ".seq_len"}) + " = " + to_string(io.batch) + " * " +
              to_string(io.seq_len) + " must equal " + str(IoName{p, ".m"}) + " = " + to_string(io.m) +
              " for a head-split output");
    case IoRule::kXBytesOverflow: report_byte_overflow(IoName{p, ".x"}, x_matrix(io));
    case IoRule::kYBytesOverflow: {
      Matrix y{};
      if (part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR && y_matrix(part, io, y)) report_byte_overflow(IoName{p, ".y"}, y);
      invalid(str(IoName{p, ".y"}) + " holds " + str(IoName{p, ".m"}) + " = " + to_string(io.m) + " times N = " +
              to_string(part.n) + " floats (head-split), whose byte count overflows int64");
    }
    case IoRule::kNullX:
      invalid(str(IoName{p, ".x"}) + " is NULL but " + str(IoName{p, ".m"}) + " = " + to_string(io.m));
    case IoRule::kNullY:
      invalid(str(IoName{p, ".y"}) + " is NULL but " + str(IoName{p, ".m"}) + " = " + to_string(io.m));
    case IoRule::kMisalignedX: require_aligned(IoName{p, ".x"}, io.x); break;
    case IoRule::kMisalignedY: require_aligned(IoName{p, ".y"}, io.y); break;
  }
  throw Error(Status::kInternalError, "linear_group: io[" + to_string(p) + "] judged invalid by no known rule");
}

// ---- Overlap of outputs with inputs and with each other ---------------------------------

// The bytes a strided matrix touches: rows of `width` bytes, `stride` bytes apart, from `begin`
// to `end`. Named by its io entry (`io[p].x` or `io[p].y`) only in messages.
struct Region {
  int64_t part = 0;
  bool output = false;
  int64_t rows = 0, width = 0, stride = 0;
  Int128 begin = 0, end = 0;
};

// Exact test: do any two rows of a and b share a byte? Outputs interleaved column-wise in one
// matrix (q, k, v written side by side with ldy = 3E) are legal and must pass.
bool overlaps(const Region& a, const Region& b) {
  if (a.end <= b.begin || b.end <= a.begin) return false;
  const Region& s = a.rows <= b.rows ? a : b;  // walk the rows of the shorter one
  const Region& t = a.rows <= b.rows ? b : a;
  for (int64_t i = 0; i < s.rows; ++i) {
    const Int128 lo = s.begin + Int128(i) * s.stride, hi = lo + s.width;
    const Int128 first_end = t.begin + t.width;  // the first row of t that ends after lo
    const Int128 j = lo < first_end ? 0 : (lo - first_end) / t.stride + 1;
    if (j >= t.rows) return false;  // later rows of s start even further on
    if (t.begin + j * t.stride < hi) return true;
  }
  return false;
}

// Part p's input or output, for a part whose arguments kept every run rule and has rows.
Region region_of(const LinearPartPlan& part, const shapejit_linear_group_io& io, int64_t p, bool output) {
  Matrix m = x_matrix(io);
  if (output) y_matrix(part, io, m);  // cannot fail once the run rules hold
  Region r;
  r.part = p;
  r.output = output;
  r.rows = m.rows;
  r.width = m.width * 4;
  r.stride = r.rows == 1 ? r.width : m.stride * 4;
  r.begin = Int128(uintptr_t(output ? static_cast<const void*>(io.y) : static_cast<const void*>(io.x)));
  r.end = r.begin + Int128(r.rows - 1) * r.stride + r.width;
  return r;
}

std::string describe(const Region& r) {
  return str(IoName{r.part, r.output ? ".y" : ".x"}) + " = " + hex_address(uintptr_t(r.begin)) + " (" +
         to_string(r.rows) + " rows of " + to_string(r.width) + " bytes, " + to_string(r.stride) +
         " apart, ending at " + hex_address(uintptr_t(r.end)) + ")";
}

// Where a matrix's bytes lie, first to last row, and whose it is: all the overlap screening
// needs. (No member initializers: a run keeps up to 16 on the stack, written before they are read.)
struct Span {
  ByteRange bytes;
  int64_t part;
};

// The exact test for a pair whose spans intersect, and the error naming both when they share
// a byte. Out of line: most runs never get here.
[[gnu::noinline]] void check_pair_exact(std::span<const LinearPartPlan> parts, const shapejit_linear_group_io* io,
                                        int64_t out, int64_t other, bool other_is_output) {
  const Region a = region_of(parts[size_t(out)], io[out], out, true);
  const Region b = region_of(parts[size_t(other)], io[other], other, other_is_output);
  if (!overlaps(a, b)) return;
  invalid(describe(a) + " overlaps " + describe(b) +
          (other_is_output ? " (outputs must not alias)" : " (an output must not overlap any input)"));
}

// ---- Quantized forms ----------------------------------------------------------------------

struct Cell {
  int64_t row, col;
  float value;
};

// The first non-finite value of a strided f32 matrix, in row order.
std::optional<Cell> first_non_finite(const float* w, int64_t rows, int64_t k, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c)
      if (!std::isfinite(w[r * stride + c])) return Cell{r, c, w[r * stride + c]};
  return std::nullopt;
}

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

// Weights quantized at build time must be finite (validated rules: the part's weight exists).
void check_finite_weights(const shapejit_linear_group_ex_desc& d) {
  if (d.quant == SHAPEJIT_LINEAR_F32) return;  // f32 groups take any value (NaN propagates)
  const shapejit_linear_group_desc& g = d.group;
  if (g.form == SHAPEJIT_WEIGHTS_PACKED) {
    if (const std::optional<Cell> c = first_non_finite(g.weight, g.weight_rows, g.k, g.weight_stride))
      invalid("desc.weight[" + to_string(c->row) + ", " + to_string(c->col) + "] = " + float_text(c->value) +
              " is not finite (a quantized form's weights are quantized from finite values)");
    return;
  }
  for (int64_t p = 0; p < g.num_parts; ++p) {
    const shapejit_linear_part_desc& part = g.parts[p];
    if (const std::optional<Cell> c = first_non_finite(part.weight, part.rows, part.k, part.weight_stride))
      invalid("desc.parts[" + to_string(p) + "].weight[" + to_string(c->row) + ", " + to_string(c->col) +
              "] = " + float_text(c->value) + " is not finite (a quantized form's weights are quantized from finite values)");
  }
}

// One entry of desc.codes: [rows, k] codes within the form's range, finite scales >= 0.
void check_code_entry(const shapejit_linear_group_ex_desc& d, int64_t i, int64_t rows, int64_t k) {
  const shapejit_linear_weight_codes& e = d.codes[i];
  const std::string name = "desc.codes[" + to_string(i) + "]";
  if (e.stride < k)
    invalid(name + ".stride = " + to_string(e.stride) + " is less than K = " + to_string(k) +
            " (rows of codes must not overlap)");
  int64_t span = 0;
  if (__builtin_mul_overflow(rows - 1, e.stride, &span) || __builtin_add_overflow(span, k, &span))
    invalid(name + " spans " + to_string(rows) + " rows of " + to_string(k) + " codes, " + to_string(e.stride) +
            " bytes apart, whose byte count overflows int64");
  if (!e.codes) invalid(name + ".codes is NULL but the weight has " + to_string(rows) + " rows");
  if (!e.scales) invalid(name + ".scales is NULL but the weight has " + to_string(rows) + " rows");
  require_aligned(name + ".scales", e.scales);
  const bool int4 = linear_int4_weights(d.quant);
  const int lo = int4 ? -8 : -127, hi = int4 ? 7 : 127;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c)
      if (const int v = e.codes[r * e.stride + c]; v < lo || v > hi)
        invalid(name + ".codes[" + to_string(r) + ", " + to_string(c) + "] = " + to_string(v) + " is outside [" +
                to_string(lo) + ", " + to_string(hi) + "] (the " + (int4 ? "int4" : "int8") + " weight codes' range)");
  for (int64_t r = 0; r < rows; ++r)
    if (!(std::isfinite(e.scales[r]) && e.scales[r] >= 0.0f))
      invalid(name + ".scales[" + to_string(r) + "] = " + float_text(e.scales[r]) +
              " must be finite and >= 0 (a channel's scale)");
}

void check_codes(const shapejit_linear_group_ex_desc& d) {
  const shapejit_linear_group_desc& g = d.group;
  const bool packed = g.form == SHAPEJIT_WEIGHTS_PACKED;
  const int64_t want = packed ? 1 : g.num_parts;
  if (d.num_codes != want)
    invalid("desc.num_codes = " + to_string(d.num_codes) + " but the " + (packed ? "packed" : "separate") +
            " form takes " + to_string(want) + (packed ? " entry (one code matrix [weight_rows, k])" : " entries (one per part)"));
  if (packed) {
    check_code_entry(d, 0, g.weight_rows, g.k);
    return;
  }
  for (int64_t p = 0; p < g.num_parts; ++p) check_code_entry(d, p, g.parts[p].rows, g.parts[p].k);
}

}  // namespace

void validate_group_desc(const shapejit_linear_group_desc& d, bool codes) {
  if (const int64_t f = c_enum_value(d.form); f != SHAPEJIT_WEIGHTS_PACKED && f != SHAPEJIT_WEIGHTS_SEPARATE)
    invalid("desc.form = " + to_string(f) + " is not a weight form (0 packed, 1 separate)");
  require_at_least("desc.num_parts", d.num_parts, 1, "a group has at least one part");
  if (!d.parts) invalid("desc.parts is NULL but desc.num_parts = " + to_string(d.num_parts));
  if (d.form == SHAPEJIT_WEIGHTS_PACKED)
    check_packed_weight(d, codes);
  else
    check_separate_form(d);
  check_bias(d);
  for (int64_t p = 0; p < d.num_parts; ++p) check_part(d, p, codes);
}

void validate_linear_group_desc(const shapejit_linear_group_desc& d) { validate_group_desc(d, false); }

shapejit_linear_group_ex_desc complete_linear_group_ex_desc(const shapejit_linear_group_ex_desc& caller) {
  // The first version is the whole struct of today: nothing is optional yet.
  constexpr size_t kFirst = offsetof(shapejit_linear_group_ex_desc, num_codes) + sizeof(int64_t);
  if (caller.struct_size < kFirst || caller.struct_size > sizeof(shapejit_linear_group_ex_desc))
    invalid("desc.struct_size = " + to_string(caller.struct_size) +
            " must be sizeof(shapejit_linear_group_ex_desc) of this or an older shapejit (" + to_string(kFirst) +
            " to " + to_string(sizeof(shapejit_linear_group_ex_desc)) + " bytes)");
  shapejit_linear_group_ex_desc e{};
  std::memcpy(&e, &caller, kFirst);  // as bytes: an enum field may hold any int
  e.struct_size = sizeof e;
  return e;
}

void validate_linear_group_ex_desc(const shapejit_linear_group_ex_desc& d) {
  if (const int64_t q = c_enum_value(d.quant); q < SHAPEJIT_LINEAR_F32 || q > SHAPEJIT_LINEAR_F32_QC4W)
    invalid("desc.quant = " + to_string(q) +
            " is not a linear-group form (0 f32, 1 qd8-qc8w, 2 qd8-qc4w, 3 f32-qc8w, 4 f32-qc4w)");
  const bool codes = d.codes != nullptr;
  if (d.quant == SHAPEJIT_LINEAR_F32 && (codes || d.num_codes != 0))
    invalid("desc.codes = " + hex_address(uintptr_t(d.codes)) + " with desc.num_codes = " + to_string(d.num_codes) +
            " but desc.quant is f32 (codes need a quantized form; pass NULL and 0)");
  if (!codes && d.num_codes != 0)
    invalid("desc.num_codes = " + to_string(d.num_codes) + " but desc.codes is NULL (0 when the weights are f32)");
  validate_group_desc(d.group, codes);
  const shapejit_linear_group_desc& g = d.group;
  if (linear_quantized_input(d.quant))
    for (int64_t p = 0; p < g.num_parts; ++p) {
      const int64_t k = g.form == SHAPEJIT_WEIGHTS_PACKED ? g.k : g.parts[p].k;
      if (k > kQd8MaxK)
        invalid("desc.parts[" + to_string(p) + "].k = " + to_string(k) + " exceeds " + to_string(kQd8MaxK) +
                " (the qd8 forms' int32 accumulator is exact only up to K = 65536)");
    }
  if (codes)
    check_codes(d);
  else
    check_finite_weights(d);
}

LinearGroupPlan plan_linear_group(const shapejit_linear_group_ex_desc& caller, jit::Isa isa) {
  const shapejit_linear_group_ex_desc desc = complete_linear_group_ex_desc(caller);
  validate_linear_group_ex_desc(desc);
  LinearGroupPlan plan;
  plan.isa = isa;
  plan.parts.reserve(size_t(desc.group.num_parts));
  for (int64_t p = 0; p < desc.group.num_parts; ++p) plan.parts.push_back(resolve_linear_part(desc.group, p));
  resolve_linear_codes(desc, plan);
  return plan;
}

LinearGroupPlan plan_linear_group(const shapejit_linear_group_desc& desc, jit::Isa isa) {
  shapejit_linear_group_ex_desc ex{};
  ex.struct_size = sizeof ex;
  ex.group = desc;
  ex.quant = SHAPEJIT_LINEAR_F32;
  return plan_linear_group(ex, isa);
}

void validate_quantize_weights_args(shapejit_linear_quant quant, const float* w, int64_t rows, int64_t k,
                                    int64_t stride, const int8_t* codes, const float* scales) {
  auto bad = [](const std::string& m) { throw Error(Status::kInvalidArgument, "quantize_linear_weights: " + m); };
  if (const int64_t q = c_enum_value(quant); q < SHAPEJIT_LINEAR_QD8_QC8W || q > SHAPEJIT_LINEAR_F32_QC4W)
    bad("quant = " + to_string(q) + " is not a quantized form (1 qd8-qc8w, 2 qd8-qc4w, 3 f32-qc8w, 4 f32-qc4w)");
  if (rows < 0) bad("rows = " + to_string(rows) + " must be >= 0");
  if (k < 1) bad("k = " + to_string(k) + " must be >= 1");
  if (stride < k) bad("stride = " + to_string(stride) + " is less than k = " + to_string(k) + " (rows must not overlap)");
  int64_t bytes = 0;
  if (!matrix_byte_count({rows, k, stride}, bytes))
    bad("w spans " + to_string(rows) + " rows of " + to_string(k) + " floats, " + to_string(stride) +
        " apart, whose byte count overflows int64");
  if (rows == 0) return;
  if (!w) bad("w is NULL but rows = " + to_string(rows));
  if (!codes) bad("codes is NULL but rows = " + to_string(rows));
  if (!scales) bad("scales is NULL but rows = " + to_string(rows));
  if (!is_aligned(w, 4)) bad(misaligned_message("w", w, 4, "float32"));
  if (!is_aligned(scales, 4)) bad(misaligned_message("scales", scales, 4, "float32"));
  if (const std::optional<Cell> c = first_non_finite(w, rows, k, stride))
    bad("w[" + to_string(c->row) + ", " + to_string(c->col) + "] = " + float_text(c->value) +
        " is not finite (weights are quantized from finite values)");
}

void validate_linear_group_run(std::span<const LinearPartPlan> parts, const shapejit_linear_group_io* io,
                               int64_t num_io) {
  if (num_io != int64_t(parts.size()))
    invalid("num_io = " + to_string(num_io) + " but the group has " + to_string(parts.size()) +
            " parts (one input and one output per part)");
  if (!io) invalid("io is NULL but the group has " + to_string(parts.size()) + " parts");
  // Each part's output span and, unless an earlier part reads the same matrix (k and v of
  // cross-attention read one memory: a duplicate would only repeat the same tests, and never be
  // the first to fail one), its input span. Stack arrays for up to kInline parts and plain
  // locals, so a valid run allocates nothing and the counts stay in registers.
  constexpr size_t kInline = 8;
  std::array<Span, kInline> inline_in, inline_out;
  std::vector<Span> heap;
  Span* in = inline_in.data();
  Span* out = inline_out.data();
  if (parts.size() > kInline) {
    heap.resize(2 * parts.size());
    in = heap.data();
    out = heap.data() + parts.size();
  }
  size_t num_in = 0, num_out = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const LinearPartPlan& part = parts[p];
    const shapejit_linear_group_io& a = io[p];
    const IoVerdict verdict = judge_io(part, a);
    if (verdict.broken != IoRule::kAllKept) report_broken_rule(verdict.broken, part, a, int64_t(p));
    if (a.m == 0) continue;
    out[num_out++] = {byte_range(a.y, verdict.y_bytes), int64_t(p)};
    bool seen = false;
    for (size_t i = 0; i < num_in && !seen; ++i) {
      const shapejit_linear_group_io& b = io[in[i].part];
      seen = b.x == a.x && b.m == a.m && b.k == a.k && b.ldx == a.ldx;
    }
    if (!seen) in[num_in++] = {byte_range(a.x, verdict.x_bytes), int64_t(p)};
  }
  // Every pair in argument order, so the first overlap reported is the one the exact test
  // finds first. The spans (never empty: m > 0, N and K >= 1) screen, and never miss a shared
  // byte: one running past 2^64 covers the whole address space (byte_range).
  for (size_t i = 0; i < num_out; ++i) {
    const Span& o = out[i];
    for (size_t j = 0; j < i; ++j)
      if (nonempty_byte_ranges_overlap(o.bytes, out[j].bytes)) check_pair_exact(parts, io, o.part, out[j].part, true);
    for (size_t j = 0; j < num_in; ++j)
      if (nonempty_byte_ranges_overlap(o.bytes, in[j].bytes)) check_pair_exact(parts, io, o.part, in[j].part, false);
  }
}

}  // namespace shapejit::rt
