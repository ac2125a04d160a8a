"""Gradients of the torch.ops.shapejit ops (torch.library.register_autograd, so they hold under
torch.compile and torch.export too).

Embedding bags: the forward is shapejit's, the backward is torch's own: the ATen ops the
derivative of torch.embedding_bag calls (_embedding_bag_backward, which picks the dense or the
sparse form, and _embedding_bag_per_sample_weights_backward), fed with the index results
shapejit computed exactly as ATen does (offset2bag, bag_size, max_indices). So a weight's and a
per_sample_weights' gradient are bitwise what torch.nn.EmbeddingBag produces.

Linear groups: the gradient of inputs, weights and bias is torch's linear backward written out
with the same ATen calls (grad_x = g W, grad_W = (x^T g)^T, grad_b = sum of g's rows), parts
reading one input from one packed weight together, as torch's in-projection does.

Rowwise-quantized tables are inference only, as torch's quantized ops: a gradient asked of
per_sample_weights through them is an error.
"""
from typing import List, Optional

import torch
from torch import Tensor

from .fake import _quantized_dim, linear_group_settings


def _no_gradients(inputs) -> list:
    """The backward's answer of no gradient for each of an op's inputs: register_autograd wants a
    list of one None per tensor for a Tensor[] argument (also an empty one), None otherwise."""
    return [[None] * len(a) if isinstance(a, (list, tuple)) and all(isinstance(t, Tensor) for t in a) else None
            for a in inputs]


def bag_gradients(grad: Tensor, weight: Tensor, indices: Tensor, offsets: Optional[Tensor],
                  per_sample_weights: Optional[Tensor], mode: int, padding_idx: Optional[int],
                  scale_grad_by_freq: bool, sparse: bool, offset2bag: Tensor, bag_size: Tensor, max_indices: Tensor,
                  need_weight: bool, need_psw: bool):
    """(grad of weight, grad of per_sample_weights) of one bag, None where not asked for: torch's
    backward ops, through the op shapejit::embedding_bag's own autograd node uses
    (python/torch_bag_autograd.cpp)."""
    return torch.ops.shapejit.embedding_bag_backward(grad, weight, indices, offsets, per_sample_weights, mode,
                                                     padding_idx, scale_grad_by_freq, sparse, offset2bag, bag_size,
                                                     max_indices, need_weight, need_psw)


# ---- shapejit::embedding_bag: all four results -------------------------------------------------

# Its Autograd kernel is C++ (python/torch_bag_autograd.cpp, with bag_gradients' backward): a
# Python one ran on every call of the op, gradient or not, and cost twice torch.embedding_bag's
# whole call for a small bag.


# ---- the output-only ops ---------------------------------------------------------------------
# embedding_bag_output, table_bags_output, table_bags_concat_output and
# quantized_embedding_bag_output have no autograd kernel: a Python one would run (and cost
# about 20 us) at every inference call. They skip the index results a backward reads; the
# modules call embedding_bag / table_bags / table_bags_concat when a gradient is needed.


# ---- group ops: table_bags (one output per table) and table_bags_concat ([B, sum of D]) -------

def _group_setup(ctx, inputs, output):
    (weights, bits, indices, offsets, modes, psw, _, padding_idx, _, scale_grad_by_freq, sparse) = inputs
    n = len(weights)
    ctx.n = n
    ctx.settings = (list(bits) or [0] * n, list(modes), list(padding_idx), list(scale_grad_by_freq) or [False] * n,
                    list(sparse) or [False] * n)
    ctx.no_gradients = _no_gradients(inputs)
    ctx.psw_given = [p is not None for p in psw]
    ctx.offsets_given = [o is not None for o in offsets]
    # Each table's columns of a concatenated output.
    ctx.dims = [w.size(1) if b == 0 else _quantized_dim(w, b, None) for w, b in zip(weights, ctx.settings[0])]
    _, offset2bag, bag_size, max_indices = output
    ctx.save_for_backward(*weights, *indices, *[o for o in offsets if o is not None],
                          *[p for p in psw if p is not None], *offset2bag, *bag_size, *max_indices)


def _group_saved(ctx):
    saved = list(ctx.saved_tensors)
    n = ctx.n

    def take(count):
        nonlocal saved
        head, saved = saved[:count], saved[count:]
        return head

    weights, indices = take(n), take(n)
    given_offsets = iter(take(sum(ctx.offsets_given)))
    given_psw = iter(take(sum(ctx.psw_given)))
    offsets = [next(given_offsets) if g else None for g in ctx.offsets_given]
    psw = [next(given_psw) if g else None for g in ctx.psw_given]
    return weights, indices, offsets, psw, take(n), take(n), take(n)


