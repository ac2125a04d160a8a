"""Fake (meta) kernels of every torch.ops.shapejit tensor op, and a fake LinearGroup, so that
torch.compile and torch.export trace shapejit calls without running them: each kernel returns
empty tensors of exactly the shapes, dtypes and strides the CPU kernel returns.

Why Python (torch.library.register_fake) and not a C++ Meta kernel: the shapes follow from the
arguments' sizes alone (no data-dependent size anywhere: a bag count is offsets' length, an
index count the indices' numel), symbolic sizes flow through these few lines as they are, and
torch.library's Python registration is what register_autograd (autograd.py) pairs with. The
rules mirror runtime/embag/validate.cpp (set_plan_shapes) and python/shapejit_torch.cpp; tests
compare every fake result's shape and dtype with the real op's (test_compile_export.py).
"""
from typing import List, Optional

import torch
from torch import Tensor

_INT_TYPES = (torch.int32, torch.int64)


def _index_out_dtype(indices: Tensor, offsets: Optional[Tensor]) -> torch.dtype:
    """offset2bag, bag_size and max_indices: the indices' dtype when the offsets share it (2-D
    indices make offsets of their own dtype), else int64."""
    if offsets is None or offsets.dtype == indices.dtype:
        return indices.dtype
    return torch.int64


def _counts(indices: Tensor, offsets: Optional[Tensor], include_last_offset: bool):
    """(number of offsets, number of bags, number of indices) of a call."""
    num_offsets = indices.size(0) if indices.dim() == 2 else offsets.size(0)
    bags = torch.sym_max(0, num_offsets - 1) if include_last_offset else num_offsets
    return num_offsets, bags, indices.numel()


def _aten_sum_fast_path(weight: Tensor, per_sample_weights: Optional[Tensor], indices: Tensor,
                        padding_idx: Optional[int]) -> bool:
    """ATen leaves offset2bag empty in sum mode on this path only (shapejit_torch.cpp)."""
    if padding_idx is not None or weight.stride(1) != 1:
        return False
    if per_sample_weights is None:
        return True
    flat = per_sample_weights.reshape(-1) if indices.dim() == 2 else per_sample_weights
    return flat.stride(0) == 1


def _bag_results(output: Tensor, indices: Tensor, offsets: Optional[Tensor], mode: int, include_last_offset: bool,
                 offset2bag_len):
    """embedding_bag's three index results next to `output` ([bags, dim])."""
    num_offsets, bags, _ = _counts(indices, offsets, include_last_offset)
    ints = _index_out_dtype(indices, offsets)
    bag_size_len = num_offsets if mode == 0 else bags
    offset2bag = indices.new_empty((offset2bag_len,), dtype=ints)
    bag_size = indices.new_empty((bag_size_len,), dtype=ints)
    if mode == 2:
        max_indices = indices.new_empty((bags, output.size(1)), dtype=ints)
    else:
        max_indices = indices.new_empty((bag_size_len,), dtype=ints)
    return output, offset2bag, bag_size, max_indices


def _float_output(weight: Tensor, indices: Tensor, offsets: Optional[Tensor], include_last_offset: bool) -> Tensor:
    _, bags, _ = _counts(indices, offsets, include_last_offset)
    return weight.new_empty((bags, weight.size(1)))


def _float_offset2bag_len(weight, indices, mode, per_sample_weights, padding_idx, sum_fills_offset2bag: bool):
    """The engine fills offset2bag (one per index) unless in sum mode without padding; the
    embedding_bag op fills it in sum mode too where ATen does (off its fast path)."""
    if mode != 0 or padding_idx is not None:
        return indices.numel()
    if sum_fills_offset2bag and not _aten_sum_fast_path(weight, per_sample_weights, indices, padding_idx):
        return indices.numel()
    return 0


@torch.library.register_fake("shapejit::embedding_bag")
def _embedding_bag(weight, indices, offsets=None, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=None):
    output = _float_output(weight, indices, offsets, include_last_offset)
    o2b = _float_offset2bag_len(weight, indices, mode, per_sample_weights, padding_idx, True)
    return _bag_results(output, indices, offsets, mode, include_last_offset, o2b)


@torch.library.register_fake("shapejit::embedding_bag_output")
def _embedding_bag_output(weight, indices, offsets=None, mode=0, per_sample_weights=None, include_last_offset=False,
                          padding_idx=None):
    return _float_output(weight, indices, offsets, include_last_offset)


_CODES_PER_BYTE = {8: 1, 4: 2, 2: 4}


def _quantized_dim(weight: Tensor, bits: int, dim: Optional[int]):
    if dim is not None:
        return dim
    trailer = 8 if bits == 8 else 4  # two f32 or two f16 after the codes
    return (weight.size(1) - trailer) * _CODES_PER_BYTE[bits]


