"""Rowwise-quantized embedding tables (8/4/2-bit packed rows) on shapejit's kernels.

The packed rows are exactly the uint8 tensors torch's ``quantized::embedding_bag_*_prepack``
return (docs/quantized-tables-semantics.md), so tables prepacked by torch are used as they are::

    packed = shapejit.quantized.embedding_bag_4bit_prepack(weight)          # [n, D/2 + 4] uint8
    out = shapejit.quantized.embedding_bag_4bit_rowwise_offsets(packed, indices, offsets)
    out, offset2bag, bag_size, max_indices = shapejit.quantized.embedding_bag(
        packed, 4, indices, offsets, mode="max")

The ``*_rowwise_offsets`` functions take torch's arguments and in mode 0 return torch 2.13's
(FBGEMM's) tensor bit for bit, torch 2.13's offsets rules included; where torch ignores ``mode``
(always summing), mode 1 and 2 here give the mean and the max. ``embedding_bag``
returns all four results of torch.embedding_bag, with offsets as bag starts (validated like f32).
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

_MODES = {"sum": 0, "mean": 1, "max": 2}


def _mode_number(mode: Union[int, str]) -> int:
    if isinstance(mode, str):
        if mode not in _MODES:
            raise ValueError("mode must be 'sum', 'mean' or 'max', but got {!r}".format(mode))
        return _MODES[mode]
    return int(mode)


def embedding_bag(weight_packed: Tensor, bits: int, indices: Tensor, offsets: Optional[Tensor] = None,
                  mode: Union[int, str] = 0, per_sample_weights: Optional[Tensor] = None,
                  padding_idx: Optional[int] = None, include_last_offset: bool = False,
                  compressed_indices_mapping: Optional[Tensor] = None,
                  output_dtype: torch.dtype = torch.float32, *, dim: Optional[int] = None,
                  offsets_as_lengths: bool = False) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(output, offset2bag, bag_size, max_indices) of a bag lookup over packed rows.

    ``bits`` is 8, 4 or 2; ``dim`` (the values per row) defaults to what the row width holds.
    Modes 'sum'/0, 'mean'/1, 'max'/2; per_sample_weights (sum only) f32, or f16 for 4/2-bit.
    ``compressed_indices_mapping`` (int32), when given, makes the table pruned: index i reads row
    mapping[i], -1 skips the position. padding_idx and max_indices refer to the index as given.
    ``output_dtype`` f32, f16 or bf16 (the f32 result rounded once). ``offsets_as_lengths``
    reads offsets as torch's quantized ops do (differences are bag lengths).
    """
    return torch.ops.shapejit.quantized_embedding_bag(
        weight_packed, bits, indices, offsets, _mode_number(mode), per_sample_weights, padding_idx,
        include_last_offset, compressed_indices_mapping, offsets_as_lengths, output_dtype, dim)


def _rowwise_op_name(bits: int) -> str:
    """The torch op a bit width stands for (a function, not a dict: TorchScript compiles it)."""
    if bits == 8:
        return "embedding_bag_byte_rowwise_offsets"
    return "embedding_bag_{}bit_rowwise_offsets".format(bits)