def _group_gradients(ctx, grads: List[Tensor], need_index=(0, 5)):
    """The backward's result: gradients of the weights (argument need_index[0]) and of the
    per_sample_weights (argument need_index[1]), None for the other arguments."""
    weights, indices, offsets, psw, offset2bag, bag_size, max_indices = _group_saved(ctx)
    bits, modes, padding_idx, scale_grad_by_freq, sparse = ctx.settings
    need_weights, need_psw = ctx.needs_input_grad[need_index[0]], ctx.needs_input_grad[need_index[1]]
    grad_weights: List[Optional[Tensor]] = []
    grad_psw: List[Optional[Tensor]] = []
    for k in range(ctx.n):
        want_w = bool(need_weights[k]) if isinstance(need_weights, (list, tuple)) else bool(need_weights)
        want_p = bool(need_psw[k]) if isinstance(need_psw, (list, tuple)) else bool(need_psw)
        if bits[k] != 0:
            if want_p and psw[k] is not None:
                raise RuntimeError("shapejit.EmbeddingBagGroup: bags[{}] is a rowwise-quantized table, which is "
                                   "inference only (as torch's quantized ops): its per_sample_weights get no "
                                   "gradient".format(k))
            grad_weights.append(None)
            grad_psw.append(None)
            continue
        gw, gp = bag_gradients(grads[k], weights[k], indices[k], offsets[k], psw[k], modes[k], padding_idx[k],
                               scale_grad_by_freq[k], sparse[k], offset2bag[k], bag_size[k], max_indices[k],
                               want_w, want_p)
        grad_weights.append(gw)
        grad_psw.append(gp)
    result = list(ctx.no_gradients)
    result[need_index[0]] = grad_weights
    if result[need_index[1]] is not None:  # a list holding None is one non-tensor argument: no gradient
        result[need_index[1]] = grad_psw
    return tuple(result)


def _table_bags_backward(ctx, grad_outputs, *_index_grads):
    return _group_gradients(ctx, list(grad_outputs))


def _table_bags_concat_backward(ctx, grad, *_index_grads):
    return _group_gradients(ctx, list(grad.split(ctx.dims, dim=1)))


torch.library.register_autograd("shapejit::table_bags", _table_bags_backward, setup_context=_group_setup)
torch.library.register_autograd("shapejit::table_bags_concat", _table_bags_concat_backward,
                                setup_context=_group_setup)


# embedding_bags_output (the float-only group op of the previous release): asked for a gradient,
# the index results are computed by table_bags (a second engine call).

def _output_group_setup(ctx, inputs, output):
    n = len(inputs[0])
    full = tuple(inputs) + ([False] * n, [False] * n)
    _group_setup(ctx, full, torch.ops.shapejit.table_bags(*full))
    ctx.no_gradients = ctx.no_gradients[:9]


def _embedding_bags_output_setup(ctx, inputs, output):
    weights, indices, offsets, modes, psw, include_last_offset, padding_idx = inputs
    n = len(weights)
    _output_group_setup(ctx, (weights, [0] * n, indices, offsets, modes, psw, include_last_offset, padding_idx,
                              [None] * n), output)
    # This op's arguments: no bits and no mappings.
    nones = ctx.no_gradients
    ctx.no_gradients = [nones[0], nones[2], nones[3], nones[4], nones[5], nones[6], nones[7]]


def _embedding_bags_output_backward(ctx, grad_outputs):
    grads = _group_gradients(ctx, list(grad_outputs), need_index=(0, 4))
    return grads


torch.library.register_autograd("shapejit::embedding_bags_output", _embedding_bags_output_backward,
                                setup_context=_embedding_bags_output_setup)


# ---- rowwise-quantized tables: inference only ---------------------------------------------------

def _quantized_setup(ctx, inputs, output):
    pass


def _quantized_backward(ctx, *grads):
    raise RuntimeError("shapejit.quantized_embedding_bag: rowwise-quantized tables are inference only (as torch's "
                       "quantized embedding-bag ops): per_sample_weights get no gradient; compute without "
                       "requires_grad or use a float table (shapejit.EmbeddingBag)")


torch.library.register_autograd("shapejit::quantized_embedding_bag", _quantized_backward,
                                setup_context=_quantized_setup)


# ---- linear groups -----------------------------------------------------------------------------

def _part_grad_rows(grad: Tensor, x: Tensor, layout: str, n: int) -> Tensor:
    """The gradient of a part's output as rows [M, N] in the input's row order (the inverse of
    the head-split layout)."""
    if layout == "heads_seq_first":  # y [Nb, H, L, Dh] from x [L, Nb, K]
        grad = grad.permute(2, 0, 1, 3)
    elif layout == "heads_batch_first":  # y [Nb, H, L, Dh] from x [Nb, L, K]
        grad = grad.permute(0, 2, 1, 3)
    return grad.reshape(-1, n)


