// The PyTorch extension: torch.ops.shapejit.embedding_bag (the schema and four results of
// torch.embedding_bag over f32, f16 and bf16 tables, computed by shapejit's JIT kernels), the
// quantized-table ops (torch_quantized.cpp) and the linear-group class and operator
// (torch_linear_group.cpp). Loaded by python/shapejit/__init__.py.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "python/torch_bag_inputs.hpp"
#include "python/torch_engine.hpp"
#include "python/torch_linear_group.hpp"
#include "python/torch_quantized.hpp"
#include "python/torch_glue.hpp"
#include "shapejit/shapejit.h"

namespace shapejit::torch_ext {
namespace {

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

// ATen's (1.13 and 2.x) fast path: an f32, f16 or bf16 table with unit column stride, no
// padding_idx, and per_sample_weights (if any) with unit stride. Elsewhere ATen runs its own
// loop, whose arithmetic the op asks for (aten_loop_arithmetic: weighted f32 and bf16 products
// rounded first, bf16 sums to nearest even), and in sum mode returns offset2bag[N] instead of an
// empty one, whose shape callers may rely on, so the op does too.
bool aten_fast_path(const at::Tensor& weight, const at::Tensor& psw, bool has_padding) {
  const at::ScalarType t = weight.scalar_type();
  const bool table = (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && weight.stride(1) == 1;
  return table && !has_padding && (!psw.defined() || psw.stride(0) == 1);
}

// offset2bag[i] = #{k : offsets[k] <= i} - 1, the bag of position i (empty bags skipped).
at::Tensor offset2bag_of(const at::Tensor& offsets, int64_t num_indices, at::ScalarType type) {
  const at::Tensor positions = at::arange(num_indices, offsets.options().dtype(at::kLong));
  return at::searchsorted(offsets.to(at::kLong), positions, /*out_int32=*/false, /*right=*/true).sub_(1).to(type);
}

// A call over an f32, f16 or bf16 table (output and per_sample_weights of the table's dtype),
// checked by the engine; `table` and `in` keep the tensors it points into alive.
struct FloatTableCall {
  at::Tensor table;
  BagInputs in;
  shapejit_embedding_bag_ex_args ex;
  bool aten_fast_path;  // ATen would take its fast path (else the call has ATen's loop's arithmetic)
};

FloatTableCall float_table_call(const char* op, const at::Tensor& weight, const at::Tensor& indices,
                                const c10::optional<at::Tensor>& offsets, int64_t mode,
                                const c10::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                                c10::optional<int64_t> padding_idx) {
  check_cpu(weight, "weight");
  TORCH_CHECK(mode >= SHAPEJIT_SUM && mode <= SHAPEJIT_MAX, op, ": mode must be 0 (sum), 1 (mean) or 2 (max), but got ",
              mode);
  FloatTableCall c{table_of(weight), bag_inputs(op, indices, offsets, per_sample_weights, include_last_offset,
                                                    IndexDtypes::kPromotedLikeAten), {}, false};
  TORCH_CHECK(!c.in.psw.defined() || c.in.psw.scalar_type() == weight.scalar_type(), op,
              ": per_sample_weights must have the weight's dtype ", weight.scalar_type(), ", but got ",
              c.in.psw.scalar_type());
  shapejit_embedding_bag_args a{};
  a.weight = c.table.data_ptr();
  a.weight_dtype = to_shapejit_dtype(c.table, "weight");
  a.num_rows = c.table.size(0);
  a.dim = c.table.size(1);
  a.row_stride = row_stride_of(c.table);
  fill_bag_args(a, c.in, mode, padding_idx, include_last_offset);
  shapejit_embedding_bag_ex_init(&c.ex, &a);
  c.aten_fast_path = aten_fast_path(weight, c.in.psw_given, padding_idx.has_value());
  c.ex.aten_loop_arithmetic = c.aten_fast_path ? 0 : 1;
  return c;
}

// torch.embedding_bag's four results. scale_grad_by_freq and sparse only shape the gradient,
// which this forward-only op has not.
BagResults embedding_bag(const at::Tensor& weight, const at::Tensor& indices, const c10::optional<at::Tensor>& offsets,
                         bool /*scale_grad_by_freq*/, int64_t mode, bool /*sparse*/,
                         const c10::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                         c10::optional<int64_t> padding_idx) {
  const FloatTableCall c = float_table_call("shapejit.embedding_bag", weight, indices, offsets, mode,
                                            per_sample_weights, include_last_offset, padding_idx);
  BagResults r = run_bag(c.ex, mode, "embedding_bag");
  const int64_t n = c.ex.call.num_indices;
  if (mode == SHAPEJIT_SUM && std::get<1>(r).numel() == 0 && n > 0 && !c.aten_fast_path)
    std::get<1>(r) = offset2bag_of(c.in.offsets, n, std::get<1>(r).scalar_type());
  return r;
}

// The output alone (what nn.EmbeddingBag returns), for shapejit.EmbeddingBag's forward.
at::Tensor embedding_bag_output(const at::Tensor& weight, const at::Tensor& indices,
                                const c10::optional<at::Tensor>& offsets, int64_t mode,
                                const c10::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
                                c10::optional<int64_t> padding_idx) {
  const FloatTableCall c = float_table_call("shapejit.embedding_bag_output", weight, indices, offsets, mode,
                                            per_sample_weights, include_last_offset, padding_idx);
  return run_bag_output(c.ex, "embedding_bag_output");
}

// The calls of a group op (list k holds table k's arguments, as embedding_bag_output takes them;
// with bits[k] 8, 4 or 2, table k is packed rows read by torch's quantized ops' rules, as
// quantized_embedding_bag_output with offsets_as_lengths), handed to `run` with the tensors the
// arguments point into kept alive. Empty `bits` and `mappings`: every table float, none pruned.
template <class Run>
auto run_table_group(const char* op, at::TensorList weights, at::TensorList indices,
                     const c10::List<c10::optional<at::Tensor>>& offsets, at::IntArrayRef modes,
                     const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                     const c10::List<bool>& include_last_offset, const c10::List<c10::optional<int64_t>>& padding_idx,
                     at::IntArrayRef bits, const c10::List<c10::optional<at::Tensor>>& mappings, Run run) {
  const std::string kOp = std::string("shapejit.") + op;
  const size_t n = weights.size();
  const auto same_length = [&](size_t len, const char* name) {
    TORCH_CHECK(len == n, kOp, ": ", name, " has ", len, " entries but weights has ", n, " (one per table)");
  };
  same_length(indices.size(), "indices");
  same_length(offsets.size(), "offsets");
  same_length(modes.size(), "modes");
  same_length(per_sample_weights.size(), "per_sample_weights");
  same_length(include_last_offset.size(), "include_last_offset");
  same_length(padding_idx.size(), "padding_idx");
  if (!bits.empty()) same_length(bits.size(), "bits");
  if (!mappings.empty()) same_length(mappings.size(), "compressed_indices_mapping");
  // Keep the tensors the arguments point into alive.
  std::vector<FloatTableCall> float_calls;
  std::vector<QuantizedCall> quantized_calls;
  float_calls.reserve(n);
  quantized_calls.reserve(n);
  std::vector<shapejit_embedding_bag_ex_args> args;
  // Per table: the offsets ATen's offset2bag is computed from where ATen fills it in sum mode
  // (embedding_bag's rule), else undefined.
  std::vector<at::Tensor> sum_offset2bag_offsets(n);
  for (size_t k = 0; k < n; ++k) {
    // Table k's errors name it as the engine's do (bags[k], see bag_error_detail).
    const std::string label = kOp + ": bags[" + std::to_string(k) + "]";
    const char* what = label.c_str();
    const int64_t b = bits.empty() ? 0 : bits[k];
    const c10::optional<at::Tensor> mapping = mappings.empty() ? c10::nullopt : mappings.get(k);
    if (b == 0) {
      TORCH_CHECK(!mapping.has_value(), what, ": a float table takes no compressed_indices_mapping");
      float_calls.push_back(float_table_call(what, weights[k], indices[k], offsets.get(k), modes[k],
                                             per_sample_weights.get(k), include_last_offset.get(k), padding_idx.get(k)));
      args.push_back(float_calls.back().ex);
      if (modes[k] == SHAPEJIT_SUM && !float_calls.back().aten_fast_path)
        sum_offset2bag_offsets[k] = float_calls.back().in.offsets;
    } else {
      quantized_calls.push_back(quantized_call(what, weights[k], b, indices[k], offsets.get(k), modes[k],
                                               per_sample_weights.get(k), padding_idx.get(k), include_last_offset.get(k),
                                               mapping, /*offsets_as_lengths=*/true, at::kFloat, c10::nullopt));
      args.push_back(quantized_calls.back().ex);
    }
  }
  return run(args, op, sum_offset2bag_offsets);
}

// The group ops' runs: outputs alone, or with each table's index results (ATen's offset2bag in
// sum mode where embedding_bag fills it too).
std::vector<at::Tensor> outputs_of(std::span<const shapejit_embedding_bag_ex_args> calls, const char* op,
                                   const std::vector<at::Tensor>&) {
  return run_bags_output(calls, op);
}
at::Tensor concat_output_of(std::span<const shapejit_embedding_bag_ex_args> calls, const char* op,
                            const std::vector<at::Tensor>&) {
  return run_bags_concat_output(calls, op);
}
template <bool kConcat>
GroupResults results_of(std::span<const shapejit_embedding_bag_ex_args> calls, const char* op,
                        const std::vector<at::Tensor>& sum_offset2bag_offsets) {
  std::vector<int64_t> modes;
  for (const shapejit_embedding_bag_ex_args& c : calls) modes.push_back(int64_t(c.call.mode));
  GroupResults r = run_bags(calls, modes, kConcat, op);
  std::vector<at::Tensor>& offset2bag = std::get<1>(r);
  for (size_t k = 0; k < calls.size(); ++k) {
    const int64_t n = calls[k].call.num_indices;
    if (sum_offset2bag_offsets[k].defined() && offset2bag[k].numel() == 0 && n > 0)
      offset2bag[k] = offset2bag_of(sum_offset2bag_offsets[k], n, offset2bag[k].scalar_type());
  }
  return r;
}

// Many float tables' outputs in one engine call (a model's embedding bags).
std::vector<at::Tensor> embedding_bags_output(at::TensorList weights, at::TensorList indices,
                                              const c10::List<c10::optional<at::Tensor>>& offsets, at::IntArrayRef modes,
                                              const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                                              const c10::List<bool>& include_last_offset,
                                              const c10::List<c10::optional<int64_t>>& padding_idx) {
  return run_table_group("embedding_bags_output", weights, indices, offsets, modes, per_sample_weights,
                         include_last_offset, padding_idx, {}, c10::List<c10::optional<at::Tensor>>(), outputs_of);
}

// Float and rowwise-quantized tables' outputs in one engine call (bits[k] 0: float).
std::vector<at::Tensor> table_bags_output(at::TensorList weights, at::IntArrayRef bits, at::TensorList indices,
                                          const c10::List<c10::optional<at::Tensor>>& offsets, at::IntArrayRef modes,
                                          const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                                          const c10::List<bool>& include_last_offset,
                                          const c10::List<c10::optional<int64_t>>& padding_idx,
                                          const c10::List<c10::optional<at::Tensor>>& compressed_indices_mapping) {
  return run_table_group("table_bags_output", weights, indices, offsets, modes, per_sample_weights,
                         include_last_offset, padding_idx, bits, compressed_indices_mapping, outputs_of);
}

// The same outputs side by side in one [B, sum of D] tensor, each table writing its columns.
at::Tensor table_bags_concat_output(at::TensorList weights, at::IntArrayRef bits, at::TensorList indices,
                                    const c10::List<c10::optional<at::Tensor>>& offsets, at::IntArrayRef modes,
                                    const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                                    const c10::List<bool>& include_last_offset,
                                    const c10::List<c10::optional<int64_t>>& padding_idx,
                                    const c10::List<c10::optional<at::Tensor>>& compressed_indices_mapping) {
  return run_table_group("table_bags_concat_output", weights, indices, offsets, modes, per_sample_weights,
                         include_last_offset, padding_idx, bits, compressed_indices_mapping, concat_output_of);
}

// table_bags_output's outputs with each table's offset2bag, bag_size and max_indices (what
// embedding_bag returns for it alone): the form the gradient runs.
GroupResults table_bags(at::TensorList weights, at::IntArrayRef bits, at::TensorList indices,
                        const c10::List<c10::optional<at::Tensor>>& offsets, at::IntArrayRef modes,
                        const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                        const c10::List<bool>& include_last_offset, const c10::List<c10::optional<int64_t>>& padding_idx,
                        const c10::List<c10::optional<at::Tensor>>& compressed_indices_mapping,
                        const c10::List<bool>& /*scale_grad_by_freq*/, const c10::List<bool>& /*sparse*/) {
  return run_table_group("table_bags", weights, indices, offsets, modes, per_sample_weights, include_last_offset,
                         padding_idx, bits, compressed_indices_mapping, results_of<false>);
}

// The same with the outputs side by side (table_bags_concat_output's).
std::tuple<at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>> table_bags_concat(at::TensorList weights, at::IntArrayRef bits, at::TensorList indices,
                               const c10::List<c10::optional<at::Tensor>>& offsets, at::IntArrayRef modes,
                               const c10::List<c10::optional<at::Tensor>>& per_sample_weights,
                               const c10::List<bool>& include_last_offset,
                               const c10::List<c10::optional<int64_t>>& padding_idx,
                               const c10::List<c10::optional<at::Tensor>>& compressed_indices_mapping,
                        const c10::List<bool>& /*scale_grad_by_freq*/, const c10::List<bool>& /*sparse*/) {
  GroupResults r = run_table_group("table_bags_concat", weights, indices, offsets, modes, per_sample_weights,
                                   include_last_offset, padding_idx, bits, compressed_indices_mapping, results_of<true>);
  return {std::get<0>(r).front(), std::get<1>(r), std::get<2>(r), std::get<3>(r)};
}

}  // namespace
}  // namespace shapejit::torch_ext

TORCH_LIBRARY(shapejit, m) {
  // torch.embedding_bag's schema (with padding_idx); offsets may be None for 2-D indices.
  m.def(
      "embedding_bag(Tensor weight, Tensor indices, Tensor? offsets=None, bool scale_grad_by_freq=False, "
      "int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, "
      "int? padding_idx=None) -> (Tensor, Tensor, Tensor, Tensor)");
  // The gradients of one bag (of weight and per_sample_weights; None where need_* is False): torch's
  // ATen backward ops fed with the index results (python/torch_bag_autograd.cpp).
  m.def(
      "embedding_bag_backward(Tensor grad, Tensor weight, Tensor indices, Tensor? offsets, "
      "Tensor? per_sample_weights, int mode, int? padding_idx, bool scale_grad_by_freq, bool sparse, "
      "Tensor offset2bag, Tensor bag_size, Tensor max_indices, bool need_weight, bool need_per_sample_weights) "
      "-> (Tensor, Tensor)");
  // Its output alone, without the arguments only the gradient reads.
  m.def(
      "embedding_bag_output(Tensor weight, Tensor indices, Tensor? offsets=None, int mode=0, "
      "Tensor? per_sample_weights=None, bool include_last_offset=False, int? padding_idx=None) -> Tensor");
  // Many float tables in one call: embedding_bag_output's arguments, one list entry per table.
  m.def(
      "embedding_bags_output(Tensor[] weights, Tensor[] indices, Tensor?[] offsets, int[] modes, "
      "Tensor?[] per_sample_weights, bool[] include_last_offset, int?[] padding_idx) -> Tensor[]");
  // Float and rowwise-quantized tables in one call: bits[k] 0 makes table k a float table as
  // above; 8, 4 or 2 packed rows read by quantized_embedding_bag_output's rules (offsets as
  // lengths, a float32 output, compressed_indices_mapping for a pruned table).
  m.def(
      "table_bags_output(Tensor[] weights, int[] bits, Tensor[] indices, Tensor?[] offsets, int[] modes, "
      "Tensor?[] per_sample_weights, bool[] include_last_offset, int?[] padding_idx, "
      "Tensor?[] compressed_indices_mapping) -> Tensor[]");
  // The same, concatenated along dim 1: one [B, sum of D] tensor (every table with B bags).
  m.def(
      "table_bags_concat_output(Tensor[] weights, int[] bits, Tensor[] indices, Tensor?[] offsets, int[] modes, "
      "Tensor?[] per_sample_weights, bool[] include_last_offset, int?[] padding_idx, "
      "Tensor?[] compressed_indices_mapping) -> Tensor");
  // table_bags_output and table_bags_concat_output with every table's index results (lists of
  // offset2bag, bag_size, max_indices as embedding_bag returns them): what autograd runs.
  // scale_grad_by_freq and sparse (one per table, or empty: all False) only shape the gradient.
  m.def(
      "table_bags(Tensor[] weights, int[] bits, Tensor[] indices, Tensor?[] offsets, int[] modes, "
      "Tensor?[] per_sample_weights, bool[] include_last_offset, int?[] padding_idx, "
      "Tensor?[] compressed_indices_mapping, bool[] scale_grad_by_freq, bool[] sparse) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  m.def(
      "table_bags_concat(Tensor[] weights, int[] bits, Tensor[] indices, Tensor?[] offsets, int[] modes, "
      "Tensor?[] per_sample_weights, bool[] include_last_offset, int?[] padding_idx, "
      "Tensor?[] compressed_indices_mapping, bool[] scale_grad_by_freq, bool[] sparse) -> (Tensor, Tensor[], Tensor[], Tensor[])");
  shapejit::torch_ext::register_linear_group(m);
  shapejit::torch_ext::register_quantized(m);
  shapejit::torch_ext::register_engine_ops(m);
}

TORCH_LIBRARY_IMPL(shapejit, CPU, m) {
  m.impl("embedding_bag", &shapejit::torch_ext::embedding_bag);
  m.impl("embedding_bag_output", &shapejit::torch_ext::embedding_bag_output);
  m.impl("embedding_bags_output", &shapejit::torch_ext::embedding_bags_output);
  m.impl("table_bags_output", &shapejit::torch_ext::table_bags_output);
  m.impl("table_bags_concat_output", &shapejit::torch_ext::table_bags_concat_output);
  m.impl("table_bags", &shapejit::torch_ext::table_bags);
  m.impl("table_bags_concat", &shapejit::torch_ext::table_bags_concat);
}
