// Each check names the argument, the offending value and the rule. Checks run in argument order,
// so the first message a caller sees is about the first bad argument.
#include "runtime/validate_linear_group.hpp"

#include <algorithm>
#include <array>
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

// Byte count of a strided [rows, width] f32 matrix: ((rows - 1) * stride + width) * 4, which
// must fit in int64 (so every later address computation is exact).
template <class Name>
int64_t matrix_bytes(const Name& name, int64_t rows, int64_t width, int64_t stride) {
  if (rows == 0) return 0;
  int64_t elems = 0, bytes = 0;
  if (__builtin_mul_overflow(rows - 1, stride, &elems) || __builtin_add_overflow(elems, width, &elems) ||
      __builtin_mul_overflow(elems, int64_t{4}, &bytes))
    invalid(str(name) + " spans " + to_string(rows) + " rows of " + to_string(width) + " floats, " +
            to_string(stride) + " apart, whose byte count overflows int64");
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

// Part p's input or output (m > 0, arguments checked). A head-split output is one dense block
// of m * N floats.
Region region_of(const LinearPartShape& part, const shapejit_linear_group_io& io, int64_t p, bool output) {
  const bool dense = output && part.layout != SHAPEJIT_LAYOUT_ROW_MAJOR;
  Region r;
  r.part = p;
  r.output = output;
  r.rows = dense ? 1 : io.m;
  r.width = (output ? (dense ? io.m * part.n : part.n) : io.k) * 4;
  r.stride = r.rows == 1 ? r.width : (output ? io.ldy : io.ldx) * 4;
  r.begin = Int128(uintptr_t(output ? static_cast<const void*>(io.y) : static_cast<const void*>(io.x)));
  r.end = r.begin + Int128(r.rows - 1) * r.stride + r.width;
  return r;
}

std::string describe(const Region& r) {
  return str(IoName{r.part, r.output ? ".y" : ".x"}) + " = " + hex(uintptr_t(r.begin)) + " (" + to_string(r.rows) +
         " rows of " + to_string(r.width) + " bytes, " + to_string(r.stride) + " apart, ending at " +
         hex(uintptr_t(r.end)) + ")";
}

// Where a matrix's bytes lie, [begin, end), and whose it is: all the overlap screening needs.
// 64-bit, as the usual run's addresses are: a span whose end passes 2^64 sets `wrapped`.
// (No member initializers: a run keeps up to 16 on the stack, written before they are read.)
struct Span {
  uintptr_t begin, end;
  int64_t part;
};

// Disjoint spans cannot share a byte; intersecting ones get the exact row-by-row test.
bool spans_intersect(const Span& a, const Span& b) { return a.end > b.begin && b.end > a.begin; }

// [base, base + bytes) with bytes < 2^63 (checked); an end past 2^64 sets `wrapped`.
Span make_span(const void* base, int64_t bytes, int64_t part, bool& wrapped) {
  Span s{uintptr_t(base), 0, part};
  wrapped |= __builtin_add_overflow(s.begin, uintptr_t(bytes), &s.end);
  return s;
}

// Checks part p's run arguments in argument order, throwing on the first broken rule; returns
// when they are all kept. Out of line and cold: fast_io_ok() lets the usual call skip it.
[[gnu::cold, gnu::noinline]] void check_io(const LinearPartShape& part, const shapejit_linear_group_io& io,
                                           int64_t p) {
  require_at_least(IoName{p, ".m"}, io.m, 0, "a row count");
  if (io.k != part.k)
    invalid(str(IoName{p, ".k"}) + " = " + to_string(io.k) + " does not match the part's weight K = " +
            to_string(part.k) + " (mismatched K)");
  if (io.ldx < io.k)
    invalid(str(IoName{p, ".ldx"}) + " = " + to_string(io.ldx) + " is less than " + str(IoName{p, ".k"}) + " = " +
            to_string(io.k) + " (input rows must not overlap)");
  const bool row_major = part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR;
  if (row_major && io.ldy < part.n)
    invalid(str(IoName{p, ".ldy"}) + " = " + to_string(io.ldy) + " is less than the part's N = " +
            to_string(part.n) + " (output rows must not overlap)");
  if (!row_major) {
    require_at_least(IoName{p, ".batch"}, io.batch, 0, "a batch size");
    require_at_least(IoName{p, ".seq_len"}, io.seq_len, 0, "a sequence length");
    int64_t product = 0;
    if (__builtin_mul_overflow(io.batch, io.seq_len, &product) || product != io.m)
      invalid(str(IoName{p, ".batch"}) + " * " + str(IoName{p, ".seq_len"}) + " = " + to_string(io.batch) + " * " +
              to_string(io.seq_len) + " must equal " + str(IoName{p, ".m"}) + " = " + to_string(io.m) +
              " for a head-split output");
  }
  matrix_bytes(IoName{p, ".x"}, io.m, io.k, io.ldx);
  // A head-split output is one dense block of m * N floats.
  const int64_t y_rows = row_major ? io.m : std::min<int64_t>(io.m, 1);
  int64_t y_width = part.n, y_stride = io.ldy, y_bytes = 0;
  if (!row_major) {
    if (__builtin_mul_overflow(io.m, part.n, &y_width) || __builtin_mul_overflow(y_width, int64_t{4}, &y_bytes))
      invalid(str(IoName{p, ".y"}) + " holds " + str(IoName{p, ".m"}) + " = " + to_string(io.m) + " times N = " +
              to_string(part.n) + " floats (head-split), whose byte count overflows int64");
    y_stride = y_width;
  }
  matrix_bytes(IoName{p, ".y"}, y_rows, y_width, y_stride);
  if (io.m == 0) return;
  if (!io.x) invalid(str(IoName{p, ".x"}) + " is NULL but " + str(IoName{p, ".m"}) + " = " + to_string(io.m));
  if (!io.y) invalid(str(IoName{p, ".y"}) + " is NULL but " + str(IoName{p, ".m"}) + " = " + to_string(io.m));
}

// True when ((rows - 1) * stride + width) * 4 fits in int64 (rows >= 1), as matrix_bytes checks.
bool bytes_fit(int64_t rows, int64_t width, int64_t stride) {
  int64_t elems = 0, bytes = 0;
  return !__builtin_mul_overflow(rows - 1, stride, &elems) && !__builtin_add_overflow(elems, width, &elems) &&
         !__builtin_mul_overflow(elems, int64_t{4}, &bytes);
}

// The usual call in a few compares: a row-major part with rows, keeping every rule check_io
// checks. Anything else (head-split, m == 0, or a broken rule) goes through check_io, which
// names the first broken rule; so true here implies check_io would pass.
bool fast_io_ok(const LinearPartShape& part, const shapejit_linear_group_io& io) {
  return part.layout == SHAPEJIT_LAYOUT_ROW_MAJOR && io.m > 0 && io.k == part.k && io.ldx >= io.k &&
         io.ldy >= part.n && io.x && io.y && bytes_fit(io.m, io.k, io.ldx) && bytes_fit(io.m, part.n, io.ldy);
}

// The exact test for a pair whose spans intersect, and the error naming both when they share
// a byte. Out of line: most runs never get here.
[[gnu::noinline]] void check_pair_exact(std::span<const LinearPartShape> parts, const shapejit_linear_group_io* io,
                                        int64_t out, int64_t other, bool other_is_output) {
  const Region a = region_of(parts[size_t(out)], io[out], out, true);
  const Region b = region_of(parts[size_t(other)], io[other], other, other_is_output);
  if (!overlaps(a, b)) return;
  invalid(describe(a) + " overlaps " + describe(b) +
          (other_is_output ? " (outputs must not alias)" : " (an output must not overlap any input)"));
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
  bool wrapped = false;
  for (size_t p = 0; p < parts.size(); ++p) {
    const LinearPartShape& part = parts[p];
    const shapejit_linear_group_io& a = io[p];
    if (!fast_io_ok(part, a)) check_io(part, a, int64_t(p));
    if (a.m == 0) continue;
    // Byte counts fit in int64 (checked above); a head-split output is one dense block.
    const bool dense = part.layout != SHAPEJIT_LAYOUT_ROW_MAJOR;
    const int64_t y_bytes = dense ? a.m * part.n * 4 : ((a.m - 1) * a.ldy + part.n) * 4;
    out[num_out++] = make_span(a.y, y_bytes, int64_t(p), wrapped);
    bool seen = false;
    for (size_t i = 0; i < num_in && !seen; ++i) {
      const shapejit_linear_group_io& b = io[in[i].part];
      seen = b.x == a.x && b.m == a.m && b.k == a.k && b.ldx == a.ldx;
    }
    if (!seen) in[num_in++] = make_span(a.x, ((a.m - 1) * a.ldx + a.k) * 4, int64_t(p), wrapped);
  }
  // Every pair in argument order, so the first overlap reported is the one the exact test
  // finds first; spans screen, and all pairs get the exact test if an end passed 2^64.
  for (size_t i = 0; i < num_out; ++i) {
    const Span& o = out[i];
    for (size_t j = 0; j < i; ++j)
      if (wrapped || spans_intersect(o, out[j])) check_pair_exact(parts, io, o.part, out[j].part, true);
    for (size_t j = 0; j < num_in; ++j)
      if (wrapped || spans_intersect(o, in[j])) check_pair_exact(parts, io, o.part, in[j].part, false);
  }
}

}  // namespace shapejit::rt