def _form(settings) -> str:
    quant = getattr(settings, "quant", None)
    return quant[0] if quant else "f32"


def _dequantized(weights: List[Tensor], quant: str, code_scales: Optional[List[Tensor]] = None) -> List[Tensor]:
    """The weights a quantized group computes with (codes * scale per row): the inputs'
    gradient flows through them (docs/quantized-linear-semantics.md). From f32 weights they are
    quantized again here, by the same rule as the group's (bitwise the same codes)."""
    if quant == "f32":
        return weights
    out = []
    for i, w in enumerate(weights):
        if code_scales:
            codes, scales = w, code_scales[i]
        else:
            codes, scales = torch.ops.shapejit.quantize_linear_weights(w.detach(), quant)
        out.append(codes.to(torch.float32) * scales.unsqueeze(1))
    return out


def _linear_backward(settings, weights: List[Tensor], bias: Optional[Tensor], inputs: List[Tensor],
                     grads: List[Tensor], need_weights, need_bias: bool, need_inputs, code_scales=None):
    parts = settings.parts(weights)
    # Quantized forms: inputs' gradient through the dequantized weights; the f32 weights get the
    # straight-through gradient (x^T g, as if unquantized).
    input_weights = _dequantized(weights, _form(settings), code_scales)
    packed = len(weights) == 1 and len(settings.rows) > 0
    for p, (_, _, _, _, _, activation) in enumerate(parts):
        if activation != "none":
            raise NotImplementedError("shapejit.LinearGroup: part {} has activation '{}'; gradients are computed "
                                      "for activation 'none' only".format(p, activation))
    # Runs of parts torch computes as one linear: consecutive row ranges of one packed weight
    # reading the same input (an in-projection's self-attention, or its key and value).
    runs = []
    for p in range(len(parts)):
        if packed and runs and inputs[p] is inputs[runs[-1][-1]]:
            runs[-1].append(p)
        else:
            runs.append([p])
    begins = [0]
    for n, *_ in parts:
        begins.append(begins[-1] + n)
    grad_inputs: List[Optional[Tensor]] = [None] * len(parts)
    weight_pieces, bias_pieces = [], []
    for run in runs:
        first, last = run[0], run[-1]
        rows = [_part_grad_rows(grads[p], inputs[p], parts[p][2], parts[p][0]) for p in run]
        rows = [g * parts[p][4] if parts[p][4] != 1.0 else g for g, p in zip(rows, run)]
        g = rows[0] if len(rows) == 1 else torch.cat(rows, dim=1)
        w = input_weights[0][begins[first]:begins[last + 1]] if packed else input_weights[first]
        x = inputs[first]
        x2 = x.reshape(-1, x.size(-1))
        wants_x = any(bool(need_inputs[p]) for p in run) if isinstance(need_inputs, (list, tuple)) else need_inputs
        if wants_x:
            grad_inputs[first] = g.mm(w).view(x.shape)
        weight_pieces.append(x2.t().mm(g).t() if need_weights else None)
        bias_pieces.append(g.sum(0) if need_bias else None)
    grad_weights = None
    if need_weights:
        if packed:
            grad = torch.cat(weight_pieces, dim=0) if len(weight_pieces) > 1 else weight_pieces[0]
            extra = weights[0].size(0) - begins[-1]
            if extra:  # rows no part reads
                grad = torch.cat([grad, grad.new_zeros(extra, grad.size(1))], dim=0)
            grad_weights = [grad]
        else:
            grad_weights = weight_pieces
    grad_bias = None
    if need_bias and bias is not None:
        grad_bias = torch.cat(bias_pieces) if len(bias_pieces) > 1 else bias_pieces[0]
        if bias.size(0) > grad_bias.size(0):
            grad_bias = torch.cat([grad_bias, grad_bias.new_zeros(bias.size(0) - grad_bias.size(0))])
    return grad_weights, grad_bias, grad_inputs


def _linear_run_current_setup(ctx, inputs, output):
    group, weights, bias, xs = inputs
    ctx.settings = linear_group_settings(group)
    ctx.no_gradients = _no_gradients(inputs)
    ctx.counts = (len(weights), len(xs), bias is not None)
    # Which inputs are one tensor (parts fused in the backward), kept as indices.
    ctx.same_as_previous = [p > 0 and xs[p] is xs[p - 1] for p in range(len(xs))]
    ctx.save_for_backward(*weights, *([bias] if bias is not None else []), *xs)


def _unsaved(ctx):
    saved = list(ctx.saved_tensors)
    nw, nx, has_bias = ctx.counts
    weights = saved[:nw]
    bias = saved[nw] if has_bias else None
    xs = saved[nw + int(has_bias):]
    for p, same in enumerate(ctx.same_as_previous):  # saved tensors unpack as new objects
        if same:
            xs[p] = xs[p - 1]
    return weights, bias, xs


