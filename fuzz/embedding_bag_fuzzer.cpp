// libFuzzer harness of the embedding-bag C ABI. The fuzzer's bytes become one call, plain or
// extended (shapejit_embedding_bag_ex: f16/bf16/Q8/Q4/Q2 tables over the same bytes, output and
// weight dtypes, a compressed_indices_mapping, offsets as lengths): dtypes (invalid enum values included), sizes (hostile ones included), flags, offsets, indices
// (out of range, negative, near 2^31), NaN-filled tables, null pointers, the ISA, the thread
// count and the code limit. Every input checks:
//  - shapejit_embedding_bag_output_shapes and shapejit_embedding_bag return OK,
//    INVALID_ARGUMENT or UNSUPPORTED, agree with each other, and leave outputs untouched when
//    they fail (sentinel-filled, guard zones around every buffer);
//  - a call that succeeds equals ref::embedding_bag: every output byte, except that two NaNs
//    may differ in sign and payload (NaN-ness itself is exact);
//  - no input buffer is written;
//  - the same call in a group (shapejit_embedding_bags) next to a small valid call gives the same
//    status, the single call's message behind "embedding_bags: calls[k]: ", the same outputs, and
//    leaves both calls' outputs untouched when it fails;
//  - the same call prepared (shapejit_embedding_bag_prepare on its form, _prepared_run on its
//    batch) gives the same status and message, the same outputs, and none touched when it fails.
// Sizes the harness cannot back with memory are only ever paired with arguments the library
// must reject (null pointers, byte counts that overflow), or run with "sparse" tables whose
// in-range indices all point at allocated rows.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <regex>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "ref/embedding_bag.hpp"
#include "ref/float16.hpp"
#include "runtime/engine/isa_select.hpp"
#include "shapejit/shapejit.h"
#include "support/embag_cases.hpp"

namespace {

using shapejit::fuzz::Draw;
using shapejit::fuzz::fail;
using shapejit::test::EmbagOutput;
using shapejit::test::GuardedOutputs;

constexpr int64_t kMaxIndices = 200;
constexpr int64_t kMaxOffsets = 48;
constexpr int64_t kTableBudgetFloats = int64_t{1} << 16;  // memory backing a table
constexpr int64_t kOutputBudgetBytes = int64_t{1} << 20;   // per output buffer
constexpr int64_t kCodeLimitBytes = int64_t{32} << 20;     // keeps a long run's code bounded
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

shapejit::fuzz::Tally tally("embedding_bag_fuzzer");

// One drawn call with the memory behind it.
struct Call {
  shapejit_embedding_bag_ex_args ex{};     // ex.call is the plain call
  shapejit_embedding_bag_args& args = ex.call;
  bool use_ex = false;                     // through the ex entry points
  std::vector<int32_t> mapping;
  Call() = default;
  Call(const Call& o)
      : ex(o.ex), use_ex(o.use_ex), mapping(o.mapping), table(o.table), indices(o.indices), offsets(o.offsets),
        psw(o.psw), index_values(o.index_values), offset_values(o.offset_values), real_rows(o.real_rows),
        isa_choice(o.isa_choice), threads(o.threads), generic_only(o.generic_only),
        null_when_empty(o.null_when_empty), null_output(o.null_output) {}
  std::vector<float> table;                        // real_rows rows (the last one only dim wide)
  std::vector<unsigned char> indices, offsets;     // storage in the declared dtype (int64 if invalid)
  std::vector<float> psw;
  std::vector<int64_t> index_values, offset_values;  // as stored, for reports
  int64_t real_rows = 0;
  int isa_choice = 0, threads = 1;
  bool generic_only = false;
  bool null_when_empty = false;
  std::optional<EmbagOutput> null_output;  // a non-empty output passed as NULL
};

bool is_int_dtype(int64_t t) { return t == SHAPEJIT_I32 || t == SHAPEJIT_I64; }

// A count the harness backs with `real` elements: the drawn value when small, else 0 elements
// behind a pointer that makes the call invalid (NULL, or a count whose bytes overflow).
int64_t draw_count(Draw& d, int64_t max, int64_t& real, bool& force_null) {
  force_null = false;
  if (!d.chance(8)) {
    real = d.chance(70) ? d.in_range(0, std::min<int64_t>(max, 16)) : d.in_range(0, max);
    return real;
  }
  real = 0;
  static constexpr int64_t kHostile[] = {-1, std::numeric_limits<int64_t>::min(), int64_t{1} << 61, kI64Max,
                                         int64_t{1} << 40, int64_t{1} << 32};
  const int64_t v = kHostile[d.in_range(0, std::size(kHostile) - 1)];
  force_null = v > 0 && v < (int64_t{1} << 60);  // readable-looking sizes come with no memory
  return v;
}

void store_ints(std::vector<unsigned char>& out, int64_t dtype, const std::vector<int64_t>& values) {
  const size_t width = dtype == SHAPEJIT_I32 ? 4 : 8;
  out.assign(std::max<size_t>(values.size() * width, 8), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    if (width == 4) {
      const int32_t v = static_cast<int32_t>(values[i]);
      std::memcpy(out.data() + i * 4, &v, 4);
    } else {
      std::memcpy(out.data() + i * 8, &values[i], 8);
    }
  }
}

int64_t draw_dim(Draw& d) {
  if (d.chance(88)) return d.chance(75) ? d.in_range(0, 72) : d.in_range(73, 600);
  return d.size(4, 100);
}

int64_t draw_row_stride(Draw& d, int64_t dim) {
  if (d.chance(70)) return dim;
  if (d.chance(75)) return shapejit::fuzz::wrap_add(dim, d.in_range(1, 7));
  static constexpr int64_t kHostile[] = {-1, 0, int64_t{1} << 40, int64_t{1} << 61, kI64Max};
  return d.chance(30) ? shapejit::fuzz::wrap_sub(dim, 1) : kHostile[d.in_range(0, std::size(kHostile) - 1)];
}

// Offsets: a valid split of [0, N] (include_last_offset ends at N), then perhaps one mutation.
std::vector<int64_t> draw_offsets(Draw& d, int64_t count, int64_t n, bool include_last) {
  std::vector<int64_t> v(size_t(count), 0);
  for (auto& x : v) x = d.in_range(0, std::max<int64_t>(n, 0));
  std::sort(v.begin(), v.end());
  if (!v.empty()) {
    v.front() = 0;
    if (include_last) v.back() = std::max<int64_t>(n, 0);
  }
  if (!v.empty() && d.chance(25)) {
    const size_t at = size_t(d.in_range(0, count - 1));
    static constexpr int64_t kSpecial[] = {-1, 1, std::numeric_limits<int32_t>::max(),
                                           int64_t{1} << 31, std::numeric_limits<int32_t>::min(),
                                           std::numeric_limits<int64_t>::min(), kI64Max};
    switch (d.in_range(0, 3)) {
      case 0: v[at] = shapejit::fuzz::wrap_add(n, d.in_range(-2, 2)); break;   // near N: > N, partial end
      case 1: v[at] = at > 0 ? v[at - 1] - 1 : 1; break;                          // decreasing / nonzero first
      case 2: v[at] = kSpecial[d.in_range(0, std::size(kSpecial) - 1)]; break;
      default: v[at] = d.raw64(); break;
    }
  }
  return v;
}

// Index values: mostly rows of the real table, else out-of-range and negative ones. Values in
// [0, num_rows) beyond the real rows are folded back, so a valid call only reads real rows.
std::vector<int64_t> draw_indices(Draw& d, int64_t count, int64_t num_rows, int64_t real_rows, int64_t dtype) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  for (auto& x : v) {
    const int kind = d.chance(93) ? 0 : int(d.in_range(1, 8));
    switch (kind) {
      case 0: x = real_rows > 0 ? d.in_range(0, real_rows - 1) : -1; break;
      case 1: x = num_rows; break;
      case 2: x = shapejit::fuzz::wrap_add(num_rows, 1); break;
      case 3: x = -1; break;
      case 4: x = std::numeric_limits<int64_t>::min(); break;
      case 5: x = std::numeric_limits<int32_t>::min(); break;
      case 6: x = std::numeric_limits<int32_t>::max(); break;
      case 7: x = int64_t{1} << 32; break;
      default: x = d.raw64(); break;
    }
    if (dtype == SHAPEJIT_I32) x = static_cast<int32_t>(x);  // what the library will read
    if (x >= 0 && x < num_rows && x >= real_rows) x = real_rows > 0 ? x % real_rows : -1;
  }
  return v;
}

