"""TorchRec sharding with shapejit computing each rank's local lookups.

TorchRec plans, shards and communicates; shapejit only replaces the kernel that computes a rank's
pooled lookups. The extension point is the innermost one: the fbgemm table-batched-embedding
(TBE) module that TorchRec's kernel wrappers hold as `_emb_module` (BatchedFusedEmbeddingBag,
BatchedDenseEmbeddingBag). After TorchRec has built the sharded module, each TBE is replaced by
an instance of a shapejit subclass of the TBE's own class that shares the TBE's state (the same
parameter, buffer and optimizer-state objects) and overrides only forward: fbgemm's call
convention (flat indices, offsets of F*B+1 for F features of B bags, optional
per_sample_weights) in, the same [B, sum of the features' dims] tensor out, computed by one
shapejit engine call over all the TBE's features. TorchRec's state_dict, its table slices, its
fused optimizer and checkpointing see the TBE they built.

Why not a compute kernel of our own: EmbeddingComputeKernel is a closed enum that
GroupedPooledEmbeddingsLookup maps to kernel classes with an if-chain, so a kernel the planner
would plan cannot be added from outside. A sharder can say which sharding types the planner may
use and post-process the module it builds: ShapejitEmbeddingBagCollectionSharder does exactly
that (and swap_lookups does the swap on a model sharded by any other means).

Training: TorchRec 1.8.0's planner gives table-, row- and column-wise shards the FUSED kernel
only (it rejects DENSE for anything but data-parallel: "DENSE kernel requires DATA_PARALLEL
sharding"), whose optimizer runs inside fbgemm's backward. With the EXACT_SGD optimizer the
shapejit forward is paired with fbgemm's own fused backward-and-update
(torch.ops.fbgemm.split_embedding_backward_codegen_sgd_cpu): the update is fbgemm's, fed the
same output gradient. With another fused optimizer a forward that needs a gradient falls back to
fbgemm's (its backward needs the optimizer state wiring of fbgemm's own forward); forwards without
a gradient (evaluation) always run on shapejit. Data-parallel tables (DENSE kernel) run on
shapejit with torch's embedding-bag backward (shapejit.autograd), the gradient going to the TBE's
flat weights parameter for any torch optimizer.

Inference: TorchRec's inference sharding (torchrec.inference.modules.shard_quant_model, one
process holding every rank's shards; on CPU it needs
torchrec.distributed.global_settings.set_propogate_device(True)) computes with fbgemm's IntNBit
TBE; swap_lookups(model) replaces it with ShapejitIntNBitTableBags, which reads a one-time copy of
the int8/int4/int2 rows repacked into torch's layout (collection.repack_fbgemm_rows).

docs/torchrec-sharding.md describes what runs where and the limits.
"""
from typing import List, Optional

import torch
from torch import Tensor

import shapejit  # noqa: F401  (loads the operators)
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (DenseTableBatchedEmbeddingBagsCodegen,
                                                                     SplitTableBatchedEmbeddingBagsCodegen)
from fbgemm_gpu.tbe.config.embedding_config import PoolingMode
from torchrec.distributed.batched_embedding_kernel import BatchedDenseEmbeddingBag, BatchedFusedEmbeddingBag
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.quant_embedding_kernel import QuantBatchedEmbeddingBag
from torchrec.distributed.types import ShardingType

from .collection import per_feature_views, repack_fbgemm_rows

_CONCAT = torch.ops.shapejit.table_bags_concat
_CONCAT_OUTPUT = torch.ops.shapejit.table_bags_concat_output
_POOLING_TO_MODE = {PoolingMode.SUM: 0, PoolingMode.MEAN: 1}


def feature_slices(indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor], num_features: int,
                   who: str):
    """fbgemm's TBE input (indices of every feature back to back, offsets of F*B+1 entries into
    them) as one (indices, offsets of B+1 from 0, per_sample_weights) per feature: views of the
    indices and weights, the offsets rebased. Returns (indices, offsets, weights, B), lists of F."""
    if offsets.dim() != 1 or offsets.numel() < 1 or (offsets.numel() - 1) % num_features != 0:
        raise ValueError("{}: offsets must be 1-D with F*B+1 entries for F={} features, but has shape {}".format(
            who, num_features, tuple(offsets.shape)))
    batch = (offsets.numel() - 1) // num_features
    idx, offs, psw = per_feature_views(indices, offsets, per_sample_weights, num_features, batch,
                                       range(num_features))
    return idx, offs, psw, batch


