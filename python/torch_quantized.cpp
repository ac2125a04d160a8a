// torch.ops.shapejit.quantized_embedding_bag(_output), rowwise_prepack and rowwise_unpack: rowwise
// quantized tables (8/4/2-bit packed rows, docs/quantized-tables-semantics.md) as uint8 tensors
// [rows, row_bytes], exactly the tensors torch's embedding_bag_*_prepack returns.
#include "python/torch_quantized.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "python/torch_bag_inputs.hpp"
#include "python/torch_glue.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {
namespace {

// The shapejit dtype of packed rows of `bits` bits per code.
shapejit_dtype rowwise_dtype(int64_t bits, const char* op) {
  switch (bits) {
    case 8: return SHAPEJIT_Q8;
    case 4: return SHAPEJIT_Q4;
    case 2: return SHAPEJIT_Q2;
    default: break;
  }
  TORCH_CHECK(false, op, ": bits must be 8, 4 or 2, but got ", bits);
}

// D of packed rows `width` bytes wide, as torch's lookup and unpack ops derive it: the codes fill
// every byte before the scale and bias (so a 4-bit D is even and a 2-bit D a multiple of 4).
int64_t dim_of_width(shapejit_dtype qtype, int64_t width, const char* op) {
  const int64_t trailer = qtype == SHAPEJIT_Q8 ? 8 : 4;  // scale and bias: two f32 or two f16
  TORCH_CHECK(width >= trailer, op, ": a packed row of this format holds at least its ", trailer,
              " bytes of scale and bias, but the weight's rows are ", width, " bytes wide");
  const int64_t codes_per_byte = qtype == SHAPEJIT_Q8 ? 1 : qtype == SHAPEJIT_Q4 ? 2 : 4;
  return (width - trailer) * codes_per_byte;
}

// The product of every size but the last: the number of rows of a tensor whose last dim is a row.
int64_t leading_rows(const at::Tensor& t) {
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < t.dim(); ++i) rows *= t.size(i);
  return rows;
}

std::vector<int64_t> with_last_dim(const at::Tensor& t, int64_t last) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  sizes.back() = last;
  return sizes;
}

// Packed rows [rows, width] uint8, bytes dense within a row, rows any distance >= width apart.
at::Tensor packed_table_of(const at::Tensor& weight, const char* op) {
  check_cpu(weight, "weight");
  TORCH_CHECK(weight.scalar_type() == at::kByte, op, ": weight must hold packed rows as uint8, but got ",
              weight.scalar_type());
  TORCH_CHECK(weight.dim() == 2, op, ": weight must be 2-D [num_embeddings, row_bytes], but got a ", weight.dim(),
              "-D tensor");
  const bool dense_rows = weight.size(1) <= 1 || weight.stride(1) == 1;
  const bool rows_apart = weight.size(0) <= 1 || weight.stride(0) >= weight.size(1);
  return dense_rows && rows_apart ? weight : weight.contiguous();
}

// A call over packed rows (docs/quantized-tables-semantics.md, "Beyond ATen"): sum, mean or
// max, output f32 (or f16 / bf16, rounded once), per_sample_weights f32 (f16 too for 4/2-bit),
// pruned tables through the mapping, and ATen's lengths-style offsets on request. Holds the
// tensors the call's pointers read.
// torch.ops.shapejit.quantized_embedding_bag (all four results) and, kOutputOnly,
// quantized_embedding_bag_output (the output alone, what torch's quantized rowwise ops return,
// computed without the index results).
template <bool kOutputOnly>
std::conditional_t<kOutputOnly, at::Tensor, BagResults> quantized_embedding_bag(
    const at::Tensor& weight, int64_t bits, const at::Tensor& indices, const c10::optional<at::Tensor>& offsets,
    int64_t mode, const c10::optional<at::Tensor>& per_sample_weights, c10::optional<int64_t> padding_idx,
    bool include_last_offset, const c10::optional<at::Tensor>& compressed_indices_mapping, bool offsets_as_lengths,
    c10::optional<at::ScalarType> output_dtype, c10::optional<int64_t> dim) {
  const char* name = kOutputOnly ? "quantized_embedding_bag_output" : "quantized_embedding_bag";
  const QuantizedCall c =
      quantized_call(kOutputOnly ? "shapejit.quantized_embedding_bag_output" : "shapejit.quantized_embedding_bag",
                     weight, bits, indices, offsets, mode, per_sample_weights, padding_idx, include_last_offset,
                     compressed_indices_mapping, offsets_as_lengths, output_dtype, dim);
  if constexpr (kOutputOnly) return run_bag_output(c.ex, name);
  else return run_bag(c.ex, mode, name);
}

