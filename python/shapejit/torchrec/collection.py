"""shapejit.torchrec.EmbeddingBagCollection: a drop-in for TorchRec's EmbeddingBagCollection
(float tables, torchrec.modules.embedding_modules) and its quantized counterpart (QuantEBC,
torchrec.quant.embedding_modules) whose forward computes every feature of every table in one
shapejit engine call and returns the KeyedTensor TorchRec returns, bit for bit.

Quantized tables: fbgemm_gpu's IntNBit table-batched layout puts each row's fp16 scale and bias at
the row's head and pads rows to `row_alignment` bytes; the engine reads torch's prepack layout
(codes, then scale and bias at the tail: f32 for 8-bit, fp16 for 4/2-bit). from_torchrec repacks
each table once into torch's layout (the fp16 -> f32 widening of 8-bit scales is exact), and the
collection keeps only the repacked rows. A repack was chosen over a row-layout field in the
engine's kernel key because it needs no engine change and costs one pass over the table at
load (docs/torchrec-collection.md: 2.2 s at one thread for a 10M-row D=64 int8 table, 763 MiB
of fbgemm_gpu rows becoming 687 MiB of torch rows; both live until TorchRec's module is
dropped): the alignment padding goes, and 8-bit rows grow by the 4 bytes of wider scale and
bias, which the padding usually covered. fp16 tables of a QuantEBC are widened to f32 once
(exact), because the engine's f16 tables return f16 sums while fbgemm_gpu returns the f32 sum;
fp32 tables are shared as strided views of TorchRec's rows. fbgemm_gpu's bf16 output rounds
half-up, which the collection reproduces.

fbgemm_gpu's mean pooling multiplies the sum by 1/length (FBGEMM's normalize_by_lengths); the
engine's quantized mean divides. For a QuantEBC the collection therefore asks the engine for sums
and applies fbgemm_gpu's multiply itself, which gives its bits; a float EBC's mean is torch's
nn.EmbeddingBag mean, which the engine computes itself.
"""
import re
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from torchrec.modules.embedding_configs import DataType, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection as TorchRecEBC
from torchrec.quant.embedding_modules import EmbeddingBagCollection as TorchRecQuantEBC
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor

_CONCAT_OUTPUT = torch.ops.shapejit.table_bags_concat_output
_OUTPUTS = torch.ops.shapejit.table_bags_output
_CONCAT_WITH_GRAD = torch.ops.shapejit.table_bags_concat
_OUTPUTS_WITH_GRAD = torch.ops.shapejit.table_bags

_WHO = "shapejit.torchrec.EmbeddingBagCollection"
_QUANT_BITS = {DataType.INT8: 8, DataType.INT4: 4, DataType.INT2: 2}
_BAG_INDEX = re.compile(r"bags\[(\d+)\]")


def repack_fbgemm_rows(codes: Tensor, scale_bias: Tensor, bits: int, chunk_rows: int = 1 << 16) -> Tensor:
    """torch's prepack rows (uint8 [rows, packed bytes]) of one fbgemm_gpu IntNBit table given as
    fbgemm_gpu's split_embedding_weights() returns it: `codes` [rows, code bytes] and
    `scale_bias` [rows, 4] (fp16 scale, fp16 bias), both views into the padded rows. 8-bit rows
    get f32 scale and bias (widened exactly), 4/2-bit rows keep fp16. Copied in chunks of
    `chunk_rows` so the only temporary beyond the result is one chunk's widened qparams."""
    rows, code_bytes = codes.shape
    trailer = 8 if bits == 8 else 4
    out = torch.empty(rows, code_bytes + trailer, dtype=torch.uint8)
    for start in range(0, rows, chunk_rows):
        end = min(rows, start + chunk_rows)
        out[start:end, :code_bytes] = codes[start:end]
        qparams = scale_bias[start:end]
        if bits == 8:
            qparams = qparams.view(torch.float16).float().view(torch.uint8)
        out[start:end, code_bytes:] = qparams
    return out


