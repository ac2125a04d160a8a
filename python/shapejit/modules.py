"""shapejit.EmbeddingBag: torch.nn.EmbeddingBag whose forward runs shapejit's kernels (f32, f16
and bf16 tables); shapejit.EmbeddingBagGroup: many of them in one engine call (a model's tables);
shapejit.QuantizedEmbeddingBag: the same over rowwise-quantized packed rows, the counterpart of
torch.ao.nn.quantized.EmbeddingBag."""
from typing import Iterable, List, Optional, Tuple

import torch
from torch import Tensor

from . import quantized

_MODES = {"sum": 0, "mean": 1, "max": 2}
# The operator's builtin without its OpOverloadPacket wrapper (one Python frame less per call), and
# torch.jit.is_scripting under a module-level name; TorchScript resolves both.
# embedding_bag_output is torch.ops.shapejit.embedding_bag's output alone: the three index results
# forward drops are never allocated, and the arguments only the gradient reads are not passed.
_EMBEDDING_BAG_OUTPUT = getattr(torch.ops.shapejit.embedding_bag_output, "_op", torch.ops.shapejit.embedding_bag_output)
# When a gradient is needed, the ops that also return the index results the backward reads
# (shapejit/autograd.py: torch's own embedding-bag backward on them).
_EMBEDDING_BAG = torch.ops.shapejit.embedding_bag
_TABLE_BAGS = torch.ops.shapejit.table_bags
_TABLE_BAGS_CONCAT = torch.ops.shapejit.table_bags_concat
# table_bags_output: embedding_bag_output's arguments as lists, one entry per table, one engine
# call, for float and rowwise-quantized tables (bits 0, 8, 4, 2); and
# table_bags_concat_output its outputs side by side in one [B, sum of D] tensor.
_TABLE_BAGS_OUTPUT = getattr(torch.ops.shapejit.table_bags_output, "_op", torch.ops.shapejit.table_bags_output)
_TABLE_BAGS_CONCAT_OUTPUT = getattr(torch.ops.shapejit.table_bags_concat_output, "_op",
                                    torch.ops.shapejit.table_bags_concat_output)
_scripting = torch.jit.is_scripting


