// Scalar reference of the embedding-bag forward. Written for clarity, one rule at a time, in the
// order of the semantics documents; the generic and JIT kernels must match it bitwise.
//   f32 tables:      embedding-bag-semantics.md rules 1-4.
//   f16/bf16 tables: quantized-tables-semantics.md H1-H6 (f32 accumulator, rounded once; mean
//                    rounds the sum and the count to the table dtype before dividing; bf16
//                    without padding_idx fuses weighted terms and rounds sums half up, H6).
//   Q8/Q4/Q2 tables: B4 (bias first, then the scaled code by fmaf), beyond-ATen 3-6 (mean,
//                    max, f16/bf16 outputs rounded once, padding on the index as given).
#include "ref/embedding_bag.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ref/int_access.hpp"
#include "ref/table_rows.hpp"

namespace shapejit::ref {

int64_t embedding_bag_num_bags(const shapejit_embedding_bag_args& a) {
  return std::max<int64_t>(0, a.num_offsets - (a.include_last_offset ? 1 : 0));
}

shapejit_dtype embedding_bag_index_out_dtype(const shapejit_embedding_bag_args& a) {
  return a.index_dtype == a.offset_dtype ? a.index_dtype : SHAPEJIT_I64;
}

shapejit_embedding_bag_shapes embedding_bag_shapes(const shapejit_embedding_bag_args& a) {
  const int64_t bags = embedding_bag_num_bags(a);
  shapejit_embedding_bag_shapes s{};
  s.output_rows = bags;
  s.output_cols = a.dim;
  s.index_out_dtype = embedding_bag_index_out_dtype(a);
  // Sum without padding never needs the position->bag map, so ATen returns it empty.
  s.offset2bag_len = (a.mode == SHAPEJIT_SUM && !a.has_padding_idx) ? 0 : a.num_indices;
  // Sum returns zeros shaped like offsets; mean and max return one count per bag.
  s.bag_size_len = a.mode == SHAPEJIT_SUM ? a.num_offsets : bags;
  if (a.mode == SHAPEJIT_MAX) {
    s.max_indices_rows = bags;
    s.max_indices_cols = a.dim;
  } else {
    s.max_indices_rows = s.bag_size_len;
    s.max_indices_cols = 1;
  }
  return s;
}

shapejit_embedding_bag_shapes embedding_bag_shapes(const shapejit_embedding_bag_ex_args& a) {
  shapejit_embedding_bag_shapes s = embedding_bag_shapes(a.call);
  if (a.skip_index_outputs) s.offset2bag_len = s.bag_size_len = s.max_indices_rows = 0;
  return s;
}

shapejit_embedding_bag_ex_args embedding_bag_ex_defaults(const shapejit_embedding_bag_args& a) {
  shapejit_embedding_bag_ex_args ex{};
  ex.struct_size = sizeof ex;
  ex.call = a;
  // Copied as ints: the call is not validated yet, and an enum field holding a value outside
  // the enum must not be loaded as the enum (runtime/engine/c_enum.hpp).
  int32_t table;
  std::memcpy(&table, &a.weight_dtype, sizeof table);
  const int32_t dtype = is_quantized_table(table) ? int32_t{SHAPEJIT_F32} : table;
  std::memcpy(&ex.output_dtype, &dtype, sizeof dtype);
  std::memcpy(&ex.per_sample_weights_dtype, &dtype, sizeof dtype);
  return ex;
}

namespace {

struct BagSpan {
  int64_t begin, end;  ///< positions reduced
  int64_t count_end;   ///< positions counted (differs only for the ATen partial-final-offset quirk)
};

// Bag b of a span-offsets call: [offsets[b], offsets[b + 1]), the last one up to N.
BagSpan span_bag(const shapejit_embedding_bag_args& a, int64_t b, int64_t bags) {
  const int64_t begin = load_int(a.offsets, a.offset_dtype, b);
  const int64_t end = b + 1 < a.num_offsets ? load_int(a.offsets, a.offset_dtype, b + 1) : a.num_indices;
  // ATen 1.13 counts the last bag up to N even when offsets[B] < N (opt-in quirk).
  const int64_t count_end = b == bags - 1 ? a.num_indices : end;
  return {begin, end, count_end};
}

// Bag b of a lengths-offsets call (B3): the next offsets[b + 1] - offsets[b] positions after the
// `consumed` ones (the last bag without include_last_offset: N - offsets[b]); negative is empty.
BagSpan length_bag(const shapejit_embedding_bag_args& a, int64_t b, int64_t consumed) {
  const int64_t start = load_int(a.offsets, a.offset_dtype, b);
  const int64_t next = b + 1 < a.num_offsets ? load_int(a.offsets, a.offset_dtype, b + 1) : a.num_indices;
  const int64_t length = next > start ? next - start : 0;  // validation keeps it within N
  return {consumed, consumed + length, consumed + length};
}

// What one call reads, decoded once: the table, the index -> row map and the padding index.
struct Call {
  const shapejit_embedding_bag_ex_args& ex;
  const shapejit_embedding_bag_args& a;
  int64_t table;             // table dtype
  int64_t row_stride_bytes;  // row_stride counts elements of float tables, bytes of quantized ones
  int64_t padding_index;     // the index as given that pads (-1: none)

