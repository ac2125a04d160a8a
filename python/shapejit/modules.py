"""shapejit.EmbeddingBag: torch.nn.EmbeddingBag whose forward runs shapejit's kernels (f32, f16
and bf16 tables); shapejit.QuantizedEmbeddingBag: the same over rowwise-quantized packed rows,
the counterpart of torch.ao.nn.quantized.EmbeddingBag."""
import warnings
from typing import Optional

import torch
from torch import Tensor

from . import quantized

_MODES = {"sum": 0, "mean": 1, "max": 2}
# The operator's builtin without its OpOverloadPacket wrapper (one Python frame less per call), and
# torch.jit.is_scripting under a module-level name; TorchScript resolves both.
# embedding_bag_output is torch.ops.shapejit.embedding_bag's output alone: the three index results
# forward drops are never allocated, and the arguments only the gradient reads are not passed.
_EMBEDDING_BAG_OUTPUT = getattr(torch.ops.shapejit.embedding_bag_output, "_op", torch.ops.shapejit.embedding_bag_output)
_scripting = torch.jit.is_scripting


class EmbeddingBag(torch.nn.EmbeddingBag):
    """A drop-in torch.nn.EmbeddingBag (same constructor, from_pretrained, state_dict) whose
    forward is torch.ops.shapejit.embedding_bag_output. Forward only: no gradient reaches the weight.
    max_norm (which renormalises the weight during forward) is not supported. The weight may be
    float32, float16 or bfloat16 (per_sample_weights then of the same dtype); a bf16 table
    computes in f32 and rounds once (the f16 rules of torch 1.13, which has no bf16 bags)."""

    @classmethod
    def from_torch(cls, module: torch.nn.Module):
        """A shapejit module computing what `module` computes: a shapejit.EmbeddingBag sharing a
        torch.nn.EmbeddingBag's weight (any float dtype) and settings, or, for a
        torch.ao.nn.quantized.EmbeddingBag, a shapejit.QuantizedEmbeddingBag of its rows."""
        if isinstance(module, torch.ao.nn.quantized.EmbeddingBag):
            return QuantizedEmbeddingBag.from_torch(module)
        if not isinstance(module, torch.nn.EmbeddingBag):
            raise TypeError("shapejit.EmbeddingBag.from_torch takes a torch.nn.EmbeddingBag or a "
                            "torch.ao.nn.quantized.EmbeddingBag, but got {}".format(type(module).__name__))
        m = cls(module.num_embeddings, module.embedding_dim, max_norm=module.max_norm,
                norm_type=module.norm_type, scale_grad_by_freq=module.scale_grad_by_freq,
                mode=module.mode, sparse=module.sparse, _weight=module.weight.data,
                include_last_offset=module.include_last_offset, padding_idx=module.padding_idx)
        m.weight = module.weight
        return m

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in _SETTINGS:  # keep the mode number forward reads in step with the settings
            self.__dict__["_mode"] = _mode_number(self.__dict__)

    def __setstate__(self, state):
        super().__setstate__(state)
        self.__dict__["_mode"] = _mode_number(self.__dict__)  # also for states pickled before _mode existed

    def forward(self, input: Tensor, offsets: Optional[Tensor] = None,
                per_sample_weights: Optional[Tensor] = None) -> Tensor:
        # torch.nn.functional.embedding_bag's argument rules and exception types; the settings'
        # rules are folded into self._mode (-1: some setting is refused, _check_settings says which).
        mode = self._mode
        if mode < 0:
            self._check_settings()
        if per_sample_weights is not None:
            _check_per_sample_weights(input, per_sample_weights, self.mode)
        dim = input.dim()
        if dim == 1:
            if offsets is None or offsets.dim() != 1:
                raise ValueError("shapejit.EmbeddingBag: 1-D input needs offsets, a 1-D tensor, but got {}".format(
                    "None" if offsets is None else "a {}-D tensor".format(offsets.dim())))
        elif dim == 2:
            if offsets is not None:
                raise ValueError("shapejit.EmbeddingBag: 2-D input holds bags of fixed length, so offsets must be "
                                 "None, but a tensor was given")
        else:
            raise ValueError("shapejit.EmbeddingBag: input must be 1-D or 2-D, but has {} dimensions".format(dim))
        if _scripting():
            weight = self.weight
        else:  # Module.__getattr__ is the slowest step of an eager call; TorchScript drops this branch
            weight = self._parameters["weight"]
        if weight.requires_grad and torch.is_grad_enabled():
            warnings.warn("shapejit.EmbeddingBag is forward only: no gradient flows to its weight "
                          "(run under torch.no_grad() or freeze the weight to silence this)", stacklevel=2)
        # No autograd kernel: the output never requires grad, so the weight needs no detach().
        return _EMBEDDING_BAG_OUTPUT(weight, input, offsets, mode, per_sample_weights, self.include_last_offset,
                                     self.padding_idx)

    def _check_settings(self) -> None:
        """Raises the error for the setting that makes self._mode -1."""
        if self.max_norm is not None:
            raise NotImplementedError("shapejit.EmbeddingBag: max_norm must be None (renormalising rows during "
                                      "forward is not supported), but is {}".format(self.max_norm))
        if self.mode != "sum" and self.mode != "mean" and self.mode != "max":
            raise ValueError("shapejit.EmbeddingBag: mode must be 'sum', 'mean' or 'max', but is '{}'".format(self.mode))
        if self.scale_grad_by_freq:
            raise ValueError("shapejit.EmbeddingBag: mode 'max' cannot scale gradients by frequency "
                             "(scale_grad_by_freq=True)")
        raise ValueError("shapejit.EmbeddingBag: mode 'max' cannot have sparse gradients (sparse=True)")


