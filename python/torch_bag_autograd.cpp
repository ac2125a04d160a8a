// The Autograd kernel of shapejit::embedding_bag, in C++.
//
// A gradient registered from Python (torch.library.register_autograd) runs a Python function on
// every call of the op, gradient or not: 6.5 us of a 9.6 us call of one bag and one index on the
// Intel host, against torch.embedding_bag's 2.9 us (bench/torch_ops_bench.py). Here a call that
// needs no gradient goes straight to the CPU (or fake) kernel below autograd, and one that does
// records a node whose backward is the one python/shapejit/autograd.py describes: torch's own
// ATen backward ops (_embedding_bag_backward, _embedding_bag_per_sample_weights_backward) fed
// with shapejit's index results, so the gradients are bitwise nn.EmbeddingBag's. Those are ATen
// ops with their own autograd and fake kernels, so torch.compile's AOT tracing goes through the
// backward as it goes through any ATen op's.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace shapejit::torch_ext {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// shapejit::embedding_bag below autograd: the CPU kernel, or a fake one while tracing.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bag_below_autograd(
    const at::Tensor& weight, const at::Tensor& indices, const std::optional<at::Tensor>& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights,
    bool include_last_offset, std::optional<int64_t> padding_idx) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("shapejit::embedding_bag", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool,
                                 int64_t, bool, const std::optional<at::Tensor>&, bool, std::optional<int64_t>)>();
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset,
                 padding_idx);
}

// The gradients of one bag (of the weight and of per_sample_weights; undefined where not asked
// for): torch's own ATen backward ops, given the 1-D indices, offsets and per_sample_weights
// torch.embedding_bag hands them. shapejit::embedding_bag's autograd node and the group ops'
// Python backward (python/shapejit/autograd.py, through the embedding_bag_backward op) both use it.
std::tuple<at::Tensor, at::Tensor> embedding_bag_gradients(
    const at::Tensor& grad, const at::Tensor& weight, const at::Tensor& indices,
    const std::optional<at::Tensor>& given_offsets, const std::optional<at::Tensor>& per_sample_weights,
    int64_t mode, std::optional<int64_t> padding_idx, bool scale_grad_by_freq, bool sparse,
    const at::Tensor& offset2bag, const at::Tensor& bag_size, const at::Tensor& max_indices, bool need_weight,
    bool need_per_sample_weights) {
  const bool has_weights = per_sample_weights.has_value() && per_sample_weights->defined();
  at::Tensor flat = indices, psw = has_weights ? *per_sample_weights : at::Tensor();
  at::Tensor offsets = given_offsets.has_value() ? *given_offsets : at::Tensor();
  // 2-D indices flattened with offsets 0, L, 2L, ...; indices and offsets of different dtypes
  // both int64 (ATen's promotion). Sizes are symbolic when torch.compile traces with dynamic
  // shapes, so they are read as SymInts.
  if (indices.dim() == 2) {
    offsets = at::arange(at::Scalar(0), at::Scalar(indices.sym_numel()), at::Scalar(indices.sym_size(1)),
                         indices.options());
    flat = indices.reshape(-1);
    if (psw.defined()) psw = psw.reshape(-1);
  }
  if (offsets.scalar_type() != flat.scalar_type()) {
    flat = flat.to(at::kLong);
    offsets = offsets.to(at::kLong);
  }
  // ATen's padding_idx: -1 for none, a negative one counted from the end (the backward ops take
  // an int: a traced row count is fixed by it).
  int64_t pad = -1;
  if (padding_idx.has_value()) {
    pad = *padding_idx;
    if (pad < 0) pad += weight.sym_size(0).guard_int(__FILE__, __LINE__);
  }
  at::Tensor grad_weight, grad_psw;
  if (need_weight)
    grad_weight = at::_embedding_bag_backward_symint(grad, flat, offsets, offset2bag, bag_size, max_indices,
                                                     weight.sym_size(0), scale_grad_by_freq, mode, sparse,
                                                     psw.defined() ? std::optional<at::Tensor>(psw) : std::nullopt,
                                                     pad);
  if (need_per_sample_weights && has_weights)
    grad_psw = at::_embedding_bag_per_sample_weights_backward(grad, weight, flat, offsets, offset2bag, mode, pad)
                   .reshape_symint(per_sample_weights->sym_sizes());
  return {grad_weight, grad_psw};
}