  explicit Call(const shapejit_embedding_bag_ex_args& e)
      : ex(e), a(e.call), table(a.weight_dtype),
        // With no rows nothing is read and the stride may be anything up to INT64_MAX.
        row_stride_bytes(a.num_rows == 0 || is_quantized_table(table) ? a.row_stride
                                                                       : a.row_stride * float_element_bytes(table)),
        padding_index(-1) {
    // padding_idx names an index as given; negative values wrap by the index space, which is
    // the mapping for a pruned table and the rows otherwise.
    const int64_t space = e.compressed_indices_mapping ? e.mapping_len : a.num_rows;
    if (a.has_padding_idx) padding_index = a.padding_idx < 0 ? a.padding_idx + space : a.padding_idx;
  }

  int64_t index(int64_t i) const { return load_int(a.indices, a.index_dtype, i); }
  bool is_padding(int64_t index) const { return index == padding_index; }
  // The table row of an index, or -1 when a pruned table skips it.
  int64_t row_of(int64_t index) const {
    return ex.compressed_indices_mapping ? ex.compressed_indices_mapping[index] : index;
  }
  // Only called when dim > 0 (a table of dim 0 may be NULL: offsetting NULL is undefined).
  const unsigned char* row(int64_t r) const { return static_cast<const unsigned char*>(a.weight) + r * row_stride_bytes; }
  float weight(int64_t i) const { return load_weight(a.per_sample_weights, ex.per_sample_weights_dtype, i); }