# The settings the mode number depends on; -1 when one of them is refused.
_SETTINGS = frozenset(("mode", "max_norm", "scale_grad_by_freq", "sparse"))


def _mode_number(settings) -> int:
    number = _MODES.get(settings.get("mode"), -1)
    if settings.get("max_norm") is not None:
        return -1
    if number == 2 and (settings.get("scale_grad_by_freq") or settings.get("sparse")):
        return -1
    return number


def _check_per_sample_weights(input: Tensor, per_sample_weights: Tensor, mode: str) -> None:
    if input.size() != per_sample_weights.size():
        raise ValueError("shapejit.EmbeddingBag: per_sample_weights must have the input's shape {}, but has "
                         "shape {}".format(input.size(), per_sample_weights.size()))
    if mode != "sum":
        raise NotImplementedError("shapejit.EmbeddingBag: per_sample_weights need mode 'sum', but mode is "
                                  "'{}'".format(mode))


_QUANTIZED_BITS = {torch.quint8: 8, torch.quint4x2: 4}


def rows_of_quantized_module(module: torch.ao.nn.quantized.EmbeddingBag) -> Tensor:
    """The packed rows (uint8 [n, row_bytes]) a torch.ao.nn.quantized.EmbeddingBag computes with:
    its codes, then scale and bias = -(zero_point * scale) rounded to f32, stored as f32 for
    quint8 and as f16 for quint4x2 (docs/quantized-tables-semantics.md, B5)."""
    bits = _QUANTIZED_BITS.get(module.dtype)
    if bits is None:
        raise ValueError("shapejit: quantized EmbeddingBag dtype must be quint8 or quint4x2, but got {}".format(
            module.dtype))
    n, dim = module.num_embeddings, module.embedding_dim
    if bits == 4 and dim % 2:
        raise ValueError("shapejit: a quint4x2 EmbeddingBag with an odd embedding_dim ({}) is broken in torch "
                         "(its rows run into each other); use an even dim".format(dim))
    qweight = module.weight()
    codes = qweight.int_repr().reshape(n, -1)  # quint4x2: two codes a byte, even element low
    scales = qweight.q_per_channel_scales().to(torch.float32)
    bias = (qweight.q_per_channel_zero_points().to(torch.float32) * scales) * -1
    qparams = torch.stack([scales, bias], 1) if bits == 8 else torch.stack([scales.half(), bias.half()], 1)
    return torch.cat([codes, qparams.contiguous().view(torch.uint8)], 1)