// torch's embedding_bag_{byte,4bit,2bit}_prepack: the last dim is a row. 8-bit takes any rank
// >= 1; 4/2-bit only 2-D (torch misreads other ranks). f16 input is widened exactly first.
at::Tensor rowwise_prepack(const at::Tensor& weight, int64_t bits, bool optimized_qparams, int64_t nbins,
                           double ratio) {
  constexpr const char* op = "shapejit.rowwise_prepack";
  const shapejit_dtype qtype = rowwise_dtype(bits, op);
  check_cpu(weight, "weight");
  TORCH_CHECK(weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kHalf, op,
              ": weight must be float32 or float16, but got ", weight.scalar_type());
  if (qtype == SHAPEJIT_Q8) {
    TORCH_CHECK(weight.dim() >= 1, op, ": weight must have at least one dimension (the row)");
  } else {
    TORCH_CHECK(weight.dim() == 2, op, ": ", bits, "-bit weight must be 2-D [rows, dim], but got a ", weight.dim(),
                "-D tensor");
  }
  const at::Tensor src = weight.contiguous();
  shapejit_rowwise_prepack_args a{};
  a.qtype = qtype;
  a.src = src.data_ptr();
  a.src_dtype = to_shapejit_dtype(src, "weight");
  a.rows = leading_rows(src);
  a.dim = src.size(-1);
  a.src_row_stride = a.dim;
  a.optimized_qparams = optimized_qparams;
  a.nbins = nbins;
  a.ratio = static_cast<float>(ratio);
  const int64_t row_bytes = shapejit_rowwise_row_bytes(qtype, a.dim);
  TORCH_CHECK(row_bytes >= 0, op, ": no packed row of dim ", a.dim);
  at::Tensor out = at::empty(with_last_dim(src, row_bytes), at::TensorOptions().dtype(at::kByte));
  check_status(shapejit_rowwise_prepack(&a, out.data_ptr()), "rowwise_prepack");
  return out;
}

// torch's embedding_bag_{byte,4bit,2bit}_unpack: packed rows (the last dim) to f32 values.
at::Tensor rowwise_unpack(const at::Tensor& packed, int64_t bits) {
  constexpr const char* op = "shapejit.rowwise_unpack";
  const shapejit_dtype qtype = rowwise_dtype(bits, op);
  check_cpu(packed, "weight");
  TORCH_CHECK(packed.scalar_type() == at::kByte, op, ": weight must hold packed rows as uint8, but got ",
              packed.scalar_type());
  TORCH_CHECK(packed.dim() >= 1, op, ": weight must have at least one dimension (the packed row)");
  const at::Tensor src = packed.contiguous();
  const int64_t width = src.size(-1);
  const int64_t d = dim_of_width(qtype, width, op);
  at::Tensor out = at::empty(with_last_dim(src, d), at::TensorOptions().dtype(at::kFloat));
  check_status(shapejit_rowwise_unpack(qtype, src.data_ptr(), leading_rows(src), d, width, out.data_ptr<float>()),
               "rowwise_unpack");
  return out;
}

}  // namespace

