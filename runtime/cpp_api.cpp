// The embedding-bag C++ API: converts views to the C argument struct and shares its path.
#include <cstring>
#include <new>
#include <numeric>
#include <string>

#include "runtime/c_enum.hpp"
#include "runtime/embedding_bag.hpp"
#include "runtime/validate.hpp"
#include "shapejit/shapejit.hpp"

namespace shapejit {
namespace {

EmbeddingBagShapes from_c(const shapejit_embedding_bag_shapes& s) {
  return {s.output_rows, s.output_cols, static_cast<DType>(s.index_out_dtype), s.offset2bag_len,
          s.bag_size_len, s.max_indices_rows, s.max_indices_cols};
}

// Widens an int32 or int64 buffer of n elements to int64.
std::vector<int64_t> widen(const std::vector<unsigned char>& raw, DType dtype, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kI32) {
      int32_t x;
      std::memcpy(&x, raw.data() + i * 4, 4);
      v[size_t(i)] = x;
    } else {
      std::memcpy(&v[size_t(i)], raw.data() + i * 8, 8);
    }
  }
  return v;
}

}  // namespace

// Enum fields are stored as the caller's int (any DType or Mode value is a valid int): the
// validator reports an out-of-range one, where converting it to the C enum would be undefined.
shapejit_embedding_bag_args EmbeddingBagCall::to_c() const {
  shapejit_embedding_bag_args a{};
  a.weight = weight.data;
  rt::set_c_enum(a.weight_dtype, weight.dtype);
  a.num_rows = weight.rows;
  a.dim = weight.dim;
  a.row_stride = weight.row_stride == 0 ? weight.dim : weight.row_stride;
  a.indices = indices.data;
  rt::set_c_enum(a.index_dtype, indices.dtype);
  a.num_indices = indices.size;
  a.offsets = offsets.data;
  rt::set_c_enum(a.offset_dtype, offsets.dtype);
  a.num_offsets = offsets.size;
  a.per_sample_weights = per_sample_weights;
  rt::set_c_enum(a.mode, mode);
  a.has_padding_idx = padding_idx.has_value();
  a.padding_idx = padding_idx.value_or(0);
  a.include_last_offset = include_last_offset;
  a.aten_partial_final_offset = aten_partial_final_offset;
  return a;
}

EmbeddingBagShapes embedding_bag_output_shapes(const EmbeddingBagCall& call) {
  return from_c(rt::validate_embedding_bag(call.to_c()));
}

void embedding_bag(const EmbeddingBagCall& call, const EmbeddingBagOutputs& out) {
  rt::run_embedding_bag(call.to_c(), out.output, out.offset2bag, out.bag_size, out.max_indices);
}

EmbeddingBagResult embedding_bag(const EmbeddingBagCall& call) {
  const shapejit_embedding_bag_args args = call.to_c();
  const EmbeddingBagShapes s = from_c(rt::validate_embedding_bag(args));
  const int64_t int_bytes = s.index_dtype == DType::kI32 ? 4 : 8;
  EmbeddingBagResult r;
  r.shapes = s;
  std::vector<unsigned char> o2b, bag, maxi;
  try {  // validation bounds the byte counts by int64, not by what can be allocated
    r.output.resize(size_t(s.output_rows * s.output_cols));
    o2b.resize(size_t(s.offset2bag_len * int_bytes));
    bag.resize(size_t(s.bag_size_len * int_bytes));
    maxi.resize(size_t(s.max_indices_rows * s.max_indices_cols * int_bytes));
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, "embedding_bag: cannot allocate the outputs (output " +
                                          std::to_string(s.output_rows) + " x " + std::to_string(s.output_cols) +
                                          " floats, " + std::to_string(s.offset2bag_len) + " offset2bag entries)");
  }
  rt::run_embedding_bag(args, r.output.data(), o2b.data(), bag.data(), maxi.data());
  r.offset2bag = widen(o2b, s.index_dtype, s.offset2bag_len);
  r.bag_size = widen(bag, s.index_dtype, s.bag_size_len);
  r.max_indices = widen(maxi, s.index_dtype, s.max_indices_rows * s.max_indices_cols);
  return r;
}

EmbeddingBagResult embedding_bag_2d(const TableView& weight, IndexView indices, int64_t bags, int64_t bag_len,
                                    Mode mode, const void* per_sample_weights, std::optional<int64_t> padding_idx) {
  int64_t total = 0;
  if (bags < 0 || bag_len < 0 || __builtin_mul_overflow(bags, bag_len, &total) || total != indices.size)
    throw Error(Status::kInvalidArgument,
                "embedding_bag: 2-D indices must have bags x bag_len == indices.size, but got " + std::to_string(bags) +
                    " x " + std::to_string(bag_len) + " for " + std::to_string(indices.size) + " indices");
  // The 2-D form is the 1-D form with offsets 0, L, 2L, ... (include_last_offset false).
  // The offsets take the indices' dtype, as ATen builds them, so no promotion happens.
  std::vector<int64_t> offsets64;
  std::vector<int32_t> offsets32;
  EmbeddingBagCall call;
  if (indices.dtype == DType::kI32) {
    for (int64_t b = 0; b < bags; ++b) offsets32.push_back(static_cast<int32_t>(b * bag_len));
    call.offsets = IndexView(offsets32);
  } else {
    for (int64_t b = 0; b < bags; ++b) offsets64.push_back(b * bag_len);
    call.offsets = IndexView(offsets64);
  }
  call.weight = weight;
  call.indices = indices;
  call.mode = mode;
  call.per_sample_weights = per_sample_weights;
  call.padding_idx = padding_idx;
  return embedding_bag(call);
}

}  // namespace shapejit