def per_feature_views(values: Tensor, offsets: Tensor, weights: Optional[Tensor], count: int, batch: int,
                      positions) -> Tuple[List[Tensor], List[Optional[Tensor]], List[Optional[Tensor]]]:
    """A jagged input of `count` features x `batch` bags back to back (a KJT's values, or fbgemm's
    TBE indices, with offsets of count * batch + 1 entries) as the engine's per-feature lists, for
    the features at `positions` (repeats allowed): views of the values and weights, and each
    feature's offsets rebased to start at 0 (the engine's rule; all features in two ops)."""
    if batch > 0:
        offsets = offsets.contiguous()
        bounds = offsets[::batch].tolist()  # where each feature's values start, and the end
        rebased = offsets.as_strided((count, batch + 1), (batch, 1)) - offsets.as_strided((count, 1), (batch, 1))
    else:
        bounds = [0] * (count + 1)
        rebased = offsets.new_zeros(count, 1)
    indices: List[Tensor] = []
    offs: List[Optional[Tensor]] = []
    psw: List[Optional[Tensor]] = []
    for p in positions:
        start, end = bounds[p], bounds[p + 1]
        indices.append(values[start:end])
        offs.append(rebased[p])
        psw.append(None if weights is None else weights[start:end])
    return indices, offs, psw


class _Table(torch.nn.Module):
    """One table of a quantized collection as the engine reads it: `packed_weight` (torch's
    prepack rows, bits 8/4/2) or `weight` (f32 rows, bits 0, from an FP16 or FP32 table).
    load_state_dict also takes TorchRec's QuantEBC entry for the table (`weight`: fbgemm_gpu's
    padded rows, scale and bias at the head) and converts it as from_torchrec does."""

    def __init__(self, rows: Tensor, bits: int, dim: int, data_type: DataType):
        super().__init__()
        self.bits, self.dim, self.data_type = bits, dim, data_type
        self.register_buffer("packed_weight" if bits else "weight", rows)

    def rows(self) -> Tensor:
        return self._buffers["packed_weight" if self.bits else "weight"]

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "weight"
        given = state_dict.get(key)
        if given is not None and given.dtype == torch.uint8:  # TorchRec's rows (ours are f32 or packed_weight)
            if prefix + "weight_qscale" in state_dict:
                error_msgs.append("{}: {} comes with weight_qscale / weight_qbias (TorchRec's "
                                  "quant_state_dict_split_scale_bias), which shapejit does not load".format(_WHO, key))
                return
            raw = getattr(given, "elem", given)  # UInt4Tensor / UInt2Tensor wrap the bytes
            del state_dict[key]
            if self.bits:
                code_bytes = self.dim * self.bits // 8
                state_dict[prefix + "packed_weight"] = repack_fbgemm_rows(raw[:, 4:4 + code_bytes], raw[:, :4],
                                                                          self.bits)
            elif self.data_type == DataType.FP16:
                state_dict[key] = raw.view(torch.float16)[:, :self.dim].float()
            else:
                state_dict[key] = raw.view(torch.float32)[:, :self.dim]
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def extra_repr(self) -> str:
        return "rows={}, dim={}, bits={}".format(self.rows().shape[0], self.dim, self.bits)