QuantizedCall quantized_call(const char* op, const at::Tensor& weight, int64_t bits, const at::Tensor& indices,
                             const c10::optional<at::Tensor>& offsets, int64_t mode,
                             const c10::optional<at::Tensor>& per_sample_weights, c10::optional<int64_t> padding_idx,
                             bool include_last_offset, const c10::optional<at::Tensor>& compressed_indices_mapping,
                             bool offsets_as_lengths, c10::optional<at::ScalarType> output_dtype,
                             c10::optional<int64_t> dim) {
  const shapejit_dtype qtype = rowwise_dtype(bits, op);
  QuantizedCall c{packed_table_of(weight, op), {}, bag_inputs(op, indices, offsets, per_sample_weights, include_last_offset,
                                           IndexDtypes::kInt32OrInt64),
                  {}};
  const int64_t width = c.table.size(1);
  const int64_t d = dim.has_value() ? *dim : dim_of_width(qtype, width, op);
  if (dim.has_value()) {
    const int64_t row_bytes = shapejit_rowwise_row_bytes(qtype, d);
    TORCH_CHECK(row_bytes >= 0 && row_bytes <= width, op, ": a packed row of dim ", d, " takes ", row_bytes,
                " bytes, but the weight's rows are ", width, " bytes wide");
  }
  if (compressed_indices_mapping.has_value()) {
    check_cpu(*compressed_indices_mapping, "compressed_indices_mapping");
    TORCH_CHECK(compressed_indices_mapping->scalar_type() == at::kInt, op,
                ": compressed_indices_mapping must be int32, but got ", compressed_indices_mapping->scalar_type());
    TORCH_CHECK(compressed_indices_mapping->dim() == 1, op, ": compressed_indices_mapping must be 1-D, but got a ",
                compressed_indices_mapping->dim(), "-D tensor");
    c.mapping = compressed_indices_mapping->contiguous();
  }
  const at::ScalarType out_type = output_dtype.value_or(at::kFloat);

  shapejit_embedding_bag_args call{};
  call.weight = c.table.data_ptr();
  call.weight_dtype = qtype;
  call.num_rows = c.table.size(0);
  call.dim = d;
  call.row_stride = c.table.size(0) <= 1 ? width : c.table.stride(0);
  fill_bag_args(call, c.in, mode, padding_idx, include_last_offset);

  shapejit_embedding_bag_ex_init(&c.ex, &call);
  c.ex.output_dtype = to_shapejit_dtype(out_type, "output_dtype");
  c.ex.per_sample_weights_dtype =
      c.in.psw.defined() ? to_float_dtype(c.in.psw, "per_sample_weights", op) : SHAPEJIT_F32;
  c.ex.compressed_indices_mapping = c.mapping.defined() ? c.mapping.data_ptr<int32_t>() : nullptr;
  c.ex.mapping_len = c.mapping.defined() ? c.mapping.numel() : 0;
  c.ex.offsets_as_lengths = offsets_as_lengths;
  return c;
}

void register_quantized(torch::Library& m) {
  // Schemas with CPU kernels (a catch-all kernel would be CompositeImplicitAutograd, which
  // allows no fake kernel; python/shapejit/fake.py registers those).
  const auto cpu = [](auto fn) { return torch::dispatch(c10::DispatchKey::CPU, fn); };
  m.def(
      "quantized_embedding_bag(Tensor weight, int bits, Tensor indices, Tensor? offsets=None, int mode=0, "
      "Tensor? per_sample_weights=None, int? padding_idx=None, bool include_last_offset=False, "
      "Tensor? compressed_indices_mapping=None, bool offsets_as_lengths=False, ScalarType? output_dtype=None, "
      "int? dim=None) -> (Tensor, Tensor, Tensor, Tensor)");
  m.impl("quantized_embedding_bag", cpu(TORCH_FN(quantized_embedding_bag<false>)));
  m.def(
      "quantized_embedding_bag_output(Tensor weight, int bits, Tensor indices, Tensor? offsets=None, int mode=0, "
      "Tensor? per_sample_weights=None, int? padding_idx=None, bool include_last_offset=False, "
      "Tensor? compressed_indices_mapping=None, bool offsets_as_lengths=False, ScalarType? output_dtype=None, "
      "int? dim=None) -> Tensor");
  m.impl("quantized_embedding_bag_output", cpu(TORCH_FN(quantized_embedding_bag<true>)));
  m.def("rowwise_prepack(Tensor weight, int bits, bool optimized_qparams=False, int nbins=200, float ratio=0.16) "
        "-> Tensor");
  m.impl("rowwise_prepack", cpu(TORCH_FN(rowwise_prepack)));
  m.def("rowwise_unpack(Tensor weight, int bits) -> Tensor");
  m.impl("rowwise_unpack", cpu(TORCH_FN(rowwise_unpack)));
}

}  // namespace shapejit::torch_ext