  // Calls f(position, index as given, row) for every position of [begin, end) that
  // contributes: not padding, not pruned.
  template <class F>
  void for_each_row(int64_t begin, int64_t end, F&& f) const {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t idx = index(i);
      if (is_padding(idx)) continue;
      const int64_t r = row_of(idx);
      if (r < 0) continue;
      f(i, idx, r);
    }
  }
  int64_t count(int64_t begin, int64_t end) const {
    int64_t n = 0;
    for_each_row(begin, end, [&](int64_t, int64_t, int64_t) { ++n; });
    return n;
  }
};

// ---- Element values -----------------------------------------------------------------------

float float_value(int64_t table, const unsigned char* row, int64_t j) {
  if (table == SHAPEJIT_F32) return float_element<SHAPEJIT_F32>(row, j);
  if (table == SHAPEJIT_F16) return float_element<SHAPEJIT_F16>(row, j);
  return float_element<SHAPEJIT_BF16>(row, j);
}

// Scale, bias and codes of a quantized row.
struct Dequantizer {
  float scale, bias;
  const unsigned char* codes;
  int bits;
  Dequantizer(int64_t table, const unsigned char* row, int64_t dim) : codes(row), bits(quantized_bits(table)) {
    if (bits == 8) set(quantized_row<8>(row, dim));
    else if (bits == 4) set(quantized_row<4>(row, dim));
    else set(quantized_row<2>(row, dim));
  }
  template <int kBits>
  void set(const QuantizedRow<kBits>& q) { scale = q.scale, bias = q.bias; }
  uint32_t code(int64_t j) const {
    if (bits == 8) return QuantizedRow<8>{codes, 0, 0}.code(j);
    if (bits == 4) return QuantizedRow<4>{codes, 0, 0}.code(j);
    return QuantizedRow<2>{codes, 0, 0}.code(j);
  }
};

// The value max mode compares: the widened element, or the dequantized code (beyond-ATen 3).
float element_value(const Call& c, int64_t r, int64_t j) {
  if (!is_quantized_table(c.table)) return float_value(c.table, c.row(r), j);
  const Dequantizer q(c.table, c.row(r), c.a.dim);
  return dequantized_value(q.scale, q.bias, q.code(j));
}

// ---- Reductions: each fills res[0, D) with the bag's f32 result ----------------------------

// f32 rules 1-3 and H1-H3, H6: sum from +0.0 in index order (weighted: fmaf, as torch's FBGEMM
// kernel; in ATen's loop's arithmetic, padding_idx or aten_loop_arithmetic, w * x rounded to f32,
// then one add; f16: w * x is exact in f32, so either).
void sum_float_table(const Call& c, const BagSpan& s, std::vector<float>& res) {
  std::fill(res.begin(), res.end(), 0.0f);
  const bool weighted = c.a.per_sample_weights != nullptr;
  const bool fused = weighted_terms_fused(c.table, aten_loop_arithmetic(c.ex));
  c.for_each_row(s.begin, s.end, [&](int64_t i, int64_t, int64_t r) {
    const unsigned char* row = c.row(r);
    const float w = weighted ? c.weight(i) : 1.0f;
    for (int64_t d = 0; d < c.a.dim; ++d) {
      const float x = float_value(c.table, row, d);
      float& acc = res[size_t(d)];
      if (!weighted) acc = acc + x;
      else if (fused) acc = std::fmaf(w, x, acc);
      else acc = acc + w * x;
    }
  });
}

// B4: per position s = w * scale, b = w * bias; per column acc = fmaf(s, q, acc + b).
void sum_quantized_table(const Call& c, const BagSpan& s, std::vector<float>& res) {
  std::fill(res.begin(), res.end(), 0.0f);
  const bool weighted = c.a.per_sample_weights != nullptr;
  c.for_each_row(s.begin, s.end, [&](int64_t i, int64_t, int64_t r) {
    const Dequantizer q(c.table, c.row(r), c.a.dim);
    const float w = weighted ? c.weight(i) : 1.0f;
    const float ws = w * q.scale, wb = w * q.bias;
    for (int64_t d = 0; d < c.a.dim; ++d) res[size_t(d)] = quantized_step(res[size_t(d)], ws, wb, q.code(d));
  });
}

// Mean divides the sum once by max(count, 1). f16/bf16 tables first round the sum (bf16 as H6
// says) and the count (to nearest even) to the table dtype (H3: the count 2049 becomes 2048 in
// f16); the store rounds the quotient to nearest even.
void divide_by_count(const Call& c, int64_t count, std::vector<float>& res) {
  const float n = static_cast<float>(std::max<int64_t>(count, 1));
  const bool half_table = c.table == SHAPEJIT_F16 || c.table == SHAPEJIT_BF16;
  const bool fbgemm = bf16_fbgemm_path(c.table, aten_loop_arithmetic(c.ex));
  const float divisor = half_table ? round_to_output(c.table, n) : n;
  for (float& v : res) {
    const float sum = c.table == SHAPEJIT_BF16 ? round_bf16_sum(fbgemm, v) : half_table ? round_to_output(c.table, v) : v;
    v = sum / divisor;
  }
}

// f32 rule 4 (and A1 4, beyond-ATen 3): the first contributing row is copied, a later one wins
// a column only when strictly greater; an empty bag gives +0.0 and index 0.
void max_bag(const Call& c, const BagSpan& s, std::vector<float>& res, std::vector<int64_t>& winner) {
  std::fill(res.begin(), res.end(), 0.0f);
  std::fill(winner.begin(), winner.end(), 0);
  bool first = true;
  c.for_each_row(s.begin, s.end, [&](int64_t, int64_t idx, int64_t r) {
    for (int64_t d = 0; d < c.a.dim; ++d) {
      const float x = element_value(c, r, d);
      if (first || x > res[size_t(d)]) {
        res[size_t(d)] = x;
        winner[size_t(d)] = idx;  // the index as given (before any pruning map)
      }
    }
    first = false;
  });
}

}  // namespace

void embedding_bag(const shapejit_embedding_bag_args& a, void* output, void* offset2bag, void* bag_size,
                   void* max_indices) {
  embedding_bag(embedding_bag_ex_defaults(a), output, offset2bag, bag_size, max_indices);
}