def _linear_run_current_backward(ctx, grads):
    weights, bias, xs = _unsaved(ctx)
    need = ctx.needs_input_grad
    need_w = any(bool(b) for b in need[1]) if isinstance(need[1], (list, tuple)) else bool(need[1])
    gw, gb, gx = _linear_backward(ctx.settings, weights, bias, xs, list(grads), need_w, bool(need[2]), need[3])
    return None, gw if gw is not None else ctx.no_gradients[1], gb, gx


torch.library.register_autograd("shapejit::linear_group_run_current", _linear_run_current_backward,
                                setup_context=_linear_run_current_setup)


def _linear_run_setup(ctx, inputs, output):
    group, xs = inputs
    ctx.settings = linear_group_settings(group)
    # The real group's source weights (its pickled state: format, weights, bias; format 2 appends
    # the code scales and a [form, count] tensor); a traced one has none to give.
    ctx.source_weights, ctx.code_scales = None, None
    if isinstance(group, torch.ScriptObject):
        fmt, tensors, _ = group.__getstate__()[0]
        tensors = list(tensors)
        if fmt == 2:
            count = int(tensors[-1][1])
            tensors = tensors[:-1]
            if count:
                ctx.code_scales = tensors[len(tensors) - count:]
                tensors = tensors[:len(tensors) - count]
        ctx.source_weights = tensors
    ctx.counts = (0, len(xs), False)
    ctx.same_as_previous = [p > 0 and xs[p] is xs[p - 1] for p in range(len(xs))]
    ctx.save_for_backward(*xs)


def _linear_run_backward(ctx, grads):
    _, _, xs = _unsaved(ctx)
    if ctx.source_weights is None:
        raise RuntimeError("shapejit.linear_group_run: under torch.compile / torch.export the group's packed weights "
                           "are opaque, so its inputs get no gradient; call linear_group_run_current(group, "
                           "weights, bias, inputs) with the weights instead")
    # The tensors the group was packed from (detached): the inputs' gradient only.
    _, _, gx = _linear_backward(ctx.settings, ctx.source_weights, None, xs, list(grads), False, False,
                                ctx.needs_input_grad[1], ctx.code_scales)
    return None, gx


torch.library.register_autograd("shapejit::linear_group_run", _linear_run_backward, setup_context=_linear_run_setup)


# Under torch.compile and torch.export the group is a FakeScriptObject, and an op taking one is
# dispatched in Python (torch._ops.TorchBindOpOverload), which skips the C++ autograd kernel that
# register_autograd installed. The same gradient as a Python Autograd kernel for that path.

def _python_autograd_kernel(op, setup, backward):
    """An Autograd py_impl of linear_group_run_current(group, weights, bias, inputs) (with_weights)
    or linear_group_run(group, inputs): the op's lists flattened into autograd.Function arguments."""
    with_weights = "current" in op._name

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, group, bias, count, *tensors):
            weights, xs = list(tensors[:count]), list(tensors[count:])
            args = (group, weights, bias, xs) if with_weights else (group, xs)
            with torch._C._AutoDispatchBelowAutograd():
                out = op(*args)
            setup(ctx, args, out)
            return tuple(out)

        @staticmethod
        def backward(ctx, *grads):
            need = ctx.needs_input_grad
            count = ctx.counts[0]
            flat = need[3:]
            if with_weights:
                ctx.needs_input_grad = (False, list(flat[:count]), need[1], list(flat[count:]))
            else:
                ctx.needs_input_grad = (False, list(flat))
            result = backward(ctx, list(grads))
            if with_weights:
                _, gw, gb, gx = result
                return (None, gb, None) + tuple(gw) + tuple(gx)
            return (None, None, None) + tuple(result[1])

    def kernel(*args):
        if with_weights:
            group, weights, bias, xs = args
        else:
            (group, xs), weights, bias = args, [], None
        return list(Function.apply(group, bias, len(weights), *weights, *xs))

    # Python dispatch treats a backend's autograd key without a Python kernel as a fallthrough
    # and removes it from the key set, which drops every backend's autograd key (they share one
    # functionality bit): so the CPU and CUDA keys are registered beside the alias.
    keys = torch._C.DispatchKey
    for key in (keys.Autograd, keys.AutogradCPU, keys.AutogradCUDA):
        op.py_impl(key)(kernel)


_python_autograd_kernel(torch.ops.shapejit.linear_group_run_current.default, _linear_run_current_setup,
                        _linear_run_current_backward)
_python_autograd_kernel(torch.ops.shapejit.linear_group_run.default, _linear_run_setup, _linear_run_backward)