// The extended options. The table bytes stay the drawn floats: read as f16/bf16 elements or as
// packed quantized rows they are arbitrary bit patterns (NaN, inf, subnormal scales and biases).
void draw_ex_options(Draw& d, Call& c) {
  shapejit_embedding_bag_args& a = c.args;
  shapejit_embedding_bag_ex_init(&c.ex, &a);
  c.use_ex = d.chance(50);
  if (!c.use_ex) return;
  if (d.chance(60)) {  // another table dtype over the same bytes
    static constexpr int64_t kTables[] = {SHAPEJIT_F16, SHAPEJIT_BF16, SHAPEJIT_Q8, SHAPEJIT_Q4, SHAPEJIT_Q2};
    const int64_t t = kTables[d.in_range(0, 4)];
    shapejit::fuzz::store_enum(a.weight_dtype, t);
    const bool ordinary = a.dim >= 0 && a.dim <= (int64_t{1} << 20);  // hostile dims stay as drawn
    if (ordinary && t == SHAPEJIT_Q4 && d.chance(80)) a.dim += a.dim % 2;
    if (ordinary && t == SHAPEJIT_Q2 && d.chance(80)) a.dim += (4 - a.dim % 4) % 4;
    if (ordinary && t >= SHAPEJIT_Q8 && d.chance(80)) {  // a stride that holds the packed row (in bytes)
      const int64_t packed = t == SHAPEJIT_Q8 ? a.dim + 8 : t == SHAPEJIT_Q4 ? (a.dim + 1) / 2 + 4 : (a.dim + 3) / 4 + 4;
      a.row_stride = packed + (d.chance(60) ? 0 : d.in_range(1, 7));
      // Rows the table bytes back at this stride (indices beyond them are drawn below real_rows).
      const int64_t bytes = int64_t(c.table.size()) * 4;
      if (packed <= bytes) c.real_rows = std::min(c.real_rows, 1 + (bytes - packed) / std::max<int64_t>(a.row_stride, 1));
      else c.real_rows = 0;
      for (auto& v : c.index_values) v = c.real_rows > 0 && v >= 0 ? v % c.real_rows : v;
      int32_t index_dtype;
      std::memcpy(&index_dtype, &a.index_dtype, 4);  // any int: not loaded as the enum
      store_ints(c.indices, is_int_dtype(index_dtype) ? index_dtype : SHAPEJIT_I64, c.index_values);
    }
    const bool quantized = t >= SHAPEJIT_Q8;
    const int64_t natural = quantized ? SHAPEJIT_F32 : t;
    shapejit::fuzz::store_enum(c.ex.output_dtype,
                               d.chance(70) ? natural : d.dtype(d.chance(50) ? SHAPEJIT_F16 : SHAPEJIT_BF16, 80));
    shapejit::fuzz::store_enum(c.ex.per_sample_weights_dtype, d.chance(70) ? natural : d.dtype(SHAPEJIT_F16, 80));
    if (quantized && d.chance(35)) {  // pruning: mostly rows of the backed table and -1
      c.mapping.resize(size_t(std::max<int64_t>(c.real_rows, 1) + d.in_range(0, 4)));
      for (auto& m : c.mapping) {
        m = d.chance(20) ? -1 : d.chance(95) ? int32_t(d.in_range(0, std::max<int64_t>(c.real_rows, 1) - 1))
                                             : int32_t(d.raw32());
        // As for indices: an entry among the claimed rows but beyond the real ones is folded
        // back, so a valid call only reads real rows (a table may claim 2^32 rows).
        if (m >= c.real_rows && m < c.args.num_rows) m = c.real_rows > 0 ? int32_t(m % c.real_rows) : -1;
      }
      c.ex.compressed_indices_mapping = d.chance(97) ? c.mapping.data() : nullptr;
      c.ex.mapping_len = d.chance(95) ? int64_t(c.mapping.size()) : d.size(8, 50);
    }
  } else {
    int32_t natural;
    std::memcpy(&natural, &c.ex.output_dtype, 4);
    shapejit::fuzz::store_enum(c.ex.output_dtype, d.dtype(natural, 90));
  }
  c.ex.offsets_as_lengths = d.chance(20) ? 1 : 0;
  c.ex.skip_index_outputs = d.chance(15) ? 1 : 0;
  if (d.chance(20)) {  // strided output rows: mostly just past the row, sometimes below it or absurd
    const uint64_t dim = uint64_t(c.args.dim);  // any int64: the sums below wrap instead of overflowing
    c.ex.output_row_stride = d.chance(90) ? int64_t(dim + uint64_t(d.in_range(0, 70))) : d.chance(50) ? int64_t(dim - 1)
                                                                                                      : d.raw64();
  }
  if (d.chance(3)) c.ex.struct_size = size_t(d.in_range(0, int64_t(sizeof c.ex) + 16));
  // Drawn last, so the checked-in seeds' earlier draws keep their meaning. Nonzero: any value.
  c.ex.aten_loop_arithmetic = d.chance(20) ? (d.chance(90) ? 1 : int32_t(d.raw32())) : 0;
}

