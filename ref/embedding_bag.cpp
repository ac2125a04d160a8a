// Scalar reference of ATen's _embedding_bag forward. Written for clarity, one rule at a time,
// in the order of embedding-bag-semantics.md; the JIT kernels must match it bitwise.
#include "ref/embedding_bag.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ref/int_access.hpp"

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

namespace {

struct BagSpan {
  int64_t begin, end;  ///< positions summed
  int64_t count_end;   ///< positions counted (differs only for the ATen partial-final-offset quirk)
};

BagSpan bag_span(const shapejit_embedding_bag_args& a, int64_t b, int64_t bags) {
  const int64_t begin = load_int(a.offsets, a.offset_dtype, b);
  const int64_t end = b + 1 < a.num_offsets ? load_int(a.offsets, a.offset_dtype, b + 1) : a.num_indices;
  // ATen 1.13 counts the last bag up to N even when offsets[B] < N (opt-in quirk).
  const int64_t count_end = b == bags - 1 ? a.num_indices : end;
  return {begin, end, count_end};
}

bool is_padding(const shapejit_embedding_bag_args& a, int64_t row) {
  if (!a.has_padding_idx) return false;
  const int64_t p = a.padding_idx < 0 ? a.padding_idx + a.num_rows : a.padding_idx;
  return row == p;
}

const float* row_ptr(const shapejit_embedding_bag_args& a, int64_t row) {
  // A NULL table is valid when dim == 0 (no column is read); offsetting NULL is undefined.
  if (a.weight == nullptr) return nullptr;
  return static_cast<const float*>(a.weight) + row * a.row_stride;
}

// Rules 1-3: sum (plain or weighted with fmaf) in index order from +0.0, mean divides once.
void reduce_sum_or_mean(const shapejit_embedding_bag_args& a, const BagSpan& s, int64_t count,
                        float* out) {
  const float* psw = static_cast<const float*>(a.per_sample_weights);
  for (int64_t d = 0; d < a.dim; ++d) out[d] = 0.0f;
  for (int64_t i = s.begin; i < s.end; ++i) {
    const int64_t row = load_int(a.indices, a.index_dtype, i);
    if (is_padding(a, row)) continue;
    const float* x = row_ptr(a, row);
    if (psw) {
      for (int64_t d = 0; d < a.dim; ++d) out[d] = std::fmaf(psw[i], x[d], out[d]);
    } else {
      for (int64_t d = 0; d < a.dim; ++d) out[d] = out[d] + x[d];
    }
  }
  if (a.mode == SHAPEJIT_MEAN) {
    const float divisor = static_cast<float>(std::max<int64_t>(count, 1));
    for (int64_t d = 0; d < a.dim; ++d) out[d] = out[d] / divisor;
  }
}

// Rule 4: the first row is copied, later rows win only when strictly greater.
void reduce_max(const shapejit_embedding_bag_args& a, const BagSpan& s, float* out,
                void* max_indices, shapejit_dtype idx_t, int64_t b, std::vector<int64_t>& winner) {
  std::fill(winner.begin(), winner.end(), 0);
  for (int64_t d = 0; d < a.dim; ++d) out[d] = 0.0f;
  bool first = true;
  for (int64_t i = s.begin; i < s.end; ++i) {
    const int64_t row = load_int(a.indices, a.index_dtype, i);
    if (is_padding(a, row)) continue;
    const float* x = row_ptr(a, row);
    for (int64_t d = 0; d < a.dim; ++d) {
      if (first || x[d] > out[d]) {
        out[d] = x[d];
        winner[static_cast<size_t>(d)] = row;
      }
    }
    first = false;
  }
  if (max_indices)
    for (int64_t d = 0; d < a.dim; ++d) store_int(max_indices, idx_t, b * a.dim + d, winner[size_t(d)]);
}

}  // namespace

void embedding_bag(const shapejit_embedding_bag_args& a, void* output, void* offset2bag,
                   void* bag_size, void* max_indices) {
  const shapejit_embedding_bag_shapes shapes = embedding_bag_shapes(a);
  const shapejit_dtype idx_t = shapes.index_out_dtype;
  const int64_t bags = shapes.output_rows;
  float* out = static_cast<float*>(output);
  // Allocated before the first write, so running out of memory leaves every output untouched;
  // only when some bag needs it (then dim is bounded by the caller's output of bags x dim).
  std::vector<int64_t> winner(a.mode == SHAPEJIT_MAX && bags > 0 ? static_cast<size_t>(a.dim) : 0);

  if (a.mode == SHAPEJIT_SUM) {  // bag_size and max_indices are zeros in sum mode
    for (int64_t k = 0; k < shapes.bag_size_len; ++k) store_int(bag_size, idx_t, k, 0);
    for (int64_t k = 0; k < shapes.max_indices_rows; ++k) store_int(max_indices, idx_t, k, 0);
  }
  int64_t covered_end = 0;
  for (int64_t b = 0; b < bags; ++b) {
    const BagSpan s = bag_span(a, b, bags);
    int64_t count = 0;
    for (int64_t i = s.begin; i < s.count_end; ++i)
      count += is_padding(a, load_int(a.indices, a.index_dtype, i)) ? 0 : 1;
    if (shapes.offset2bag_len > 0)
      for (int64_t i = s.begin; i < s.end; ++i) store_int(offset2bag, idx_t, i, b);
    covered_end = std::max(covered_end, s.end);

    float* out_row = out + b * a.dim;
    if (a.mode == SHAPEJIT_MAX)
      reduce_max(a, s, out_row, max_indices, idx_t, b, winner);
    else
      reduce_sum_or_mean(a, s, count, out_row);
    if (a.mode != SHAPEJIT_SUM) store_int(bag_size, idx_t, b, count);
    if (a.mode == SHAPEJIT_MEAN) store_int(max_indices, idx_t, b, count);
  }
  // Positions past offsets[B] (the opt-in partial final offset) belong to "bag" B, as ATen 1.13
  // reports them: #{k : offsets[k] <= i} - 1 == len(offsets) - 1.
  if (shapes.offset2bag_len > 0)
    for (int64_t i = covered_end; i < a.num_indices; ++i) store_int(offset2bag, idx_t, i, a.num_offsets - 1);
}

}  // namespace shapejit::ref