class QuantizedEmbeddingBag(torch.nn.Module):
    """Bags over a rowwise-quantized table: packed rows (uint8 [n, row_bytes], the layout of
    torch's embedding_bag_{byte,4bit,2bit}_prepack) held in the buffer `packed_weight`.

    forward(indices, offsets=None, per_sample_weights=None, compressed_indices_mapping=None)
    follows torch's quantized bag ops (offsets are read as bag lengths, 2-D indices are bags of
    their row length) and returns the output only; mode 'mean' and 'max' are computed, not
    silently summed. shapejit.quantized.embedding_bag gives all four results.
    """

    def __init__(self, packed_weight: Tensor, bits: int, mode: str = "sum", include_last_offset: bool = False,
                 pruned_weights: bool = False, padding_idx: Optional[int] = None):
        super().__init__()
        if bits not in (8, 4, 2):
            raise ValueError("shapejit.QuantizedEmbeddingBag: bits must be 8, 4 or 2, but got {}".format(bits))
        if mode not in _MODES:
            raise ValueError("shapejit.QuantizedEmbeddingBag: mode must be 'sum', 'mean' or 'max'")
        self.bits, self.mode = bits, mode
        self.include_last_offset, self.pruned_weights, self.padding_idx = include_last_offset, pruned_weights, padding_idx
        self.register_buffer("packed_weight", packed_weight.detach().contiguous())
        self.num_embeddings = packed_weight.shape[0]
        trailer = 8 if bits == 8 else 4
        self.embedding_dim = (packed_weight.shape[1] - trailer) * (8 // bits)

    @classmethod
    def from_torch(cls, module: torch.ao.nn.quantized.EmbeddingBag) -> "QuantizedEmbeddingBag":
        """The module computing exactly what `module` computes: its rows rebuilt
        (rows_of_quantized_module), its include_last_offset and pruned_weights; its `mode` is not
        taken, as torch's module always sums."""
        return cls(rows_of_quantized_module(module), _QUANTIZED_BITS[module.dtype], "sum",
                   module.include_last_offset, module.pruned_weights)

    @classmethod
    def from_float(cls, module: torch.nn.EmbeddingBag, bits: int = 8,
                   optimized_qparams: bool = False) -> "QuantizedEmbeddingBag":
        """A float nn.EmbeddingBag's table packed to `bits` (torch's prepack rules), with its mode,
        include_last_offset and padding_idx."""
        weight = module.weight.detach()
        if bits == 8:
            packed = quantized.embedding_bag_byte_prepack(weight)
        elif bits == 4:
            packed = quantized.embedding_bag_4bit_prepack(weight, optimized_qparams)
        else:
            packed = quantized.embedding_bag_2bit_prepack(weight, optimized_qparams)
        return cls(packed, bits, module.mode, module.include_last_offset, False, module.padding_idx)

    def extra_repr(self) -> str:
        return "{}, {}, bits={}, mode={}, include_last_offset={}, pruned_weights={}, padding_idx={}".format(
            self.num_embeddings, self.embedding_dim, self.bits, self.mode, self.include_last_offset,
            self.pruned_weights, self.padding_idx)

    def forward(self, indices: Tensor, offsets: Optional[Tensor] = None, per_sample_weights: Optional[Tensor] = None,
                compressed_indices_mapping: Optional[Tensor] = None) -> Tensor:
        mode = 0 if self.mode == "sum" else 1 if self.mode == "mean" else 2  # checked at construction
        return quantized.rowwise_offsets(self.bits, self.packed_weight, indices, offsets, mode,
                                         self.pruned_weights, per_sample_weights, compressed_indices_mapping,
                                         self.include_last_offset, self.padding_idx)