class EmbeddingBagCollection(torch.nn.Module):
    """TorchRec's EmbeddingBagCollection (or QuantEBC) computed by shapejit: build it with
    from_torchrec; forward(features: KeyedJaggedTensor) -> KeyedTensor with TorchRec's keys,
    length_per_key and values, every feature of every table in one engine call writing its
    columns of the concatenated output.

    Float collections share TorchRec's nn.EmbeddingBag modules (`embedding_bags`, so state_dict
    keys are TorchRec's and the weights are not copied) and train like them: when a weight
    requires grad, the gradients are torch's embedding-bag backward (shapejit.autograd). The
    KeyedJaggedTensor may be variable-batch (stride_per_key_per_rank with inverse_indices), as
    TorchRec's float collection allows. Quantized collections hold their tables repacked
    (module docstring) in `embedding_bags.<table>.packed_weight` (int8/int4/int2) or
    `embedding_bags.<table>.weight` (fp16 widened to f32, fp32) and are inference only; their
    output dtype is the QuantEBC's (float32, float16 or bfloat16). load_state_dict takes either
    their own state_dict or a TorchRec QuantEBC's of the same tables (converted on loading)."""

    def __init__(self, embedding_bags: torch.nn.ModuleDict, configs, is_weighted: bool, quantized: bool,
                 output_dtype: torch.dtype, feature_names: List[str], table_names: List[str],
                 embedding_names: List[str], length_per_key: List[int], means: List[bool]):
        super().__init__()
        self.embedding_bags = embedding_bags
        self._embedding_bag_configs = configs
        self._is_weighted = is_weighted
        self._quantized = quantized
        self._output_dtype = output_dtype
        # Per output entry, in the KeyedTensor's order: the KJT key read, the table it reads.
        self._feature_names = feature_names
        self._table_names = table_names
        self._embedding_names = embedding_names
        self._length_per_key = length_per_key
        # Quantized collections: entries whose sums are scaled by 1/length here (fbgemm's mean).
        self._means = means
        self._columns: List[Tuple[int, int]] = []
        c = 0
        for d in length_per_key:
            self._columns.append((c, c + d))
            c += d
        self._keys_seen: Optional[List[str]] = None
        self._key_positions: List[int] = []

    # ---- construction -----------------------------------------------------------------------

    @classmethod
    def from_torchrec(cls, module: torch.nn.Module) -> "EmbeddingBagCollection":
        """The collection computing what `module` computes: a TorchRec
        torchrec.modules.embedding_modules.EmbeddingBagCollection (fp32 or fp16 tables, weights
        shared) or torchrec.quant.embedding_modules.EmbeddingBagCollection (int8, int4, int2,
        fp16 and fp32 tables, repacked once; pruned and virtual tables are refused)."""
        if type(module) is TorchRecEBC:
            return cls._from_float(module)
        if type(module) is TorchRecQuantEBC:
            return cls._from_quantized(module)
        raise TypeError("{}.from_torchrec: module must be a torchrec.modules.embedding_modules.EmbeddingBagCollection "
                        "or a torchrec.quant.embedding_modules.EmbeddingBagCollection (exactly, not a subclass), "
                        "but got {}".format(_WHO, type(module).__name__))

    @classmethod
    def _from_float(cls, ebc: TorchRecEBC) -> "EmbeddingBagCollection":
        feature_names, table_names = [], []
        for config, names in zip(ebc.embedding_bag_configs(), ebc._feature_names):
            bag = ebc.embedding_bags[config.name]
            if bag.weight.device.type != "cpu":
                raise ValueError("{}.from_torchrec: table '{}' is on {}, shapejit runs on the CPU".format(
                    _WHO, config.name, bag.weight.device))
            if bag.max_norm is not None:
                raise ValueError("{}.from_torchrec: table '{}' has max_norm={}, which shapejit does not support".format(
                    _WHO, config.name, bag.max_norm))
            for name in names:
                feature_names.append(name)
                table_names.append(config.name)
        return cls(ebc.embedding_bags, ebc.embedding_bag_configs(), ebc.is_weighted(), False, torch.float32,
                   feature_names, table_names, list(ebc._embedding_names), list(ebc._lengths_per_embedding),
                   [False] * len(feature_names))

    @classmethod
    def _from_quantized(cls, qebc: TorchRecQuantEBC) -> "EmbeddingBagCollection":
        bags = torch.nn.ModuleDict()
        feature_names, table_names, means = [], [], []
        for (pooling, virtual), emb_module in zip(qebc._key_to_tables.keys(), qebc._emb_modules):
            tables = qebc._key_to_tables[(pooling, virtual)]
            if virtual or not hasattr(emb_module, "split_embedding_weights"):
                raise ValueError("{}.from_torchrec: tables {} are virtual (KV) tables, which shapejit does not "
                                 "support".format(_WHO, [t.name for t in tables]))
            if pooling not in (PoolingType.SUM, PoolingType.MEAN):
                raise ValueError("{}.from_torchrec: tables {} have pooling {}, shapejit takes SUM or MEAN".format(
                    _WHO, [t.name for t in tables], pooling))
            remappings = getattr(emb_module, "index_remappings", None) or []
            if any(r is not None for r in remappings):
                raise ValueError("{}.from_torchrec: tables {} are pruned (index remapping), which shapejit does not "
                                 "support".format(_WHO, [t.name for t in tables]))
            weights = emb_module.split_embedding_weights()
            for config, (rows, scale_bias) in zip(tables, weights):
                if getattr(config, "num_embeddings_post_pruning", None) is not None:
                    raise ValueError("{}.from_torchrec: table '{}' is pruned (num_embeddings_post_pruning), which "
                                     "shapejit does not support".format(_WHO, config.name))
                if rows.device.type != "cpu":
                    raise ValueError("{}.from_torchrec: table '{}' is on {}, shapejit runs on the CPU".format(
                        _WHO, config.name, rows.device))
                bags[config.name] = _table_of(config, rows, scale_bias)
                for name in config.feature_names:
                    feature_names.append(name)
                    table_names.append(config.name)
                    means.append(pooling == PoolingType.MEAN)
        if qebc.output_dtype() not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError("{}.from_torchrec: the QuantEBC's output_dtype must be float32, float16 or bfloat16, "
                             "but is {}".format(_WHO, qebc.output_dtype()))
        return cls(bags, qebc.embedding_bag_configs(), qebc.is_weighted(), True, qebc.output_dtype(), feature_names,
                   table_names, list(qebc._embedding_names), list(qebc._length_per_key), means)

    # ---- TorchRec's collection interface ----------------------------------------------------

    def embedding_bag_configs(self):
        return self._embedding_bag_configs

    def is_weighted(self) -> bool:
        return self._is_weighted

    def output_dtype(self) -> torch.dtype:
        return self._output_dtype

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def extra_repr(self) -> str:
        return "features={}, quantized={}, is_weighted={}".format(len(self._feature_names), self._quantized,
                                                                 self._is_weighted)

    # ---- forward ----------------------------------------------------------------------------

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        if not isinstance(features, KeyedJaggedTensor):
            raise TypeError("{}: features must be a torchrec KeyedJaggedTensor, but got {}".format(
                _WHO, type(features).__name__))
        positions = self._positions(features.keys())
        values = features.values()
        if values.dtype not in (torch.int32, torch.int64):
            raise ValueError("{}: features.values() must be int32 or int64 indices, but are {}".format(
                _WHO, values.dtype))
        weights = None
        if self._is_weighted:
            weights = features.weights_or_none()
            if weights is None:
                raise ValueError("{}: the collection is weighted (is_weighted=True), so features must carry "
                                 "weights, but features.weights_or_none() is None".format(_WHO))
        if features.variable_stride_per_key():
            return self._forward_variable_batch(features, positions, values, weights)
        batch = features.stride()
        offsets = features.offsets()
        count = len(features.keys())
        if offsets.numel() != count * batch + 1:
            raise ValueError("{}: features.offsets() must hold {} keys x stride {} + 1 = {} entries, but holds "
                             "{}".format(_WHO, count, batch, count * batch + 1, offsets.numel()))
        indices, offs, psw = per_feature_views(values, offsets, weights, count, batch, positions)
        out = self._run(indices, offs, psw)
        if self._quantized:
            out = self._finish_quantized(out, features, positions, batch)
        return KeyedTensor(keys=self._embedding_names, length_per_key=self._length_per_key, values=out)

    def _positions(self, keys: List[str]) -> List[int]:
        """Each output entry's position among the KJT's keys (cached for the last key list)."""
        if self._keys_seen is not None and (keys is self._keys_seen or keys == self._keys_seen):
            return self._key_positions
        at: Dict[str, int] = {}
        for i, k in enumerate(keys):
            at.setdefault(k, i)
        positions = []
        for name, table in zip(self._feature_names, self._table_names):
            if name not in at:
                raise ValueError("{}: features has no key '{}', which table '{}' reads; features.keys() = {}".format(
                    _WHO, name, table, list(keys)))
            positions.append(at[name])
        self._keys_seen, self._key_positions = list(keys), positions
        return positions

    def _tables(self) -> Tuple[List[Tensor], List[int], List[int]]:
        """Per output entry: the table's tensor, its bits (0: float) and the engine's mode."""
        weights: List[Tensor] = []
        bits: List[int] = []
        modes: List[int] = []
        bags = self.embedding_bags._modules
        for table in self._table_names:
            bag = bags[table]
            if self._quantized:
                weights.append(bag.rows())
                bits.append(bag.bits)
                modes.append(0)  # sums; mean is fbgemm's multiply, _finish_quantized
            else:
                weights.append(bag._parameters["weight"])
                bits.append(0)
                modes.append(0 if bag.mode == "sum" else 1 if bag.mode == "mean" else 2)
        return weights, bits, modes

    def _run(self, indices: List[Tensor], offs: List[Optional[Tensor]], psw: List[Optional[Tensor]],
             concat: bool = True):
        """The one engine call: the concatenated [B, sum of D] output (float32 for a float
        collection), or with concat=False one output per entry."""
        weights, bits, modes = self._tables()
        n = len(weights)
        if n == 0:
            raise ValueError("{}: the collection has no features".format(_WHO))
        last = [True] * n
        padding: List[Optional[int]] = [None] * n
        mappings: List[Optional[Tensor]] = [None] * n
        same_dtype = all(w.dtype == weights[0].dtype for w in weights)
        wants_grad = torch.is_grad_enabled() and (any(w.requires_grad for w in weights) or
                                                  any(p is not None and p.requires_grad for p in psw))
        try:
            if wants_grad:
                weights = _aliases_for_gradients(weights)
                bags = self.embedding_bags._modules
                sparse = [bool(bags[t].sparse) for t in self._table_names]
                freq = [bool(bags[t].scale_grad_by_freq) for t in self._table_names]
                if concat and same_dtype:
                    out = _CONCAT_WITH_GRAD(weights, bits, indices, offs, modes, psw, last, padding, mappings, freq,
                                            sparse)[0]
                    return out.float()
                outs = _OUTPUTS_WITH_GRAD(weights, bits, indices, offs, modes, psw, last, padding, mappings, freq,
                                          sparse)[0]
            elif concat and same_dtype:
                return _CONCAT_OUTPUT(weights, bits, indices, offs, modes, psw, last, padding, mappings).float()
            else:
                outs = _OUTPUTS(weights, bits, indices, offs, modes, psw, last, padding, mappings)
        except RuntimeError as e:
            raise RuntimeError(self._name_bags(str(e))) from None
        outs = [o.float() for o in outs]  # TorchRec returns each fp16 table's output as float32
        return torch.cat(outs, dim=1) if concat else outs

    def _name_bags(self, message: str) -> str:
        """The engine's message with the feature and table behind each bags[k] it names."""
        said = []
        for k in sorted(set(int(m) for m in _BAG_INDEX.findall(message))):
            if k < len(self._feature_names):
                said.append("bags[{}] is feature '{}' of table '{}'".format(k, self._feature_names[k],
                                                                            self._table_names[k]))
        return message + (" ({}: {})".format(_WHO, "; ".join(said)) if said else "")

    def _finish_quantized(self, out: Tensor, features: KeyedJaggedTensor, positions: List[int], batch: int) -> Tensor:
        """fbgemm_gpu's mean (the sum times 1/length in f32, empty bags left 0) on the mean
        entries, then the QuantEBC's output dtype (rounded once from f32, as fbgemm_gpu does:
        to nearest even for float16, half-up for bfloat16)."""
        if any(self._means) and batch > 0:
            lengths = features.lengths().view(-1, batch)
            wanted = [p for p, mean in zip(positions, self._means) if mean]
            recip = lengths[wanted].clamp(min=1).to(torch.float32).reciprocal_()  # [mean entries, B]
            j = 0
            for k, mean in enumerate(self._means):
                if mean:
                    c0, c1 = self._columns[k]
                    out[:, c0:c1].mul_(recip[j].unsqueeze(1))
                    j += 1
        if self._output_dtype == torch.bfloat16:
            return _bfloat16_half_up(out)
        return out if self._output_dtype == torch.float32 else out.to(self._output_dtype)

    def _forward_variable_batch(self, features: KeyedJaggedTensor, positions: List[int], values: Tensor,
                                weights: Optional[Tensor]) -> KeyedTensor:
        """A variable-batch KJT (a batch size per key): each entry pooled over its key's batch,
        then spread to the full batch by the KJT's inverse_indices, as TorchRec's float
        collection does (its quantized one takes no variable-batch input)."""
        if self._quantized:
            raise ValueError("{}: features is a variable-batch KeyedJaggedTensor (stride_per_key_per_rank), which "
                             "TorchRec's quantized collection does not take either".format(_WHO))
        inverse = features.inverse_indices_or_none()
        if inverse is None:
            raise ValueError("{}: features is a variable-batch KeyedJaggedTensor without inverse_indices, so its "
                             "keys' pooled outputs have different batch sizes and cannot be concatenated (TorchRec "
                             "fails the same way)".format(_WHO))
        strides = features.stride_per_key()
        lengths_at = [0]
        for s in strides:
            lengths_at.append(lengths_at[-1] + s)
        offsets = features.offsets()
        bounds = offsets[lengths_at].tolist()
        indices: List[Tensor] = []
        offs: List[Optional[Tensor]] = []
        psw: List[Optional[Tensor]] = []
        for p in positions:
            a, b = lengths_at[p], lengths_at[p + 1]
            indices.append(values[bounds[p]:bounds[p + 1]])
            offs.append(offsets[a:b + 1] - offsets[a])
            psw.append(None if weights is None else weights[bounds[p]:bounds[p + 1]])
        outs = self._run(indices, offs, psw, concat=False)
        inverse_keys, inverse_rows = inverse
        row_of = {k: i for i, k in enumerate(inverse_keys)}
        spread = [o.index_select(0, inverse_rows[row_of[name]]) for o, name in zip(outs, self._feature_names)]
        return KeyedTensor(keys=self._embedding_names, length_per_key=self._length_per_key,
                           values=torch.cat(spread, dim=1))