def _check_tbe_type(tbe, expected: type, who: str) -> None:
    """A TypeError naming the argument when tbe is not an instance of fbgemm's `expected` class."""
    if not isinstance(tbe, expected):
        raise TypeError("{}: tbe must be a {}, but is a {}".format(who, expected.__name__, type(tbe).__name__))


def _check_servable(tbe, who: str) -> None:
    """The TBE settings the shapejit forward reproduces exactly, or an error naming the setting."""
    if tbe.weights_precision != SparseType.FP32:
        raise NotImplementedError("{}: weights_precision must be FP32, but is {} (fbgemm writes a float32 output from "
                                  "half tables, torch's bags a half one)".format(who, tbe.weights_precision))
    if tbe.pooling_mode not in _POOLING_TO_MODE:
        raise NotImplementedError("{}: pooling_mode must be SUM or MEAN, but is {} (sequence embeddings are not "
                                  "bags)".format(who, tbe.pooling_mode))
    if tbe.output_dtype != SparseType.FP32.as_int():
        raise NotImplementedError("{}: output_dtype must be FP32, but is {}".format(
            who, SparseType.from_int(tbe.output_dtype)))


def _bags(tables: List[Tensor], feature_tables: List[int], modes: List[int], indices: Tensor, offsets: Tensor,
          per_sample_weights: Optional[Tensor], with_grad: bool, who: str) -> Tensor:
    """The TBE's output: [B, sum of the features' dims], one engine call over every feature."""
    n = len(feature_tables)
    offsets = offsets.to(indices.dtype)  # as fbgemm: offsets take the indices' dtype
    if per_sample_weights is not None:
        per_sample_weights = per_sample_weights.float()
    idx, offs, psw, _ = feature_slices(indices, offsets, per_sample_weights, n, who)
    weights = [tables[t] for t in feature_tables]
    bits = [0] * n
    last = [True] * n
    padding: List[Optional[int]] = [None] * n
    maps: List[Optional[Tensor]] = [None] * n
    # fbgemm's mean is the sum times the f32 reciprocal of the bag's length (torch's divides): the
    # engine sums, and the scale is applied here as fbgemm does, so the output is bitwise fbgemm's
    mean = [m == 1 for m in modes]
    sums = [0 if m == 1 else m for m in modes] if any(mean) else modes
    if with_grad:
        out = _CONCAT(weights, bits, idx, offs, sums, psw, last, padding, maps, [False] * n, [False] * n)[0]
    else:
        out = _CONCAT_OUTPUT(weights, bits, idx, offs, sums, psw, last, padding, maps)
    if not any(mean):
        return out
    return _mean_scale(out, offs, [w.size(1) for w in weights], mean)


def _mean_scale(out: Tensor, offsets: List[Tensor], dims: List[int], mean: Optional[List[bool]] = None) -> Tensor:
    """Sums [B, sum of dims] made fbgemm's means: each mean feature's columns times the f32
    reciprocal of its bag's length (empty bags stay 0)."""
    scales = []
    for f, dim in enumerate(dims):
        if mean is None or mean[f]:
            lengths = (offsets[f][1:] - offsets[f][:-1]).float()
            scale = torch.where(lengths > 0, 1.0 / lengths.clamp(min=1.0), torch.zeros_like(lengths))
            scales.append(scale.unsqueeze(1).expand(-1, dim))
        else:
            scales.append(torch.ones(out.size(0), dim))
    return out * torch.cat(scales, dim=1)


def _adopt(cls, tbe, feature_table_map: List[int]):
    """An instance of `cls` (a subclass of the TBE's class) holding the TBE's own state objects."""
    module = cls.__new__(cls)
    module.__dict__.update(tbe.__dict__)  # the same parameters, buffers, optimizer state and settings
    module._shapejit_feature_tables = list(feature_table_map)
    module._shapejit_modes = [_POOLING_TO_MODE[tbe.pooling_mode]] * len(feature_table_map)
    module.served_forwards = 0  # forwards shapejit computed (tests and benchmarks read it)
    return module