Call draw_call(FuzzedDataProvider& fdp) {
  Draw d(fdp);
  Call c;
  shapejit_embedding_bag_args& a = c.args;
  const uint8_t env = d.byte();
  c.isa_choice = env & 3;
  c.threads = 1 + ((env >> 2) & 1);
  c.generic_only = ((env >> 3) & 7) == 0;
  c.null_when_empty = (env >> 6) & 1;

  shapejit::fuzz::store_enum(a.weight_dtype, d.dtype(SHAPEJIT_F32, 92));
  const int64_t index_dtype = d.dtype(d.chance(50) ? SHAPEJIT_I64 : SHAPEJIT_I32, 95);
  const int64_t offset_dtype = d.dtype(d.chance(70) ? index_dtype : (d.chance(50) ? SHAPEJIT_I64 : SHAPEJIT_I32), 95);
  shapejit::fuzz::store_enum(a.index_dtype, index_dtype);
  shapejit::fuzz::store_enum(a.offset_dtype, offset_dtype);
  const int64_t mode = d.chance(95) ? d.in_range(0, 2) : (d.chance(50) ? 3 : -1);
  shapejit::fuzz::store_enum(a.mode, mode);
  a.dim = draw_dim(d);
  a.row_stride = draw_row_stride(d, a.dim);
  a.num_rows = d.size(48, 10);
  a.include_last_offset = d.chance(30) ? int32_t(d.chance(80) ? 1 : -7) : 0;
  a.aten_partial_final_offset = d.chance(10) ? 1 : 0;

  int64_t real_n = 0, real_offsets = 0;
  bool null_indices = false, null_offsets = false;
  a.num_indices = draw_count(d, kMaxIndices, real_n, null_indices);
  a.num_offsets = draw_count(d, kMaxOffsets, real_offsets, null_offsets);

  // The real table: as many rows as fit the budget (all of them for ordinary sizes).
  if (a.num_rows > 0 && a.dim >= 0 && a.row_stride >= a.dim && a.dim <= kTableBudgetFloats) {
    c.real_rows = std::min<int64_t>(a.num_rows, 1 + (kTableBudgetFloats - a.dim) / std::max<int64_t>(a.row_stride, 1));
    if (a.row_stride == 0) c.real_rows = std::min<int64_t>(a.num_rows, kTableBudgetFloats);
  }
  const int kind = d.value_kind();
  const int64_t table_floats = c.real_rows > 0 ? (c.real_rows - 1) * a.row_stride + a.dim : 0;
  // 4 floats of slack: a quantized row's trailer (8 bytes) lies past the last row's D elements.
  c.table.resize(size_t(std::max<int64_t>(table_floats, 0) + 4));
  for (auto& x : c.table) x = d.value(kind);

  c.offset_values = draw_offsets(d, real_offsets, real_n, a.include_last_offset != 0);
  c.index_values = draw_indices(d, real_n, a.num_rows, c.real_rows, index_dtype);
  store_ints(c.offsets, is_int_dtype(offset_dtype) ? offset_dtype : SHAPEJIT_I64, c.offset_values);
  store_ints(c.indices, is_int_dtype(index_dtype) ? index_dtype : SHAPEJIT_I64, c.index_values);

  if (d.chance(mode == SHAPEJIT_SUM ? 35 : 4)) {
    const int psw_kind = d.value_kind();
    c.psw.resize(size_t(std::max<int64_t>(real_n, 1)));
    for (auto& x : c.psw) x = d.value(psw_kind);
  }
  if (d.chance(25)) {
    a.has_padding_idx = d.chance(85) ? 1 : -3;
    if (d.chance(85) && a.num_rows > 0) {
      const int64_t span = std::min<int64_t>(a.num_rows, int64_t{1} << 40);
      a.padding_idx = (d.chance(50) && !c.index_values.empty())
                          ? c.index_values[size_t(d.in_range(0, int64_t(c.index_values.size()) - 1))]
                          : d.in_range(-span, span - 1);
      if (d.chance(30) && a.padding_idx >= 0) a.padding_idx = shapejit::fuzz::wrap_sub(a.padding_idx, a.num_rows);
    } else {
      static constexpr int64_t kHostile[] = {std::numeric_limits<int64_t>::min(), kI64Max, -1};
      a.padding_idx = d.chance(50) ? a.num_rows : kHostile[d.in_range(0, std::size(kHostile) - 1)];
      if (d.chance(30)) a.padding_idx = shapejit::fuzz::wrap_sub(-1, a.num_rows);
    }
  }

  a.weight = d.chance(4) ? nullptr : c.table.data();
  a.indices = null_indices || d.chance(3) ? nullptr : c.indices.data();
  a.offsets = null_offsets || d.chance(3) ? nullptr : c.offsets.data();
  a.per_sample_weights = c.psw.empty() || d.chance(3) ? nullptr : c.psw.data();
  if (d.chance(4)) c.null_output = static_cast<EmbagOutput>(d.in_range(0, 3));
  draw_ex_options(d, c);
  return c;
}