def _quantized_output(weight, bits, indices, offsets, include_last_offset, output_dtype, dim) -> Tensor:
    _, bags, _ = _counts(indices, offsets, include_last_offset)
    dtype = torch.float32 if output_dtype is None else output_dtype
    return weight.new_empty((bags, _quantized_dim(weight, bits, dim)), dtype=dtype)


@torch.library.register_fake("shapejit::quantized_embedding_bag")
def _quantized_embedding_bag(weight, bits, indices, offsets=None, mode=0, per_sample_weights=None, padding_idx=None,
                             include_last_offset=False, compressed_indices_mapping=None, offsets_as_lengths=False,
                             output_dtype=None, dim=None):
    output = _quantized_output(weight, bits, indices, offsets, include_last_offset, output_dtype, dim)
    o2b = indices.numel() if mode != 0 or padding_idx is not None else 0
    return _bag_results(output, indices, offsets, mode, include_last_offset, o2b)


@torch.library.register_fake("shapejit::quantized_embedding_bag_output")
def _quantized_embedding_bag_output(weight, bits, indices, offsets=None, mode=0, per_sample_weights=None,
                                    padding_idx=None, include_last_offset=False, compressed_indices_mapping=None,
                                    offsets_as_lengths=False, output_dtype=None, dim=None):
    return _quantized_output(weight, bits, indices, offsets, include_last_offset, output_dtype, dim)


@torch.library.register_fake("shapejit::rowwise_prepack")
def _rowwise_prepack(weight, bits, optimized_qparams=False, nbins=200, ratio=0.16):
    per_byte = _CODES_PER_BYTE[bits]
    trailer = 8 if bits == 8 else 4
    row_bytes = (weight.size(-1) + per_byte - 1) // per_byte + trailer
    return weight.new_empty(tuple(weight.shape[:-1]) + (row_bytes,), dtype=torch.uint8)


@torch.library.register_fake("shapejit::rowwise_unpack")
def _rowwise_unpack(weight, bits):
    trailer = 8 if bits == 8 else 4
    dim = (weight.size(-1) - trailer) * _CODES_PER_BYTE[bits]
    return weight.new_empty(tuple(weight.shape[:-1]) + (dim,), dtype=torch.float32)


def _group_outputs(weights, bits, indices, offsets, include_last_offset) -> List[Tensor]:
    out = []
    for k, weight in enumerate(weights):
        b = bits[k] if len(bits) else 0
        if b == 0:
            out.append(_float_output(weight, indices[k], offsets[k], include_last_offset[k]))
        else:
            out.append(_quantized_output(weight, b, indices[k], offsets[k], include_last_offset[k], None, None))
    return out


def _group_index_results(outputs, weights, bits, indices, offsets, modes, per_sample_weights, include_last_offset,
                         padding_idx):
    offset2bag, bag_size, max_indices = [], [], []
    for k, weight in enumerate(weights):
        if (bits[k] if len(bits) else 0) == 0:
            o2b = _float_offset2bag_len(weight, indices[k], modes[k], per_sample_weights[k], padding_idx[k], True)
        else:
            o2b = indices[k].numel() if modes[k] != 0 or padding_idx[k] is not None else 0
        _, o, b, m = _bag_results(outputs[k], indices[k], offsets[k], modes[k], include_last_offset[k], o2b)
        offset2bag.append(o)
        bag_size.append(b)
        max_indices.append(m)
    return offset2bag, bag_size, max_indices


@torch.library.register_fake("shapejit::embedding_bags_output")
def _embedding_bags_output(weights, indices, offsets, modes, per_sample_weights, include_last_offset, padding_idx):
    return _group_outputs(weights, [], indices, offsets, include_last_offset)


@torch.library.register_fake("shapejit::table_bags_output")
def _table_bags_output(weights, bits, indices, offsets, modes, per_sample_weights, include_last_offset, padding_idx,
                       compressed_indices_mapping):
    return _group_outputs(weights, bits, indices, offsets, include_last_offset)


def _concat(outputs: List[Tensor]) -> Tensor:
    columns = sum(o.size(1) for o in outputs)
    return outputs[0].new_empty((outputs[0].size(0), columns))


@torch.library.register_fake("shapejit::table_bags_concat_output")
def _table_bags_concat_output(weights, bits, indices, offsets, modes, per_sample_weights, include_last_offset,
                              padding_idx, compressed_indices_mapping):
    return _concat(_group_outputs(weights, bits, indices, offsets, include_last_offset))


@torch.library.register_fake("shapejit::table_bags")
def _table_bags(weights, bits, indices, offsets, modes, per_sample_weights, include_last_offset, padding_idx,
                compressed_indices_mapping, scale_grad_by_freq, sparse):
    outputs = _group_outputs(weights, bits, indices, offsets, include_last_offset)
    index_results = _group_index_results(outputs, weights, bits, indices, offsets, modes, per_sample_weights,
                                         include_last_offset, padding_idx)
    return (outputs,) + index_results