class ShapejitDenseTableBags(DenseTableBatchedEmbeddingBagsCodegen):
    """fbgemm's DenseTableBatchedEmbeddingBagsCodegen (the TBE of TorchRec's DENSE kernel) with
    a shapejit forward; the gradient reaches the TBE's flat `weights` parameter through per-table
    views (torch's dense embedding-bag backward, shapejit.autograd)."""

    @classmethod
    def from_fbgemm(cls, tbe: DenseTableBatchedEmbeddingBagsCodegen,
                    feature_table_map: List[int]) -> "ShapejitDenseTableBags":
        who = "ShapejitDenseTableBags.from_fbgemm"
        _check_tbe_type(tbe, DenseTableBatchedEmbeddingBagsCodegen, who)
        _check_servable(tbe, who)
        return _adopt(cls, tbe, feature_table_map)

    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor] = None,
                feature_requires_grad: Optional[Tensor] = None,
                batch_size_per_feature_per_rank: Optional[List[List[int]]] = None) -> Tensor:
        if batch_size_per_feature_per_rank is not None:
            raise NotImplementedError("ShapejitDenseTableBags: batch_size_per_feature_per_rank (variable batch per "
                                      "feature) is not supported: its output is fbgemm's VBE layout")
        tables = []
        for t, (rows, dim) in enumerate(self.embedding_specs):
            begin = self.weights_physical_offsets[t]
            tables.append(self.weights[begin:begin + rows * dim].view(rows, dim))  # autograd attached
        self.served_forwards += 1
        with_grad = torch.is_grad_enabled() and (self.weights.requires_grad or (
            per_sample_weights is not None and per_sample_weights.requires_grad))
        return _bags(tables, self._shapejit_feature_tables, self._shapejit_modes, indices, offsets,
                     per_sample_weights, with_grad, "ShapejitDenseTableBags")


class _ShapejitForwardFbgemmSgdUpdate(torch.autograd.Function):
    """Forward: the pooled output shapejit computed (given). Backward: fbgemm's fused EXACT_SGD
    backward, which updates the TBE's host weights in place from the output gradient, exactly
    what fbgemm's own autograd function runs in its backward on CPU."""

    @staticmethod
    def forward(ctx, placeholder, output, tbe, indices, offsets, per_sample_weights, pooling_mode):
        ctx.tbe = tbe
        ctx.pooling_mode = pooling_mode
        ctx.save_for_backward(indices, offsets, per_sample_weights)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        tbe = ctx.tbe
        indices, offsets, per_sample_weights = ctx.saved_tensors
        torch.ops.fbgemm.split_embedding_backward_codegen_sgd_cpu(
            grad_output.contiguous(), tbe.weights_host, tbe.weights_placements, tbe.weights_offsets, tbe.D_offsets,
            tbe.max_D, tbe.hash_size_cumsum, tbe.total_hash_size_bits, indices, offsets, ctx.pooling_mode,
            per_sample_weights, tbe.stochastic_rounding, tbe.learning_rate_tensor, tbe.output_dtype)
        return None, None, None, None, None, None, None


class ShapejitFusedTableBags(SplitTableBatchedEmbeddingBagsCodegen):
    """fbgemm's SplitTableBatchedEmbeddingBagsCodegen (the TBE of TorchRec's FUSED kernel, host
    weights on CPU) with a shapejit forward. When a gradient is needed and the fused optimizer is
    EXACT_SGD, the backward is fbgemm's fused SGD update (_ShapejitForwardFbgemmSgdUpdate); with
    another optimizer, such a forward is fbgemm's own (fallback_forwards counts them)."""

    fallback_forwards: int

    @classmethod
    def from_fbgemm(cls, tbe: SplitTableBatchedEmbeddingBagsCodegen) -> "ShapejitFusedTableBags":
        who = "ShapejitFusedTableBags.from_fbgemm"
        _check_tbe_type(tbe, SplitTableBatchedEmbeddingBagsCodegen, who)
        _check_servable(tbe, who)
        placements = set(int(p) for p in tbe.weights_physical_placements)
        if placements != {EmbeddingLocation.HOST.value}:
            raise NotImplementedError("{}: every table must be in host memory (EmbeddingLocation.HOST, TorchRec's CPU "
                                      "placement), but the placements are {}".format(who, sorted(placements)))
        module = _adopt(cls, tbe, tbe.feature_table_map)
        module.fallback_forwards = 0
        return module

    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor] = None,
                feature_requires_grad: Optional[Tensor] = None,
                batch_size_per_feature_per_rank: Optional[List[List[int]]] = None, **kwargs) -> Tensor:
        if batch_size_per_feature_per_rank is not None or kwargs:
            raise NotImplementedError("ShapejitFusedTableBags: batch_size_per_feature_per_rank (variable batch per "
                                      "feature) and {} are not supported".format(sorted(kwargs) or "no other argument"))
        training = torch.is_grad_enabled()
        if training and self.optimizer != EmbOptimType.EXACT_SGD:
            self.fallback_forwards += 1
            return super().forward(indices, offsets, per_sample_weights, feature_requires_grad)
        self.served_forwards += 1
        output = _bags(self.split_embedding_weights(), self._shapejit_feature_tables, self._shapejit_modes, indices,
                       offsets, per_sample_weights, False, "ShapejitFusedTableBags")
        if not training:
            return output
        # fbgemm's backward takes int64 indices and offsets and a defined weights tensor (Python
        # cannot pass its "no weights"): ones for sum bags (an exact product), and for mean bags
        # each index's 1/length in f32 with the sum pooling mode (the factor fbgemm's mean applies)
        indices64 = indices.long()
        offsets64 = offsets.long()
        pooling = int(self.pooling_mode)
        if per_sample_weights is not None:
            psw = per_sample_weights.float()
        elif self.pooling_mode == PoolingMode.MEAN:
            lengths = offsets64[1:] - offsets64[:-1]
            psw = torch.repeat_interleave(1.0 / lengths.clamp(min=1).float(), lengths,
                                          output_size=indices64.numel())
            pooling = int(PoolingMode.SUM)
        else:
            psw = torch.ones(indices64.numel(), dtype=torch.float32)
        return _ShapejitForwardFbgemmSgdUpdate.apply(self.placeholder_autograd_tensor, output, self, indices64,
                                                     offsets64, psw, pooling)