std::string describe(const Call& c) {
  const auto& a = c.args;
  int32_t wt, it, ot, md;
  std::memcpy(&wt, &a.weight_dtype, 4);
  std::memcpy(&it, &a.index_dtype, 4);
  std::memcpy(&ot, &a.offset_dtype, 4);
  std::memcpy(&md, &a.mode, 4);
  std::string s = "call: weight dtype " + std::to_string(wt) + " rows " + std::to_string(a.num_rows) + " (real " +
                  std::to_string(c.real_rows) + ") dim " + std::to_string(a.dim) + " stride " +
                  std::to_string(a.row_stride) + (a.weight ? "" : " (weight NULL)") + "\n  indices dtype " +
                  std::to_string(it) + " N " + std::to_string(a.num_indices) + (a.indices ? " " : " NULL ") +
                  shapejit::fuzz::list_text(c.index_values) + "\n  offsets dtype " + std::to_string(ot) + " len " +
                  std::to_string(a.num_offsets) + (a.offsets ? " " : " NULL ") +
                  shapejit::fuzz::list_text(c.offset_values) + "\n  mode " + std::to_string(md) + " psw " +
                  (a.per_sample_weights ? "yes" : "no") + " padding " + std::to_string(a.has_padding_idx) + "/" +
                  std::to_string(a.padding_idx) + " include_last_offset " + std::to_string(a.include_last_offset) +
                  " aten_partial " + std::to_string(a.aten_partial_final_offset) + "\n  isa choice " +
                  std::to_string(c.isa_choice) + " threads " + std::to_string(c.threads) + " generic_only " +
                  std::to_string(c.generic_only) + " null_when_empty " + std::to_string(c.null_when_empty);
  if (c.null_output) s += " NULL output " + std::string(shapejit::test::output_name(*c.null_output));
  if (c.use_ex) {
    int32_t out_t, psw_t;
    std::memcpy(&out_t, &c.ex.output_dtype, 4);
    std::memcpy(&psw_t, &c.ex.per_sample_weights_dtype, 4);
    s += "\n  ex: struct_size " + std::to_string(c.ex.struct_size) + " output dtype " + std::to_string(out_t) +
         " psw dtype " + std::to_string(psw_t) + " mapping " + (c.ex.compressed_indices_mapping ? "" : "NULL ") +
         std::to_string(c.ex.mapping_len) + " " + shapejit::fuzz::list_text(std::vector<int64_t>(c.mapping.begin(), c.mapping.end())) +
         " offsets_as_lengths " + std::to_string(c.ex.offsets_as_lengths) + " skip_index_outputs " +
         std::to_string(c.ex.skip_index_outputs) + " output_row_stride " + std::to_string(c.ex.output_row_stride) +
         " aten_loop_arithmetic " + std::to_string(c.ex.aten_loop_arithmetic);
  }
  if (!c.table.empty()) s += "\n  table[0] " + shapejit::fuzz::float_text(c.table[0]);
  return s;
}