struct EmbeddingBagFunction : torch::autograd::Function<EmbeddingBagFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& indices,
                               const std::optional<at::Tensor>& offsets, bool scale_grad_by_freq, int64_t mode,
                               bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                               bool include_last_offset, std::optional<int64_t> padding_idx) {
    auto [output, offset2bag, bag_size, max_indices] =
        bag_below_autograd(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           include_last_offset, padding_idx);
    const bool has_offsets = offsets.has_value() && offsets->defined();
    const bool has_weights = per_sample_weights.has_value() && per_sample_weights->defined();
    ctx->saved_data["mode"] = mode;
    ctx->saved_data["scale_grad_by_freq"] = scale_grad_by_freq;
    ctx->saved_data["sparse"] = sparse;
    ctx->saved_data["padding_idx"] = padding_idx.has_value() ? *padding_idx : int64_t{-1};
    ctx->saved_data["has_padding"] = padding_idx.has_value();
    ctx->saved_data["has_offsets"] = has_offsets;
    ctx->saved_data["has_weights"] = has_weights;
    ctx->save_for_backward({weight, indices, has_offsets ? *offsets : at::Tensor(),
                            has_weights ? *per_sample_weights : at::Tensor(), offset2bag, bag_size, max_indices});
    ctx->mark_non_differentiable({offset2bag, bag_size, max_indices});
    return {output, offset2bag, bag_size, max_indices};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const bool has_offsets = ctx->saved_data["has_offsets"].toBool();
    const bool has_weights = ctx->saved_data["has_weights"].toBool();
    const std::optional<int64_t> padding_idx =
        ctx->saved_data["has_padding"].toBool() ? std::optional<int64_t>(ctx->saved_data["padding_idx"].toInt())
                                                : std::nullopt;
    // The graph's edges are the tensors given: weight, indices, then offsets and the weights when
    // present.
    auto [grad_weight, grad_psw] = embedding_bag_gradients(
        grads[0], saved[0], saved[1], has_offsets ? std::optional<at::Tensor>(saved[2]) : std::nullopt,
        has_weights ? std::optional<at::Tensor>(saved[3]) : std::nullopt, ctx->saved_data["mode"].toInt(),
        padding_idx, ctx->saved_data["scale_grad_by_freq"].toBool(), ctx->saved_data["sparse"].toBool(), saved[4],
        saved[5], saved[6], ctx->needs_input_grad(0), has_weights && ctx->needs_input_grad(has_offsets ? 3 : 2));
    // One gradient per forward argument (none for the integer and flag ones).
    return {grad_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), grad_psw, at::Tensor(),
            at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag_autograd(
    const at::Tensor& weight, const at::Tensor& indices, const std::optional<at::Tensor>& offsets,
    bool scale_grad_by_freq, int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights,
    bool include_last_offset, std::optional<int64_t> padding_idx) {
  const bool psw_grad = per_sample_weights.has_value() && per_sample_weights->defined() &&
                        per_sample_weights->requires_grad();
  if (!at::GradMode::is_enabled() || (!weight.requires_grad() && !psw_grad))  // no node: the kernel alone
    return bag_below_autograd(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                              include_last_offset, padding_idx);
  variable_list r = EmbeddingBagFunction::apply(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                                                per_sample_weights, include_last_offset, padding_idx);
  return {r[0], r[1], r[2], r[3]};
}

}  // namespace
}  // namespace shapejit::torch_ext

TORCH_LIBRARY_IMPL(shapejit, Autograd, m) {
  m.impl("embedding_bag", &shapejit::torch_ext::embedding_bag_autograd);
}

// ATen ops only: torch.compile and torch.export see through it to them.
TORCH_LIBRARY_IMPL(shapejit, CompositeImplicitAutograd, m) {
  m.impl("embedding_bag_backward", &shapejit::torch_ext::embedding_bag_gradients);
}