void embedding_bag(const shapejit_embedding_bag_ex_args& ex, void* output, void* offset2bag, void* bag_size,
                   void* max_indices) {
  // Allocated before the first write, so running out of memory leaves every output untouched.
  EmbagScratch scratch = embedding_bag_scratch(ex);
  embedding_bag(ex, output, offset2bag, bag_size, max_indices, scratch);
}

EmbagScratch embedding_bag_scratch(const shapejit_embedding_bag_ex_args& ex) {
  // Only when some bag needs it (then dim is bounded by the caller's output of bags x dim).
  const size_t row_len = embedding_bag_shapes(ex).output_rows > 0 ? static_cast<size_t>(ex.call.dim) : 0;
  return {std::vector<float>(row_len), std::vector<int64_t>(ex.call.mode == SHAPEJIT_MAX ? row_len : 0)};
}

void embedding_bag(const shapejit_embedding_bag_ex_args& ex, void* output, void* offset2bag, void* bag_size,
                   void* max_indices, EmbagScratch& scratch) {
  const shapejit_embedding_bag_args& a = ex.call;
  const Call c(ex);
  const shapejit_embedding_bag_shapes shapes = embedding_bag_shapes(ex);
  const shapejit_dtype idx_t = shapes.index_out_dtype;
  const int64_t bags = shapes.output_rows;
  const int64_t out_dtype = ex.output_dtype;
  const int64_t out_stride = ex.output_row_stride != 0 ? ex.output_row_stride : a.dim;  // elements between rows
  std::vector<float>& res = scratch.row;
  std::vector<int64_t>& winner = scratch.winners;
  // H6: sums (and maxima, exact either way) of a bf16 table on the FBGEMM path round half up;
  // the mean's quotient, like every other result, to nearest even.
  const bool half_up_store = bf16_fbgemm_path(c.table, aten_loop_arithmetic(ex)) && a.mode != SHAPEJIT_MEAN;

  if (a.mode == SHAPEJIT_SUM) {  // bag_size and max_indices are zeros in sum mode
    for (int64_t k = 0; k < shapes.bag_size_len; ++k) store_int(bag_size, idx_t, k, 0);
    for (int64_t k = 0; k < shapes.max_indices_rows; ++k) store_int(max_indices, idx_t, k, 0);
  }
  int64_t covered_end = 0;  // positions before it belong to a bag
  for (int64_t b = 0; b < bags; ++b) {
    const BagSpan s = ex.offsets_as_lengths ? length_bag(a, b, covered_end) : span_bag(a, b, bags);
    const int64_t count = c.count(s.begin, s.count_end);
    if (shapes.offset2bag_len > 0)
      for (int64_t i = s.begin; i < s.end; ++i) store_int(offset2bag, idx_t, i, b);
    covered_end = std::max(covered_end, s.end);

    if (a.dim == 0) {
      // No column: nothing is read (not even a quantized row's scale), only counted.
    } else if (a.mode == SHAPEJIT_MAX) {
      max_bag(c, s, res, winner);
      if (shapes.max_indices_rows > 0)
        for (int64_t d = 0; d < a.dim; ++d) store_int(max_indices, idx_t, b * a.dim + d, winner[size_t(d)]);
    } else {
      if (is_quantized_table(c.table)) sum_quantized_table(c, s, res);
      else sum_float_table(c, s, res);
      if (a.mode == SHAPEJIT_MEAN) divide_by_count(c, count, res);
    }
    for (int64_t d = 0; d < a.dim; ++d)
      store_float_output(output, out_dtype, b * out_stride + d, res[size_t(d)], half_up_store);
    if (a.mode != SHAPEJIT_SUM && shapes.bag_size_len > 0) store_int(bag_size, idx_t, b, count);
    if (a.mode == SHAPEJIT_MEAN && shapes.max_indices_rows > 0) store_int(max_indices, idx_t, b, count);
  }
  // Positions no bag takes: after a partial final offset torch 2.x reports the last bag, B - 1
  // (1.13 reported B); after the last length, "bag" B.
  const int64_t trailing_bag = a.aten_partial_final_offset && !ex.offsets_as_lengths && bags > 0 ? bags - 1 : bags;
  if (shapes.offset2bag_len > 0)
    for (int64_t i = covered_end; i < a.num_indices; ++i) store_int(offset2bag, idx_t, i, trailing_bag);
}

}  // namespace shapejit::ref