// The output dtype of a call that passed validation.
shapejit_dtype output_dtype(const Call& c) {
  if (!c.use_ex || c.ex.struct_size < offsetof(shapejit_embedding_bag_ex_args, per_sample_weights_dtype)) {
    int32_t t;
    std::memcpy(&t, &c.args.weight_dtype, 4);
    return t >= SHAPEJIT_Q8 ? SHAPEJIT_F32 : shapejit_dtype(t);
  }
  int32_t t;
  std::memcpy(&t, &c.ex.output_dtype, 4);  // valid: the call passed validation
  return shapejit_dtype(t);
}

// The ex struct as the library reads it (fields past struct_size take the defaults).
shapejit_embedding_bag_ex_args effective_ex(const Call& c) {
  shapejit_embedding_bag_ex_args e{};
  shapejit_embedding_bag_ex_init(&e, &c.args);
  if (!c.use_ex) return e;
  const size_t size = c.ex.struct_size;
  auto take = [&](size_t offset, size_t bytes) {
    if (offset + bytes <= size) std::memcpy(reinterpret_cast<char*>(&e) + offset, reinterpret_cast<const char*>(&c.ex) + offset, bytes);
  };
  take(offsetof(shapejit_embedding_bag_ex_args, output_dtype), sizeof e.output_dtype);
  take(offsetof(shapejit_embedding_bag_ex_args, per_sample_weights_dtype), sizeof e.per_sample_weights_dtype);
  take(offsetof(shapejit_embedding_bag_ex_args, compressed_indices_mapping), sizeof e.compressed_indices_mapping);
  take(offsetof(shapejit_embedding_bag_ex_args, mapping_len), sizeof e.mapping_len);
  take(offsetof(shapejit_embedding_bag_ex_args, offsets_as_lengths), sizeof e.offsets_as_lengths);
  take(offsetof(shapejit_embedding_bag_ex_args, skip_index_outputs), sizeof e.skip_index_outputs);
  take(offsetof(shapejit_embedding_bag_ex_args, output_row_stride), sizeof e.output_row_stride);
  take(offsetof(shapejit_embedding_bag_ex_args, aten_loop_arithmetic), sizeof e.aten_loop_arithmetic);
  return e;
}

// Elements between the rows of a valid call's output (0: dense).
int64_t output_stride(const Call& c) { return effective_ex(c).output_row_stride; }

bool fits_budget(const shapejit_embedding_bag_shapes& s, int64_t output_row_stride) {
  const int64_t ints = s.index_out_dtype == SHAPEJIT_I32 ? 4 : 8;
  auto ok = [](int64_t rows, int64_t cols, int64_t bytes) {
    int64_t n = 0;
    return !__builtin_mul_overflow(rows, cols, &n) && n <= kOutputBudgetBytes / bytes;
  };
  return ok(s.output_rows, std::max(s.output_cols, output_row_stride), 4) && ok(s.offset2bag_len, 1, ints) && ok(s.bag_size_len, 1, ints) &&
         ok(s.max_indices_rows, s.max_indices_cols, ints);
}

// Every byte of the library's outputs equals the reference's; NaNs may differ in bits only.
void compare_with_reference(const Call& c, GuardedOutputs& api, const shapejit_embedding_bag_shapes& shapes) {
  const shapejit_dtype out_dtype = output_dtype(c);
  GuardedOutputs want(shapes, 0x5A, c.null_when_empty, out_dtype);
  shapejit_embedding_bag_ex_args dense = effective_ex(c);
  dense.output_row_stride = 0;  // the reference writes `want`'s dense rows
  shapejit::ref::embedding_bag(dense, want.data(EmbagOutput::kOutput), want.data(EmbagOutput::kOffset2bag),
                               want.data(EmbagOutput::kBagSize), want.data(EmbagOutput::kMaxIndices));
  const size_t ints = shapes.index_out_dtype == SHAPEJIT_I32 ? 4 : 8;
  if (const std::string gaps = api.check_output_gaps(); !gaps.empty()) fail(gaps);
  const std::vector<std::byte> got_rows = api.output_rows(), want_rows = want.output_rows();
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs) {
    const bool rows = which == EmbagOutput::kOutput;  // the library's rows may be strided
    const std::span<const std::byte> got = rows ? std::span<const std::byte>(got_rows) : api.bytes(which);
    const std::span<const std::byte> ref = rows ? std::span<const std::byte>(want_rows) : want.bytes(which);
    const size_t width = which == EmbagOutput::kOutput ? (out_dtype == SHAPEJIT_F32 ? 4 : 2) : ints;
    tally.checked += int64_t(got.size() / width);
    for (size_t e = 0; e < got.size() / width; ++e) {
      if (std::memcmp(got.data() + e * width, ref.data() + e * width, width) == 0) continue;
      if (which == EmbagOutput::kOutput) {
        float x, y;
        if (width == 4) {
          std::memcpy(&x, got.data() + e * 4, 4);
          std::memcpy(&y, ref.data() + e * 4, 4);
        } else {
          uint16_t hx, hy;
          std::memcpy(&hx, got.data() + e * 2, 2);
          std::memcpy(&hy, ref.data() + e * 2, 2);
          const bool f16 = out_dtype == SHAPEJIT_F16;
          x = f16 ? shapejit::ref::f16_to_f32(hx) : shapejit::ref::bf16_to_f32(hx);
          y = f16 ? shapejit::ref::f16_to_f32(hy) : shapejit::ref::bf16_to_f32(hy);
        }
        if (std::isnan(x) && std::isnan(y)) continue;
        fail(std::string("output[") + std::to_string(e) + "] = " + shapejit::fuzz::float_text(x) +
             " but the reference gives " + shapejit::fuzz::float_text(y));
      }
      int64_t x = 0, y = 0;
      std::memcpy(&x, got.data() + e * width, width);
      std::memcpy(&y, ref.data() + e * width, width);
      if (width == 4) x = int32_t(x), y = int32_t(y);
      fail(std::string(shapejit::test::output_name(which)) + "[" + std::to_string(e) + "] = " + std::to_string(x) +
           " but the reference gives " + std::to_string(y));
    }
  }
}