_NBIT_BITS = {SparseType.INT8: 8, SparseType.INT4: 4, SparseType.INT2: 2}
_OUTPUT_DTYPES = {SparseType.FP32.as_int(): torch.float32, SparseType.FP16.as_int(): torch.float16}


class ShapejitIntNBitTableBags(IntNBitTableBatchedEmbeddingBagsCodegen):
    """fbgemm's IntNBitTableBatchedEmbeddingBagsCodegen (the TBE of TorchRec's quantized
    inference kernel, host weights on CPU) with a shapejit forward over a one-time copy of its
    tables in torch's packed-row layout (collection.repack_fbgemm_rows): int8, int4 and int2 tables.
    refresh_rows() re-reads fbgemm's storage after its weights were assigned again."""

    @classmethod
    def from_fbgemm(cls, tbe: IntNBitTableBatchedEmbeddingBagsCodegen) -> "ShapejitIntNBitTableBags":
        who = "ShapejitIntNBitTableBags.from_fbgemm"
        _check_tbe_type(tbe, IntNBitTableBatchedEmbeddingBagsCodegen, who)
        if tbe.pooling_mode not in _POOLING_TO_MODE:
            raise NotImplementedError("{}: pooling_mode must be SUM or MEAN, but is {}".format(who, tbe.pooling_mode))
        if tbe.output_dtype not in _OUTPUT_DTYPES:
            raise NotImplementedError("{}: output_dtype must be FP32 or FP16, but is {}".format(
                who, SparseType.from_int(tbe.output_dtype)))
        for name, _, _, weight_ty, _ in tbe.embedding_specs:
            if weight_ty not in _NBIT_BITS:
                raise NotImplementedError("{}: table {} is {}; int8, int4 and int2 tables are served".format(
                    who, name, weight_ty))
        if tbe.index_remappings_array.numel() > 0 or tbe.index_remapping_hash_table.numel() > 0 or \
                getattr(tbe, "index_remapping_hash_table_cpu", None) is not None:
            raise NotImplementedError("{}: pruned tables (index remapping) are not supported".format(who))
        if tbe.host_size <= 0 or tbe.dev_size > 0 or tbe.uvm_size > 0:
            raise NotImplementedError("{}: every table must be in host memory (TorchRec's CPU placement)".format(who))
        module = _adopt(cls, tbe, tbe.feature_table_map)
        module.refresh_rows()
        return module

    def refresh_rows(self) -> None:
        """The engine's copy of the tables, rebuilt from fbgemm's storage."""
        rows, bits = [], []
        for (codes, scale_bias), (_, _, _, weight_ty, _) in zip(self.split_embedding_weights(split_scale_shifts=True),
                                                                self.embedding_specs):
            bits.append(_NBIT_BITS[weight_ty])
            rows.append(repack_fbgemm_rows(codes, scale_bias, bits[-1]))
        self._shapejit_rows = rows
        self._shapejit_bits = [bits[t] for t in self._shapejit_feature_tables]

    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor] = None) -> Tensor:
        self.served_forwards += 1
        weights = [self._shapejit_rows[t] for t in self._shapejit_feature_tables]
        n = len(weights)
        offsets = offsets.to(indices.dtype)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.float()
        idx, offs, psw, _ = feature_slices(indices, offsets, per_sample_weights, n, "ShapejitIntNBitTableBags")
        mean = self._shapejit_modes[0] == 1
        out = _CONCAT_OUTPUT(weights, self._shapejit_bits, idx, offs, [0] * n, psw, [True] * n, [None] * n, [None] * n)
        if mean:
            out = _mean_scale(out, offs, [int(self.D_offsets[f + 1] - self.D_offsets[f]) for f in range(n)])
        return out.to(_OUTPUT_DTYPES[self.output_dtype])