def rowwise_offsets(bits: int, weight: Tensor, indices: Tensor, offsets: Optional[Tensor], mode: int,
                     pruned_weights: bool, per_sample_weights: Optional[Tensor],
                     compressed_indices_mapping: Optional[Tensor], include_last_offset: bool,
                     padding_idx: Optional[int]) -> Tensor:
    """torch 2.13's quantized::embedding_bag_*_rowwise_offsets argument rules, then the lookup (the
    three public functions and shapejit.QuantizedEmbeddingBag call this)."""
    op = "shapejit.quantized." + _rowwise_op_name(bits)
    if per_sample_weights is not None and per_sample_weights.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(op + ": rowwise-quantized tables are inference only (as torch's quantized ops): "
                           "per_sample_weights must not require grad")
    if offsets is not None and indices.dim() == 1 and offsets.numel() == 0 and not include_last_offset:
        # torch returns no bags (and reads no index); the engine needs at least one offset.
        width = weight.size(-1) if weight.dim() == 2 else 0
        dim = (width - 8) if bits == 8 else (width - 4) * (8 // bits)
        return torch.empty(0, max(dim, 0), dtype=torch.float32)
    indices, lengths, per_sample_weights, mapping = rowwise_arguments(
        op, bits, indices, offsets, per_sample_weights, include_last_offset, pruned_weights,
        compressed_indices_mapping)
    # TorchScript sees `mode` as the int it is annotated; eager callers may also pass a name.
    mode_number = mode if torch.jit.is_scripting() else _mode_number(mode)
    # The output alone: the engine skips offset2bag, bag_size and max_indices (and max's ids).
    return torch.ops.shapejit.quantized_embedding_bag_output(
        weight, bits, indices, lengths, mode_number, per_sample_weights, padding_idx, include_last_offset,
        mapping, True, torch.float32, None)


def rowwise_arguments(op: str, bits: int, indices: Tensor, offsets: Optional[Tensor],
                      per_sample_weights: Optional[Tensor], include_last_offset: bool, pruned_weights: bool,
                      compressed_indices_mapping: Optional[Tensor]
                      ) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
    """torch 2.13's (FBGEMM's) rules for indices, offsets and the mapping of the quantized rowwise
    ops, `op` naming the caller (docs/quantized-tables-semantics.md, section 3): returns the 1-D
    indices and per-sample weights of the positions the bags cover, offsets rebased to start at 0
    (which the engine's lengths reading then takes as the same bags), and the mapping of a pruned
    table or None.

    Offsets are bag starts: non-decreasing, offsets[0] >= 0 and the last offset <= N. Unpruned
    8-bit tables take offsets[0] > 0 (positions before it are not read) and, with
    include_last_offset, a last offset below N (positions after it are not read); 4/2-bit and
    pruned 8-bit tables need offsets[0] == 0 and, with include_last_offset, a last offset of
    exactly N (torch 2.13 raises for a short one, and for offsets[0] > 0 its kernel reports a
    failure that torch lets pass). Decreasing offsets
    or offsets outside [0, N] make torch 2.13 return unwritten memory: shapejit rejects them."""
    if indices.dim() == 2:
        # Fixed-length bags, offsets 0, L, 2L, ... of the indices' dtype; torch applies
        # include_last_offset to these too (the last row then only closes the bag before it).
        if offsets is not None:
            raise RuntimeError(op + ": offsets must be None when indices is 2-D")
        offsets = torch.arange(0, indices.numel(), indices.size(1), dtype=indices.dtype)
        indices = indices.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif offsets is None:
        raise RuntimeError(op + ": offsets are required with 1-D indices")
    mapping: Optional[Tensor] = None
    if pruned_weights:
        if compressed_indices_mapping is None:
            raise RuntimeError(op + ": pruned_weights=True needs a compressed_indices_mapping")
        if compressed_indices_mapping.dtype != torch.int32:
            raise RuntimeError("{}: compressed_indices_mapping must be int32, but got {}".format(
                op, compressed_indices_mapping.dtype))
        # torch's convention: a mapping of exactly one 0 means the table is not pruned.
        not_pruned = compressed_indices_mapping.numel() == 1 and int(compressed_indices_mapping.reshape(-1)[0]) == 0
        mapping = None if not_pruned else compressed_indices_mapping
    # One kernel call over all bags (4/2-bit, and 8-bit pruned tables) reads the bags from
    # position 0 and must end at N; 8-bit unpruned tables run bag ranges from offsets[b].
    whole_call = bits != 8 or mapping is not None
    n = indices.numel()
    m = offsets.numel()
    if torch.compiler.is_compiling():
        # Reading offsets' values in Python would break the graph: the same rules as traced asserts
        # instead, and offsets[0] == 0 for every table (eager also takes offsets[0] > 0 for
        # unpruned 8-bit tables, which needs a slice of data-dependent size). Positions after the
        # last bag need no slice: the engine's lengths reading never takes them.
        if offsets.dim() == 1 and m > 0:
            torch._assert_async(offsets[0] == 0, op + ": under torch.compile offsets[0] must be 0 (eager calls "
                                "also take offsets[0] > 0 for unpruned 8-bit tables)")
            # a running maximum, not offsets[1:] against offsets[:-1]: no size m - 1 for export to bound
            torch._assert_async((offsets == offsets.cummax(0).values).all(), op + ": offsets must be non-decreasing")
            torch._assert_async(offsets[-1] <= n, op + ": offsets must not exceed the number of indices")
            if include_last_offset and whole_call:
                torch._assert_async(offsets[-1] == n, op + ": with include_last_offset the last offset of a "
                                    "4/2-bit or pruned 8-bit table must be the number of indices")
        return indices, offsets, per_sample_weights, mapping
    if offsets.dim() == 1 and offsets.dtype in (torch.int32, torch.int64) and m > 0:
        first = int(offsets[0])
        last = int(offsets[m - 1])
        if first < 0 or first > n:
            raise RuntimeError("{}: offsets[0] must lie in [0, {}] (the number of indices), but got {}".format(
                op, n, first))
        if whole_call and first != 0:
            raise RuntimeError("{}: offsets[0] must be 0 for a {}-bit{} table (torch 2.13's kernel fails on "
                               "other values), but got {}".format(op, bits, "" if bits != 8 else " pruned", first))
        if m > 1:
            down = (offsets[1:] < offsets[:-1]).nonzero()
            if down.numel() > 0:
                k = int(down[0, 0]) + 1
                raise RuntimeError("{}: offsets must be non-decreasing, but offsets[{}] = {} < offsets[{}] = {}".format(
                    op, k, int(offsets[k]), k - 1, int(offsets[k - 1])))
        if last > n:
            raise RuntimeError("{}: offsets must not exceed the number of indices {}, but offsets[{}] = {}".format(
                op, n, m - 1, last))
        if include_last_offset and whole_call and last != n:
            raise RuntimeError("{}: with include_last_offset the last offset of a {}-bit{} table must be the "
                               "number of indices {}, but offsets[{}] = {}".format(
                                   op, bits, "" if bits != 8 else " pruned", n, m - 1, last))
        end = last if include_last_offset else n
        if first > 0 or end < n:
            # The positions no bag covers are never read (nor their weights): leave them out.
            indices = indices[first:end]
            if per_sample_weights is not None:
                if per_sample_weights.numel() != n:
                    raise RuntimeError("{}: per_sample_weights must hold one weight per index ({}), but holds {}".format(
                        op, n, per_sample_weights.numel()))
                per_sample_weights = per_sample_weights.reshape(-1)[first:end]
            offsets = offsets - first
    return indices, offsets, per_sample_weights, mapping


def embedding_bag_byte_rowwise_offsets(weight: Tensor, indices: Tensor, offsets: Optional[Tensor] = None,
                                       scale_grad_by_freq: bool = False, mode: int = 0,
                                       pruned_weights: bool = False, per_sample_weights: Optional[Tensor] = None,
                                       compressed_indices_mapping: Optional[Tensor] = None,
                                       include_last_offset: bool = False, *,
                                       padding_idx: Optional[int] = None) -> Tensor:
    """torch.ops.quantized.embedding_bag_byte_rowwise_offsets over rows [D codes, f32 scale, f32
    bias]; mode 1 / 2 give the mean / max. scale_grad_by_freq only shapes a gradient: ignored."""
    return rowwise_offsets(8, weight, indices, offsets, mode, pruned_weights, per_sample_weights,
                            compressed_indices_mapping, include_last_offset, padding_idx)


def embedding_bag_4bit_rowwise_offsets(weight: Tensor, indices: Tensor, offsets: Optional[Tensor] = None,
                                       scale_grad_by_freq: bool = False, mode: int = 0,
                                       pruned_weights: bool = False, per_sample_weights: Optional[Tensor] = None,
                                       compressed_indices_mapping: Optional[Tensor] = None,
                                       include_last_offset: bool = False, *,
                                       padding_idx: Optional[int] = None) -> Tensor:
    """torch.ops.quantized.embedding_bag_4bit_rowwise_offsets over rows [D/2 bytes of nibbles,
    f16 scale, f16 bias]; mode 1 / 2 give the mean / max."""
    return rowwise_offsets(4, weight, indices, offsets, mode, pruned_weights, per_sample_weights,
                            compressed_indices_mapping, include_last_offset, padding_idx)


def embedding_bag_2bit_rowwise_offsets(weight: Tensor, indices: Tensor, offsets: Optional[Tensor] = None,
                                       scale_grad_by_freq: bool = False, mode: int = 0,
                                       pruned_weights: bool = False, per_sample_weights: Optional[Tensor] = None,
                                       compressed_indices_mapping: Optional[Tensor] = None,
                                       include_last_offset: bool = False, *,
                                       padding_idx: Optional[int] = None) -> Tensor:
    """torch.ops.quantized.embedding_bag_2bit_rowwise_offsets over rows [D/4 bytes of 2-bit
    codes, f16 scale, f16 bias]; mode 1 / 2 give the mean / max."""
    return rowwise_offsets(2, weight, indices, offsets, mode, pruned_weights, per_sample_weights,
                            compressed_indices_mapping, include_last_offset, padding_idx)


def embedding_bag_byte_prepack(weight: Tensor) -> Tensor:
    """torch's embedding_bag_byte_prepack, byte for byte: f32 (or f16, widened exactly first)
    of any rank >= 1, the last dim a row; returns uint8 with the last dim D + 8."""
    return torch.ops.shapejit.rowwise_prepack(weight, 8)


def embedding_bag_4bit_prepack(weight: Tensor, optimized_qparams: bool = False, nbins: int = 200,
                               ratio: float = 0.16) -> Tensor:
    """torch's embedding_bag_4bit_prepack, byte for byte: 2-D f32 / f16 [n, D], D even; returns
    uint8 [n, D/2 + 4]. optimized_qparams runs torch's choose_qparams_optimized search per row
    (rows on which torch's search would never end are rejected)."""
    return torch.ops.shapejit.rowwise_prepack(weight, 4, optimized_qparams, nbins, ratio)


def embedding_bag_2bit_prepack(weight: Tensor, optimized_qparams: bool = False, nbins: int = 200,
                               ratio: float = 0.16) -> Tensor:
    """torch's embedding_bag_2bit_prepack, byte for byte: 2-D f32 / f16 [n, D], D a multiple of
    4; returns uint8 [n, D/4 + 4]."""
    return torch.ops.shapejit.rowwise_prepack(weight, 2, optimized_qparams, nbins, ratio)


def embedding_bag_byte_unpack(weight: Tensor) -> Tensor:
    """torch's embedding_bag_byte_unpack: packed rows (any rank, last dim D + 8) to f32 [..., D]."""
    return torch.ops.shapejit.rowwise_unpack(weight, 8)


def embedding_bag_4bit_unpack(weight: Tensor) -> Tensor:
    """torch's embedding_bag_4bit_unpack: packed rows [n, D/2 + 4] to f32 [n, D]."""
    return torch.ops.shapejit.rowwise_unpack(weight, 4)


def embedding_bag_2bit_unpack(weight: Tensor) -> Tensor:
    """torch's embedding_bag_2bit_unpack: packed rows [n, D/4 + 4] to f32 [n, D]."""
    return torch.ops.shapejit.rowwise_unpack(weight, 2)


__all__ = ["embedding_bag", "embedding_bag_byte_rowwise_offsets", "embedding_bag_4bit_rowwise_offsets",
           "embedding_bag_2bit_rowwise_offsets", "embedding_bag_byte_prepack", "embedding_bag_4bit_prepack",
           "embedding_bag_2bit_prepack", "embedding_bag_byte_unpack", "embedding_bag_4bit_unpack",
           "embedding_bag_2bit_unpack"]