// Output buffers for a call whose shapes are unknown (rejected): a few small guarded buffers.
shapejit_embedding_bag_shapes stand_in_shapes() {
  shapejit_embedding_bag_shapes s{};
  s.output_rows = 4;
  s.output_cols = 16;
  s.index_out_dtype = SHAPEJIT_I64;
  s.offset2bag_len = 16;
  s.bag_size_len = 4;
  s.max_indices_rows = 4;
  s.max_indices_cols = 16;
  return s;
}

// Guarded outputs for a call: of its shapes when they are known, else the stand-ins.
GuardedOutputs outputs_for(const Call& c, const shapejit_embedding_bag_shapes& shapes, bool shapes_ok) {
  return GuardedOutputs(shapes_ok ? shapes : stand_in_shapes(), 0xCD, c.null_when_empty,
                        shapes_ok ? output_dtype(c) : SHAPEJIT_F32, shapes_ok ? output_stride(c) : 0);
}

// The pointers of `out` to pass where the call alone passed `alone` (NULL where it passed NULL).
void pointers_like(void* const alone[4], GuardedOutputs& out, void* p[4]) {
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs)
    p[int(which)] = alone[int(which)] ? out.data(which) : nullptr;
}

// A message with its addresses blanked: runs into other buffers name other addresses.
std::string without_addresses(const std::string& m) { return std::regex_replace(m, std::regex("0x[0-9a-f]+"), "0x"); }

// Whether any of the fuzzer's outputs shares a byte with [begin, end).
bool holds_output(uintptr_t begin, uintptr_t end, const GuardedOutputs& out) {
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs) {
    const std::span<const std::byte> bytes = out.bytes(which);
    const auto p = reinterpret_cast<uintptr_t>(bytes.data());
    if (!bytes.empty() && p < end && p + bytes.size() > begin) return true;
  }
  return false;
}

