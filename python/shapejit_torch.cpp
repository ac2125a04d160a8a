// The PyTorch extension: torch.ops.shapejit.embedding_bag (the schema and four results of
// torch.embedding_bag, computed by shapejit's JIT kernels) and the linear-group class and
// operator (torch_linear_group.cpp). Loaded by python/shapejit/__init__.py.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <tuple>

#include "python/torch_linear_group.hpp"
#include "python/torch_glue.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {
namespace {

using Results = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The table as shapejit reads it: rows with any stride, elements dense within a row.
at::Tensor table_of(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2, "shapejit.embedding_bag: weight must be 2-D [num_embeddings, embedding_dim], "
                                 "but got a ", weight.dim(), "-D tensor");
  const bool dense_rows = weight.size(1) <= 1 || weight.stride(1) == 1;
  const bool rows_apart = weight.size(0) <= 1 || weight.stride(0) >= weight.size(1);
  return dense_rows && rows_apart ? weight : weight.contiguous();
}

int64_t row_stride_of(const at::Tensor& table) {
  return table.size(0) <= 1 || table.size(1) == 0 ? table.size(1) : table.stride(0);
}

// ATen shapes max_indices [B, D] in max mode and like bag_size otherwise.
Results allocate(const shapejit_embedding_bag_shapes& s, at::ScalarType value_type, int64_t mode) {
  const auto ints = at::TensorOptions().dtype(to_scalar_type(s.index_out_dtype));
  at::Tensor output = at::empty({s.output_rows, s.output_cols}, at::TensorOptions().dtype(value_type));
  at::Tensor offset2bag = at::empty({s.offset2bag_len}, ints);
  at::Tensor bag_size = at::empty({s.bag_size_len}, ints);
  at::Tensor max_indices = mode == SHAPEJIT_MAX ? at::empty({s.max_indices_rows, s.max_indices_cols}, ints)
                                                : at::empty({s.max_indices_rows}, ints);
  return {output, offset2bag, bag_size, max_indices};
}

// ATen 1.13 leaves offset2bag empty in sum mode only on its fast path: a float or half table
// with unit column stride, no padding_idx, and per_sample_weights (if any) with unit stride.
// Elsewhere it returns offset2bag[N], whose shape callers may rely on, so the op does too.
bool aten_sum_fast_path(const at::Tensor& weight, const at::Tensor& psw, bool has_padding) {
  const bool table = (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kHalf) && weight.stride(1) == 1;
  return table && !has_padding && (!psw.defined() || psw.stride(0) == 1);
}

// offset2bag[i] = #{k : offsets[k] <= i} - 1, the bag of position i (empty bags skipped).
at::Tensor offset2bag_of(const at::Tensor& offsets, int64_t num_indices, at::ScalarType type) {
  const at::Tensor positions = at::arange(num_indices, offsets.options().dtype(at::kLong));
  return at::searchsorted(offsets.to(at::kLong), positions, /*out_int32=*/false, /*right=*/true).sub_(1).to(type);
}