def _all_modules(model: torch.nn.Module) -> List[torch.nn.Module]:
    """model.modules() and the modules TorchRec's sharded collections keep in a plain list
    (`_lookups`, not registered as children) with theirs."""
    out, seen, stack = [], set(), [model]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        out.append(module)
        stack.extend(module.children())
        for attribute in ("_lookups", "_embedding_lookups_per_rank"):  # plain lists in TorchRec's modules
            stack.extend(m for m in getattr(module, attribute, None) or [] if isinstance(m, torch.nn.Module))
    return out


def shapejit_lookups(model: torch.nn.Module) -> List[torch.nn.Module]:
    """The swapped table-batched modules inside `model` (each counts its `served_forwards`)."""
    return [m for m in _all_modules(model)
            if isinstance(m, (ShapejitDenseTableBags, ShapejitFusedTableBags, ShapejitIntNBitTableBags))]


def swap_lookups(model: torch.nn.Module) -> int:
    """Replaces, inside `model` (a DistributedModelParallel, a sharded collection, or any module
    holding them), the fbgemm TBE of every TorchRec FUSED and DENSE embedding-bag kernel with its
    shapejit counterpart sharing its state; returns how many were swapped. Swapped ones are left
    as they are, so calling it twice is harmless."""
    swapped = 0
    for module in _all_modules(model):
        if isinstance(module, BatchedFusedEmbeddingBag) and type(module._emb_module) is \
                SplitTableBatchedEmbeddingBagsCodegen:
            module._emb_module = ShapejitFusedTableBags.from_fbgemm(module._emb_module)
            swapped += 1
        elif isinstance(module, QuantBatchedEmbeddingBag) and type(module._emb_module) is \
                IntNBitTableBatchedEmbeddingBagsCodegen:
            module._emb_module = ShapejitIntNBitTableBags.from_fbgemm(module._emb_module)
            swapped += 1
        elif isinstance(module, BatchedDenseEmbeddingBag) and type(module._emb_module) is \
                DenseTableBatchedEmbeddingBagsCodegen:
            module._emb_module = ShapejitDenseTableBags.from_fbgemm(module._emb_module, module._feature_table_map)
            swapped += 1
    return swapped


class CpuEmbeddingBagCollectionSharder(EmbeddingBagCollectionSharder):
    """TorchRec's EmbeddingBagCollectionSharder that also lets the planner shard row-wise on CPU
    (TorchRec 1.8.0 offers row-wise on CUDA only, yet its row-wise path runs on CPU over gloo:
    fbgemm's block bucketize has a CPU kernel and gloo a reduce-scatter). It computes with
    TorchRec's kernels: the reference the shapejit sharder is compared with."""

    def sharding_types(self, compute_device_type: str) -> List[str]:
        types = list(super().sharding_types(compute_device_type))
        if compute_device_type == "cpu" and ShardingType.ROW_WISE.value not in types:
            types.append(ShardingType.ROW_WISE.value)
        return types


class ShapejitEmbeddingBagCollectionSharder(CpuEmbeddingBagCollectionSharder):
    """The sharder to give the planner and DistributedModelParallel: TorchRec plans and shards an
    EmbeddingBagCollection as usual (pass fused_params={"optimizer": EmbOptimType.EXACT_SGD,
    "learning_rate": lr} to train every lookup on shapejit), then the local lookups of the module
    it built run on shapejit (swap_lookups)."""

    def shard(self, module, params, env, device=None, module_fqn=None):
        sharded = super().shard(module, params, env, device=device, module_fqn=module_fqn)
        swap_lookups(sharded)
        return sharded