// A call may claim far more table rows (or mapping entries) than the fuzzer backs (only the rows
// its indices name are real), so a claimed input can span the fuzzer's own output buffers:
// embedding_bag then rightly rejects the overlap, which output_shapes (seeing no outputs) cannot.
bool claimed_input_holds_output(const Call& c, const GuardedOutputs& out) {
  const shapejit_embedding_bag_args& a = c.args;
  if (a.weight != nullptr && a.num_rows > 0 && a.dim > 0) {
    const auto begin = reinterpret_cast<uintptr_t>(a.weight);
    int32_t t;
    std::memcpy(&t, &a.weight_dtype, 4);
    const uintptr_t rows_before = uintptr_t(a.num_rows - 1) * uintptr_t(a.row_stride);
    const uintptr_t end = t >= SHAPEJIT_Q8 ? begin + rows_before + uintptr_t(a.dim) + 8  // bytes (at most D + 8)
                          : t == SHAPEJIT_F16 || t == SHAPEJIT_BF16 ? begin + (rows_before + uintptr_t(a.dim)) * 2
                                                                    : begin + (rows_before + uintptr_t(a.dim)) * 4;
    if (holds_output(begin, end, out)) return true;
  }
  const shapejit_embedding_bag_ex_args e = effective_ex(c);
  if (e.compressed_indices_mapping == nullptr || e.mapping_len <= 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(e.compressed_indices_mapping);
  return holds_output(begin, begin + uintptr_t(e.mapping_len) * 4, out);
}

// The call again, in a group with a small valid sum (before or after it): the group must answer
// as the call alone did (`status`, `message`, `alone`'s outputs), naming the call by position.
void run_in_group(const Call& c, void* const ptr_alone[4], shapejit_status status, const std::string& message,
                  const GuardedOutputs& alone, const shapejit_embedding_bag_shapes& shapes, bool shapes_ok) {
  static const float kTable[4] = {1, 2, 3, 4};
  static const int64_t kIndex[1] = {1}, kOffset[1] = {0};
  shapejit_embedding_bag_args small{};
  small.weight = kTable, small.weight_dtype = SHAPEJIT_F32, small.num_rows = 2, small.dim = 2, small.row_stride = 2;
  small.indices = kIndex, small.index_dtype = SHAPEJIT_I64, small.num_indices = 1;
  small.offsets = kOffset, small.offset_dtype = SHAPEJIT_I64, small.num_offsets = 1;
  shapejit_embedding_bag_ex_args small_ex{}, plain_ex{};
  shapejit_embedding_bag_ex_init(&small_ex, &small);
  shapejit_embedding_bag_ex_init(&plain_ex, &c.args);
  shapejit_embedding_bag_shapes small_shapes{};
  if (shapejit_embedding_bag_output_shapes(&small, &small_shapes) != SHAPEJIT_OK) fail("the small call is invalid");
  GuardedOutputs small_out(small_shapes, 0xEE, true);

  GuardedOutputs out = outputs_for(c, shapes, shapes_ok);
  void* p[4];
  pointers_like(ptr_alone, out, p);
  const size_t k = size_t(c.args.num_indices & 1);  // the fuzzed call's position
  const shapejit_embedding_bag_ex_args* calls[2];
  shapejit_embedding_bag_outputs outs[2];
  calls[k] = c.use_ex ? &c.ex : &plain_ex;
  outs[k] = {p[0], p[1], p[2], p[3]};
  calls[1 - k] = &small_ex;
  outs[1 - k] = {small_out.data(EmbagOutput::kOutput), small_out.data(EmbagOutput::kOffset2bag),
                 small_out.data(EmbagOutput::kBagSize), small_out.data(EmbagOutput::kMaxIndices)};
  const shapejit_status group = shapejit_embedding_bags(calls, outs, 2);
  shapejit::fuzz::check_status(group, "shapejit_embedding_bags");
  if (const std::string g = out.check_guards() + small_out.check_guards(); !g.empty()) fail("in a group: " + g);
  const std::string group_message = shapejit_last_error();
  // A call may claim more table than the harness backs: the claimed input may then hold some
  // outputs of one run and not the other's, and an overlap is rightly rejected in that run only
  // (or named differently).
  const bool claims_outputs = claimed_input_holds_output(c, alone) || claimed_input_holds_output(c, out) ||
                              claimed_input_holds_output(c, small_out);
  if (group != status) {
    if (!claims_outputs)
      fail("alone the call gave status " + std::to_string(int(status)) + " (" + message + "), in a group " +
           std::to_string(int(group)) + " (" + group_message + ")");
    if (group == SHAPEJIT_OK && shapes_ok) compare_with_reference(c, out, shapes);
    if (group != SHAPEJIT_OK && (!out.untouched() || !small_out.untouched()))
      fail("a rejected group changed an output: " + group_message);
    return;
  }
  if (status != SHAPEJIT_OK) {
    // The group's outputs are other buffers: addresses in the messages differ.
    const std::string rule = message.rfind("embedding_bag: ", 0) == 0 ? message.substr(15) : message;
    const std::string want = "embedding_bags: calls[" + std::to_string(k) + "]: " + rule;
    if (!claims_outputs && without_addresses(group_message) != without_addresses(want))
      fail("in a group the message is '" + group_message + "', not '" + want + "'");
    if (!out.untouched() || !small_out.untouched()) fail("a rejected group changed an output: " + group_message);
    return;
  }
  float sum[2];
  std::memcpy(sum, small_out.bytes(EmbagOutput::kOutput).data(), sizeof sum);
  if (sum[0] != 3 || sum[1] != 4) fail("the small call of a group computed the wrong sum");
  if (const std::string d = shapejit::test::first_output_difference(alone, out, output_dtype(c)); !d.empty())
    fail("in a group the outputs differ from the call alone: " + d);
}

// The call again as a prepared call (its form prepared, its batch run): the same status and
// message as the call alone, its outputs when it succeeds, none touched when it fails.
void run_prepared(const Call& c, void* const ptr_alone[4], shapejit_status status, const std::string& message,
                  const GuardedOutputs& alone, const shapejit_embedding_bag_shapes& shapes, bool shapes_ok) {
  shapejit_embedding_bag_ex_args plain_ex{};
  shapejit_embedding_bag_ex_init(&plain_ex, &c.args);
  const shapejit_embedding_bag_ex_args& form = c.use_ex ? c.ex : plain_ex;
  GuardedOutputs out = outputs_for(c, shapes, shapes_ok);
  void* p[4];
  pointers_like(ptr_alone, out, p);
  shapejit_embedding_bag_prepared* prepared = nullptr;
  shapejit_status got = shapejit_embedding_bag_prepare(&form, &prepared);
  shapejit::fuzz::check_status(got, "shapejit_embedding_bag_prepare");
  if ((got == SHAPEJIT_OK) != (prepared != nullptr)) fail("shapejit_embedding_bag_prepare: status and handle disagree");
  if (got == SHAPEJIT_OK) {
    const shapejit_embedding_bag_batch batch{c.args.indices, c.args.num_indices, c.args.offsets, c.args.num_offsets,
                                             c.args.per_sample_weights};
    got = shapejit_embedding_bag_prepared_run(prepared, &batch, p[0], p[1], p[2], p[3]);
    shapejit::fuzz::check_status(got, "shapejit_embedding_bag_prepared_run");
  }
  const std::string got_message = shapejit_last_error();
  shapejit_embedding_bag_prepared_destroy(prepared);
  if (const std::string g = out.check_guards(); !g.empty()) fail("prepared: " + g);
  // As in a group, a claimed input may hold some outputs of one run and not the other's.
  const bool claims_outputs = claimed_input_holds_output(c, alone) || claimed_input_holds_output(c, out);
  if (got != status || (got != SHAPEJIT_OK && without_addresses(got_message) != without_addresses(message))) {
    if (!claims_outputs)
      fail("alone the call gave status " + std::to_string(int(status)) + " (" + message + "), prepared " +
           std::to_string(int(got)) + " (" + got_message + ")");
  }
  if (got != SHAPEJIT_OK) {
    if (!out.untouched()) fail("a rejected prepared run changed an output: " + got_message);
    return;
  }
  if (status == SHAPEJIT_OK) {
    if (const std::string d = shapejit::test::first_output_difference(alone, out, output_dtype(c)); !d.empty())
      fail("prepared, the outputs differ from the call alone: " + d);
  } else if (shapes_ok) {
    compare_with_reference(c, out, shapes);
  }
}

void run_call(const Call& c) {
  shapejit_embedding_bag_shapes shapes;
  std::memset(&shapes, 0xA5, sizeof shapes);
  const shapejit_embedding_bag_shapes before = shapes;
  const shapejit_status shape_status = c.use_ex ? shapejit_embedding_bag_ex_output_shapes(&c.ex, &shapes)
                                                : shapejit_embedding_bag_output_shapes(&c.args, &shapes);
  shapejit::fuzz::check_status(shape_status, "shapejit_embedding_bag_output_shapes");
  const std::string shape_error = shapejit_last_error();
  if (shape_status != SHAPEJIT_OK && std::memcmp(&shapes, &before, sizeof shapes) != 0)
    fail("a rejected shapejit_embedding_bag_output_shapes wrote its shapes argument");
  if (shape_status == SHAPEJIT_OK && !fits_budget(shapes, output_stride(c))) {  // valid, but too large to back
    ++tally.too_large;
    return;
  }

  GuardedOutputs out = outputs_for(c, shapes, shape_status == SHAPEJIT_OK);
  void* ptr[4];
  for (EmbagOutput which : shapejit::test::kAllEmbagOutputs) ptr[int(which)] = out.data(which);
  bool nulled_nonempty = false;
  if (c.null_output && out.elements(*c.null_output) > 0) {
    ptr[int(*c.null_output)] = nullptr;
    nulled_nonempty = true;
  }
  const std::vector<float> table = c.table, psw = c.psw;
  const std::vector<unsigned char> indices = c.indices, offsets = c.offsets;
  const std::vector<int32_t> mapping = c.mapping;
  const shapejit_status status = c.use_ex ? shapejit_embedding_bag_ex(&c.ex, ptr[0], ptr[1], ptr[2], ptr[3])
                                          : shapejit_embedding_bag(&c.args, ptr[0], ptr[1], ptr[2], ptr[3]);
  shapejit::fuzz::check_status(status, "shapejit_embedding_bag");
  if (const std::string g = out.check_guards(); !g.empty()) fail(g);
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {  // bitwise: NaN != NaN
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  };
  if (!same(table, c.table) || !same(psw, c.psw) || indices != c.indices || offsets != c.offsets ||
      mapping != c.mapping)
    fail("shapejit_embedding_bag wrote into one of its inputs");

  if (shape_status != SHAPEJIT_OK) {
    if (status != shape_status || shape_error != shapejit_last_error())
      fail("output_shapes rejected the call with status " + std::to_string(int(shape_status)) + " (" + shape_error +
           ") but embedding_bag returned " + std::to_string(int(status)) + " (" + shapejit_last_error() + ")");
  } else if (nulled_nonempty) {
    if (status != SHAPEJIT_INVALID_ARGUMENT)
      fail("a NULL non-empty output gave status " + std::to_string(int(status)) + ", not INVALID_ARGUMENT");
  } else if (status != SHAPEJIT_OK && !(status == SHAPEJIT_INVALID_ARGUMENT && claimed_input_holds_output(c, out))) {
    fail(std::string("output_shapes accepted the call but embedding_bag rejected it: ") + shapejit_last_error());
  }
  const std::string message = shapejit_last_error();
  if (status != SHAPEJIT_OK) {
    if (!out.untouched()) fail("a rejected call changed an output: " + message);
    ++tally.rejected;
  } else {
    compare_with_reference(c, out, shapes);
    ++tally.accepted;
  }
  run_in_group(c, ptr, status, message, out, shapes, shape_status == SHAPEJIT_OK);
  run_prepared(c, ptr, status, message, out, shapes, shape_status == SHAPEJIT_OK);
}


}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider fdp(data, size);
  const Call c = draw_call(fdp);
  shapejit::fuzz::set_call_description(describe(c));

  std::unique_ptr<shapejit::rt::ScopedIsaOverride> pin;
  static constexpr shapejit::jit::Isa kIsas[] = {shapejit::jit::Isa::kAvx512, shapejit::jit::Isa::kAvx2,
                                                 shapejit::jit::Isa::kScalar};
  if (c.isa_choice > 0 && shapejit::rt::host_supports(kIsas[c.isa_choice - 1]))
    pin = std::make_unique<shapejit::rt::ScopedIsaOverride>(kIsas[c.isa_choice - 1]);
  if (shapejit_set_num_threads(c.threads) != SHAPEJIT_OK) fail("set_num_threads failed");
  if (shapejit_set_code_memory_limit(c.generic_only ? 0 : kCodeLimitBytes) != SHAPEJIT_OK)
    fail("set_code_memory_limit failed");
  run_call(c);
  return 0;
}