def _bfloat16_half_up(x: Tensor) -> Tensor:
    """f32 -> bfloat16 as fbgemm_gpu's CPU kernel rounds its bf16 output: half-up (add 0x8000 to
    the bits, keep the high 16), not torch's round-to-nearest-even."""
    return ((x.view(torch.int32) + 0x8000) >> 16).to(torch.int16).view(torch.bfloat16)


def _aliases_for_gradients(weights: List[Tensor]) -> List[Tensor]:
    """The weights with each table read by several entries given as one alias per entry, made
    in entry order. TorchRec's collection calls one bag per feature, so autograd runs their
    backwards last feature first and adds a shared table's gradients in that order; the group
    op's backward returns one gradient per entry, and through aliases autograd adds them in the
    same order (the most recently made alias runs first), so the sums are TorchRec's bits."""
    uses: Dict[int, int] = {}
    for w in weights:
        uses[id(w)] = uses.get(id(w), 0) + 1
    return [w.view_as(w) if uses[id(w)] > 1 else w for w in weights]


def _table_of(config, rows: Tensor, scale_bias: Optional[Tensor]) -> _Table:
    """One QuantEBC table (fbgemm_gpu's split_embedding_weights() entry) as the engine reads it."""
    dim = config.embedding_dim
    bits = _QUANT_BITS.get(config.data_type)
    if bits is not None:
        if scale_bias is None or scale_bias.shape != (rows.shape[0], 4):
            raise ValueError("{}.from_torchrec: table '{}' ({}) has no [rows, 4] fp16 scale and bias beside its "
                             "codes".format(_WHO, config.name, config.data_type))
        per_byte = 8 // bits
        if dim % per_byte or rows.shape[1] != dim // per_byte:
            raise ValueError("{}.from_torchrec: table '{}' ({}, dim {}) must fill whole bytes with its codes "
                             "({} a byte), but its rows hold {} code bytes".format(
                                 _WHO, config.name, config.data_type, dim, per_byte, rows.shape[1]))
        return _Table(repack_fbgemm_rows(rows, scale_bias, bits), bits, dim, config.data_type)
    if config.data_type == DataType.FP16:
        table = rows.view(torch.float16)[:, :dim].float()  # widened once: fbgemm_gpu sums fp16 rows in f32
    elif config.data_type == DataType.FP32:
        table = rows.view(torch.float32)[:, :dim]  # a view of TorchRec's padded rows, no copy
    else:
        raise ValueError("{}.from_torchrec: table '{}' has data_type {}, shapejit takes INT8, INT4, INT2, FP16 and "
                         "FP32 tables".format(_WHO, config.name, config.data_type))
    return _Table(table, 0, dim, config.data_type)