class EmbeddingBag(torch.nn.EmbeddingBag):
    """A drop-in torch.nn.EmbeddingBag (same constructor, from_pretrained, state_dict) whose
    forward is torch.ops.shapejit.embedding_bag_output, or, when a gradient is needed (the weight
    or per_sample_weights require grad), torch.ops.shapejit.embedding_bag, whose backward is
    torch's own (shapejit/autograd.py): gradients, dense or sparse, are bitwise torch's.
    max_norm renormalises the rows an input names in place before the lookup, as
    torch.nn.functional.embedding_bag does (torch.embedding_renorm_). The weight may be
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
        _check_arguments(input, offsets, per_sample_weights, self.mode, "shapejit.EmbeddingBag")
        if _scripting():
            weight = self.weight
        else:  # Module.__getattr__ is the slowest step of an eager call; TorchScript drops this branch
            weight = self._parameters["weight"]
        max_norm = self.max_norm
        if max_norm is not None:  # after the argument rules, where torch.nn.functional.embedding_bag has it
            _renormalise_rows(weight, input, max_norm, self.norm_type)
        if torch.is_grad_enabled() and (weight.requires_grad or (per_sample_weights is not None
                                                                 and per_sample_weights.requires_grad)):
            return _EMBEDDING_BAG(weight, input, offsets, self.scale_grad_by_freq, mode, self.sparse,
                                  per_sample_weights, self.include_last_offset, self.padding_idx)[0]
        if torch.compiler.is_compiling():  # dynamo traces the operator, not its raw builtin
            return torch.ops.shapejit.embedding_bag_output(weight, input, offsets, mode, per_sample_weights,
                                                           self.include_last_offset, self.padding_idx)
        return _EMBEDDING_BAG_OUTPUT(weight, input, offsets, mode, per_sample_weights, self.include_last_offset,
                                     self.padding_idx)

    def _check_settings(self) -> None:
        """Raises the error for the setting that makes self._mode -1."""
        _check_settings(self.mode, self.scale_grad_by_freq, self.sparse, "shapejit.EmbeddingBag")


def _renormalise_rows(weight: Tensor, input: Tensor, max_norm: float, norm_type: float) -> None:
    """torch.nn.functional.embedding_bag's max_norm step: every row the input names whose
    norm_type-norm exceeds max_norm is scaled in place to that norm, outside autograd (torch's
    own op on the flattened input, so the rows are torch's bit for bit)."""
    torch.embedding_renorm_(weight.detach(), input.reshape(-1), max_norm, norm_type)


def _check_settings(mode: str, scale_grad_by_freq: bool, sparse: bool, who: str) -> None:
    """Raises the error for the setting that makes _bag_mode -1, `who` naming the bag."""
    if mode != "sum" and mode != "mean" and mode != "max":
        raise ValueError("{}: mode must be 'sum', 'mean' or 'max', but is '{}'".format(who, mode))
    if scale_grad_by_freq:
        raise ValueError("{}: mode 'max' cannot scale gradients by frequency (scale_grad_by_freq=True)".format(who))
    raise ValueError("{}: mode 'max' cannot have sparse gradients (sparse=True)".format(who))


# The settings the mode number depends on; -1 when one of them is refused.
_SETTINGS = frozenset(("mode", "scale_grad_by_freq", "sparse"))


def _mode_number(settings) -> int:
    return _bag_mode(settings.get("mode"), bool(settings.get("scale_grad_by_freq")),
                     bool(settings.get("sparse")))


def _bag_mode(mode: str, scale_grad_by_freq: bool, sparse: bool) -> int:
    """The engine's mode number of a bag's settings, or -1 when one of them is refused."""
    number = 0 if mode == "sum" else 1 if mode == "mean" else 2 if mode == "max" else -1  # TorchScript: no dicts
    if number == 2 and (scale_grad_by_freq or sparse):
        return -1
    return number


def _check_arguments(input: Tensor, offsets: Optional[Tensor], per_sample_weights: Optional[Tensor], mode: str,
                     who: str) -> None:
    """torch.nn.functional.embedding_bag's argument rules and exception types, `who` naming the bag."""
    if per_sample_weights is not None:
        _check_per_sample_weights(input, per_sample_weights, mode, who)
    dim = input.dim()
    if dim == 1:
        if offsets is None or offsets.dim() != 1:
            raise ValueError("{}: 1-D input needs offsets, a 1-D tensor, but got {}".format(
                who, "None" if offsets is None else "a {}-D tensor".format(offsets.dim())))
    elif dim == 2:
        if offsets is not None:
            raise ValueError("{}: 2-D input holds bags of fixed length, so offsets must be None, but a tensor "
                             "was given".format(who))
    else:
        raise ValueError("{}: input must be 1-D or 2-D, but has {} dimensions".format(who, dim))


def _check_per_sample_weights(input: Tensor, per_sample_weights: Tensor, mode: str, who: str) -> None:
    if input.size() != per_sample_weights.size():
        raise ValueError("{}: per_sample_weights must have the input's shape {}, but has "
                         "shape {}".format(who, input.size(), per_sample_weights.size()))
    if mode != "sum":
        raise NotImplementedError("{}: per_sample_weights need mode 'sum', but mode is "
                                  "'{}'".format(who, mode))


class EmbeddingBagGroup(torch.nn.Module):
    """Many embedding bags in one engine call (a model's tables): forward takes one input (with its
    offsets and per_sample_weights) per bag and returns one output per bag, each bitwise what that
    bag returns alone, but validated together (no output is computed when any bag's arguments are
    wrong; every error names the bag, bags[k]) and run in one parallel region, so many small bags
    share the threads; concat returns them side by side. Built from torch.nn.EmbeddingBag modules
    (or shapejit.EmbeddingBag ones), shapejit.QuantizedEmbeddingBag modules and
    torch.ao.nn.quantized.EmbeddingBag modules (converted with QuantizedEmbeddingBag.from_torch),
    in any mix; it shares their weights and reads a bag's settings at each call. A quantized bag
    takes its input as its own forward does (torch's quantized ops: offsets are bag lengths, and
    compressed_indices_mappings[k] for a pruned table). The float bags are held in `bags`, the
    quantized ones in `quantized_bags`, each in the caller's order. When a gradient is needed (a
    float bag's weight or a per_sample_weights requires grad) the call also computes every bag's
    index results and each float bag's gradients are torch's (shapejit/autograd.py);
    quantized bags are inference only."""

    _float_at: List[int]
    _quantized_at: List[int]
    _names: List[str]

    def __init__(self, bags: Iterable[torch.nn.Module]):
        super().__init__()
        float_bags: List[torch.nn.Module] = []
        quantized_bags: List[torch.nn.Module] = []
        # Where each kind's bags sit in the caller's order (TorchScript iterates each ModuleList).
        self._float_at = []
        self._quantized_at = []
        for k, bag in enumerate(bags):
            if isinstance(bag, torch.ao.nn.quantized.EmbeddingBag):
                bag = QuantizedEmbeddingBag.from_torch(bag)
            if isinstance(bag, QuantizedEmbeddingBag):
                quantized_bags.append(bag)
                self._quantized_at.append(k)
            elif isinstance(bag, torch.nn.EmbeddingBag):
                float_bags.append(bag)
                self._float_at.append(k)
            else:
                raise TypeError("shapejit.EmbeddingBagGroup: bags[{}] must be a torch.nn.EmbeddingBag or a quantized "
                                "EmbeddingBag, but is a {}".format(k, type(bag).__name__))
        self.bags = torch.nn.ModuleList(float_bags)
        self.quantized_bags = torch.nn.ModuleList(quantized_bags)
        self._count = len(self._float_at) + len(self._quantized_at)
        # The bags' names in messages, made once: forward runs per bag, and its checks are most of
        # a small group's Python time.
        self._names = ["shapejit.EmbeddingBagGroup: bags[{}]".format(k) for k in range(self._count)]

    def forward(self, inputs: List[Tensor], offsets: Optional[List[Optional[Tensor]]] = None,
                per_sample_weights: Optional[List[Optional[Tensor]]] = None,
                compressed_indices_mappings: Optional[List[Optional[Tensor]]] = None) -> List[Tensor]:
        args = self._arguments(inputs, offsets, per_sample_weights, compressed_indices_mappings)
        if self._count == 0:  # no tensor argument to dispatch on
            return []
        if self._needs_grad(args[0], args[5]):
            return _TABLE_BAGS(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8],
                               self._scale_grad_by_freq(), self._sparse())[0]
        if torch.compiler.is_compiling():  # dynamo traces the operator, not its raw builtin
            return torch.ops.shapejit.table_bags_output(args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                                                        args[7], args[8])
        return _TABLE_BAGS_OUTPUT(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8])

    @torch.jit.export
    def concat(self, inputs: List[Tensor], offsets: Optional[List[Optional[Tensor]]] = None,
               per_sample_weights: Optional[List[Optional[Tensor]]] = None,
               compressed_indices_mappings: Optional[List[Optional[Tensor]]] = None) -> Tensor:
        """The bags' outputs side by side, [B, sum of the bags' dims]: torch.cat(self(...), dim=1)
        without the copy (each bag writes its columns). Every bag needs the same number of bags B
        and the same output dtype."""
        args = self._arguments(inputs, offsets, per_sample_weights, compressed_indices_mappings)
        if self._count == 0:
            raise ValueError("shapejit.EmbeddingBagGroup.concat: the group has no bags to concatenate")
        if self._needs_grad(args[0], args[5]):
            return _TABLE_BAGS_CONCAT(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7],
                                      args[8], self._scale_grad_by_freq(), self._sparse())[0]
        if torch.compiler.is_compiling():  # dynamo traces the operator, not its raw builtin
            return torch.ops.shapejit.table_bags_concat_output(args[0], args[1], args[2], args[3], args[4], args[5],
                                                               args[6], args[7], args[8])
        return _TABLE_BAGS_CONCAT_OUTPUT(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7],
                                         args[8])

    def _needs_grad(self, weights: List[Tensor], per_sample_weights: List[Optional[Tensor]]) -> bool:
        """Whether the call must compute the index results a backward reads; raises when a
        gradient is asked of per_sample_weights beside bags without them (one autograd argument
        then holds None, which torch.library's autograd cannot differentiate)."""
        if not torch.is_grad_enabled():
            return False
        wanted = False
        for w in weights:
            if w.requires_grad:
                wanted = True
        psw_wanted = False
        missing = False
        for p in per_sample_weights:
            if p is None:
                missing = True
            elif p.requires_grad:
                psw_wanted = True
        if psw_wanted and missing:
            raise NotImplementedError("shapejit.EmbeddingBagGroup: per_sample_weights require grad, so every bag "
                                      "needs per_sample_weights (torch.ones for a sum bag), or none may require grad")
        return wanted or psw_wanted

    def _scale_grad_by_freq(self) -> List[bool]:
        """Each bag's scale_grad_by_freq in the caller's order (quantized bags: False)."""
        out: List[bool] = [False] * self._count
        j = 0
        for bag in self.bags:
            out[self._float_at[j]] = bool(bag.scale_grad_by_freq)
            j += 1
        return out

    def _sparse(self) -> List[bool]:
        """Each bag's sparse setting in the caller's order (quantized bags: False)."""
        out: List[bool] = [False] * self._count
        j = 0
        for bag in self.bags:
            out[self._float_at[j]] = bool(bag.sparse)
            j += 1
        return out

    def _arguments(self, inputs: List[Tensor], offsets: Optional[List[Optional[Tensor]]],
                   per_sample_weights: Optional[List[Optional[Tensor]]],
                   compressed_indices_mappings: Optional[List[Optional[Tensor]]]
                   ) -> Tuple[List[Tensor], List[int], List[Tensor], List[Optional[Tensor]], List[int],
                              List[Optional[Tensor]], List[bool], List[Optional[int]], List[Optional[Tensor]]]:
        """The group op's lists in the caller's order (weights, bits, indices, offsets, modes,
        per_sample_weights, include_last_offset, padding_idx, mappings), each bag's arguments
        checked and its settings read."""
        n = self._count
        if len(inputs) != n:
            raise ValueError("shapejit.EmbeddingBagGroup: {} bags but {} inputs".format(n, len(inputs)))
        offs = _no_tensors(n) if offsets is None else offsets
        psw = _no_tensors(n) if per_sample_weights is None else list(per_sample_weights)  # entries replaced below
        maps = _no_tensors(n) if compressed_indices_mappings is None else compressed_indices_mappings
        if len(offs) != n or len(psw) != n or len(maps) != n:
            raise ValueError("shapejit.EmbeddingBagGroup: {} bags but {} offsets, {} per_sample_weights and {} "
                             "compressed_indices_mappings".format(n, len(offs), len(psw), len(maps)))
        weights: List[Tensor] = list(inputs)  # placeholders, each replaced below
        indices: List[Tensor] = list(inputs)
        offs = list(offs)
        maps = list(maps)
        bits: List[int] = [0] * n
        modes: List[int] = [0] * n
        last: List[bool] = [False] * n
        padding: List[Optional[int]] = []
        if _scripting():
            for _ in range(n):  # typed as TorchScript needs it
                padding.append(None)
        else:
            padding = [None] * n
        j = 0
        for bag in self.bags:
            k = self._float_at[j]
            mode = _bag_mode(bag.mode, bag.scale_grad_by_freq, bag.sparse)
            if mode < 0:
                _check_settings(bag.mode, bag.scale_grad_by_freq, bag.sparse, self._names[k])
            if bag.max_norm is not None:
                raise NotImplementedError(
                    "{}: max_norm must be None in a group, but is {} (a bag renormalises the rows it reads before "
                    "its lookup; call such a bag on its own)".format(self._names[k], bag.max_norm))
            _check_arguments(inputs[k], offs[k], psw[k], bag.mode, self._names[k])
            if maps[k] is not None:
                raise ValueError("{}: a float table takes no compressed_indices_mapping".format(self._names[k]))
            if _scripting():
                weight = bag.weight
            else:  # Module.__getattr__ is slow; TorchScript drops this branch
                weight = bag._parameters["weight"]
            weights[k] = weight
            modes[k] = mode
            last[k] = bag.include_last_offset
            padding[k] = bag.padding_idx
            j += 1
        j = 0
        for bag in self.quantized_bags:
            k = self._quantized_at[j]
            flat, lengths, weights_k, mapping = quantized.rowwise_arguments(
                self._names[k], bag.bits, inputs[k], offs[k], psw[k], bag.include_last_offset, bag.pruned_weights,
                maps[k])
            indices[k] = flat
            offs[k] = lengths
            psw[k] = weights_k
            maps[k] = mapping
            weights[k] = bag.packed_weight
            bits[k] = bag.bits
            modes[k] = 0 if bag.mode == "sum" else 1 if bag.mode == "mean" else 2  # checked at construction
            last[k] = bag.include_last_offset
            padding[k] = bag.padding_idx
            j += 1
        return weights, bits, indices, offs, modes, psw, last, padding, maps


def _no_tensors(n: int) -> List[Optional[Tensor]]:
    """n Nones, typed as TorchScript needs them (eager Python builds them at once)."""
    if not _scripting():
        return [None] * n
    out: List[Optional[Tensor]] = []
    for _ in range(n):
        out.append(None)
    return out


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