Results embedding_bag(const at::Tensor& weight, const at::Tensor& indices, const c10::optional<at::Tensor>& offsets,
                      bool /*scale_grad_by_freq*/, int64_t mode, bool /*sparse*/,
                      const c10::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                      c10::optional<int64_t> padding_idx) {
  // scale_grad_by_freq and sparse only shape the gradient, which this forward-only op has not.
  check_cpu(weight, "weight");
  check_cpu(indices, "indices");
  TORCH_CHECK(mode >= SHAPEJIT_SUM && mode <= SHAPEJIT_MAX,
              "shapejit.embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max), but got ", mode);
  const at::Tensor table = table_of(weight);

  // The 2-D form: row b of indices [B, L] is bag b, so the offsets are 0, L, 2L, ...
  at::Tensor idx, offs;
  if (indices.dim() == 2) {
    TORCH_CHECK(!offsets.has_value(), "shapejit.embedding_bag: indices is 2-D [bags, bag_len], so offsets must "
                                      "be None (ATen's result with both is undefined)");
    TORCH_CHECK(!include_last_offset, "shapejit.embedding_bag: include_last_offset must be False with 2-D indices");
    idx = indices.reshape({-1}).contiguous();
    offs = at::arange(indices.size(0), indices.options()).mul_(indices.size(1));
  } else {
    TORCH_CHECK(indices.dim() == 1, "shapejit.embedding_bag: indices must be 1-D (with offsets) or 2-D "
                                    "[bags, bag_len], but got a ", indices.dim(), "-D tensor");
    TORCH_CHECK(offsets.has_value(), "shapejit.embedding_bag: offsets is required with 1-D indices");
    check_cpu(*offsets, "offsets");
    TORCH_CHECK(offsets->dim() == 1, "shapejit.embedding_bag: offsets must be 1-D, but got a ", offsets->dim(),
                "-D tensor");
    idx = indices.contiguous();
    offs = offsets->contiguous();
  }

  at::Tensor psw, psw_given;
  if (per_sample_weights.has_value()) {
    psw_given = indices.dim() == 2 ? per_sample_weights->reshape({-1}) : *per_sample_weights;
    check_cpu(*per_sample_weights, "per_sample_weights");
    TORCH_CHECK(per_sample_weights->scalar_type() == weight.scalar_type(),
                "shapejit.embedding_bag: per_sample_weights must have the weight's dtype ", weight.scalar_type(),
                ", but got ", per_sample_weights->scalar_type());
    TORCH_CHECK(per_sample_weights->numel() == idx.numel(), "shapejit.embedding_bag: per_sample_weights must have ",
                idx.numel(), " elements (one per index), but got ", per_sample_weights->numel());
    psw = per_sample_weights->reshape({-1}).contiguous();
  }

  shapejit_embedding_bag_args a{};
  a.weight = table.data_ptr();
  a.weight_dtype = to_shapejit_dtype(table, "weight");
  a.num_rows = table.size(0);
  a.dim = table.size(1);
  a.row_stride = row_stride_of(table);
  a.indices = idx.data_ptr();
  a.index_dtype = to_shapejit_dtype(idx, "indices");
  a.num_indices = idx.numel();
  a.offsets = offs.data_ptr();
  a.offset_dtype = to_shapejit_dtype(offs, "offsets");
  a.num_offsets = offs.numel();
  a.per_sample_weights = psw.defined() ? psw.data_ptr() : nullptr;
  // Stored as an int, not converted to the C enum (UB when out of range), so validation reports
  // the caller's value; one beyond int32 becomes INT32_MIN, which is just as invalid.
  const int32_t mode_int = mode < INT32_MIN || mode > INT32_MAX ? INT32_MIN : int32_t(mode);
  std::memcpy(&a.mode, &mode_int, sizeof mode_int);
  a.has_padding_idx = padding_idx.has_value();
  a.padding_idx = padding_idx.value_or(0);
  a.include_last_offset = include_last_offset;

  shapejit_embedding_bag_shapes shapes{};
  check_status(shapejit_embedding_bag_output_shapes(&a, &shapes), "embedding_bag");
  Results r = allocate(shapes, weight.scalar_type(), mode);
  check_status(shapejit_embedding_bag(&a, std::get<0>(r).data_ptr(), std::get<1>(r).data_ptr(),
                                      std::get<2>(r).data_ptr(), std::get<3>(r).data_ptr()),
               "embedding_bag");
  if (mode == SHAPEJIT_SUM && shapes.offset2bag_len == 0 && a.num_indices > 0 &&
      !aten_sum_fast_path(weight, psw_given, padding_idx.has_value()))
    std::get<1>(r) = offset2bag_of(offs, a.num_indices, std::get<1>(r).scalar_type());
  return r;
}

}  // namespace
}  // namespace shapejit::torch_ext

TORCH_LIBRARY(shapejit, m) {
  // torch.embedding_bag's schema (with padding_idx); offsets may be None for 2-D indices.
  m.def(
      "embedding_bag(Tensor weight, Tensor indices, Tensor? offsets=None, bool scale_grad_by_freq=False, "
      "int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, "
      "int? padding_idx=None) -> (Tensor, Tensor, Tensor, Tensor)");
  shapejit::torch_ext::register_linear_group(m);
}

TORCH_LIBRARY_IMPL(shapejit, CPU, m) { m.impl("embedding_bag", &shapejit::torch_ext::embedding_bag); }