@torch.library.register_fake("shapejit::table_bags_concat")
def _table_bags_concat(weights, bits, indices, offsets, modes, per_sample_weights, include_last_offset, padding_idx,
                       compressed_indices_mapping, scale_grad_by_freq, sparse):
    outputs = _group_outputs(weights, bits, indices, offsets, include_last_offset)
    index_results = _group_index_results(outputs, weights, bits, indices, offsets, modes, per_sample_weights,
                                         include_last_offset, padding_idx)
    return (_concat(outputs),) + index_results


class LinearGroupSettings:
    """A linear group's per-part settings and its packed weights' shapes (the C++ group's
    __obj_flatten__), enough for every output shape and for the gradient: the real group and
    its fake both give these."""

    def __init__(self, weight_shapes, bias_size, rows, layouts, heads, scales, activations, quant=("f32",)):
        # As flattened (dynamo reads these attributes back by name): [rows, cols] of each weight
        # in one list, and [size of the bias, or -1].
        self.weight_shapes, self.bias_size = list(weight_shapes), list(bias_size)
        self.rows, self.layouts, self.heads = list(rows), list(layouts), list(heads)
        self.scales, self.activations = list(scales), list(activations)
        self.quant = list(quant)  # [form]: its name, one entry (docs/quantized-linear-semantics.md)

    def parts(self, weights: Optional[List[Tensor]] = None):
        """(N, K, layout, heads, scale, activation) of each part, the weights being `weights`
        (run_current's) or the ones packed."""
        flat = self.weight_shapes
        shapes = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)] if weights is None else [
            (w.size(0), w.size(1)) for w in weights]
        packed = len(shapes) == 1 and len(self.rows) > 0
        count = len(self.rows) if packed else len(shapes)
        out = []
        for p in range(count):
            n = self.rows[p] if packed or self.rows else shapes[p][0]
            k = shapes[0][1] if packed else shapes[p][1]
            out.append((n, k, self.layouts[p] if self.layouts else "row_major", self.heads[p] if self.heads else 1,
                        self.scales[p] if self.scales else 1.0,
                        self.activations[p] if self.activations else "none"))
        return out


def linear_group_settings(group) -> LinearGroupSettings:
    """The settings of a torch.classes.shapejit.LinearGroup, of its fake (under tracing), or of
    the FakeScriptObject wrapping that fake."""
    wrapped = getattr(group, "wrapped_obj", None)
    if isinstance(wrapped, FakeLinearGroup):
        return wrapped
    if isinstance(group, FakeLinearGroup):
        return group
    return LinearGroupSettings(**dict(group.__obj_flatten__()))


@torch._library.register_fake_class("shapejit::LinearGroup")
class FakeLinearGroup(LinearGroupSettings):
    """torch.classes.shapejit.LinearGroup as torch.compile and torch.export trace it: the
    flattened fields as attributes (dynamo reads them by those names)."""

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def num_parts(self) -> int:
        return len(self.parts())

    def run(self, inputs):
        return _linear_outputs(self.parts(), inputs)

    def run_current(self, weights, bias, inputs):
        return _linear_outputs(self.parts(weights), inputs)

    def packed_from(self, weights, bias) -> bool:
        return True  # a traced graph computes with the tensors it is given, whatever was packed


def _linear_outputs(parts, inputs: List[Tensor]) -> List[Tensor]:
    torch._check(len(inputs) == len(parts),
                 lambda: "shapejit.LinearGroup.run: expected {} inputs (one per part), but got {}".format(
                     len(parts), len(inputs)))
    out = []
    for (n, _, layout, heads, _, _), x in zip(parts, inputs):
        if layout == "row_major":
            out.append(x.new_empty(tuple(x.shape[:-1]) + (n,)))
        else:
            seq, batch = (x.size(0), x.size(1)) if layout == "heads_seq_first" else (x.size(1), x.size(0))
            out.append(x.new_empty((batch, heads, seq, n // heads)))
    return out


@torch.library.register_fake("shapejit::linear_group_run")
def _linear_group_run(group, inputs):
    return _linear_outputs(linear_group_settings(group).parts(), inputs)


@torch.library.register_fake("shapejit::quantize_linear_weights")
def _quantize_linear_weights(weight, quant):
    return weight.new_empty(weight.shape, dtype=torch.int8), weight.new_empty((weight.size(0),))


@torch.library.register_fake("shapejit::linear_group_run_current")
def _linear_group_run_current(group, weights, bias, inputs):
    return _linear_outputs(linear_group_settings(group).parts(weights), inputs)


# An op taking a script object is taken to have side effects (AOTAutograd then wraps it in
# with_effects, which autograd does not see through). These have none that matter: their
# outputs depend only on the tensors' values (run_current's repack only refreshes a cache).
for _op in (torch.ops.shapejit.linear_group_run.default, torch.ops.shapejit.linear_group_run_current.default):
    torch.library._register_effectful_op(_op, None)
