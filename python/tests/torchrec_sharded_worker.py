"""One rank of the 2-rank TorchRec sharding test (test_torchrec_sharded.py launches it):
    python torchrec_sharded_worker.py RANK WORLD_SIZE PORT CHECK
Every check builds the same unsharded collection on every rank (same seed), shards it with
TorchRec's planner under ParameterConstraints, and compares what it was asked to compare; a failed
check raises (the rank exits non-zero and the test prints its output)."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

CHECKS = ("train", "infer")


def _log(rank, *args):
    print("[rank {}]".format(rank), *args, flush=True)


# ---- the model and its inputs -------------------------------------------------------------------

# (name, rows, dim, features, sharding type): table-, row- and column-wise shards, a table two
# features share, rows that do not split evenly between the ranks.
TABLES = (
    ("tw_a", 37, 8, ("f_tw_a",), "table_wise"),
    ("tw_b", 20, 16, ("f_tw_b1", "f_tw_b2"), "table_wise"),
    ("rw_a", 45, 8, ("f_rw_a",), "row_wise"),
    ("rw_b", 31, 4, ("f_rw_b",), "row_wise"),
    ("cw_a", 29, 16, ("f_cw_a",), "column_wise"),
    ("cw_b", 23, 32, ("f_cw_b",), "column_wise"),
    ("dp_a", 25, 8, ("f_dp_a",), "data_parallel"),
)


def table_configs(pooling, tables, data_type=None):
    import torchrec
    kwargs = {} if data_type is None else {"data_type": data_type}
    return [torchrec.EmbeddingBagConfig(name=name, num_embeddings=rows, embedding_dim=dim, feature_names=list(feats),
                                        pooling=pooling, **kwargs)
            for name, rows, dim, feats, _ in tables]


def constraints(kernel, tables):
    from torchrec.distributed.planner import ParameterConstraints
    out = {}
    for name, _, dim, _, sharding in tables:
        # column-wise shards of 8 columns: 2 or 4 shards over the 2 ranks
        extra = {"min_partition": 8} if sharding == "column_wise" else {}
        # data-parallel tables: DENSE, the only kernel TorchRec gives them
        kernels = ["dense"] if sharding == "data_parallel" else [kernel]
        out[name] = ParameterConstraints(sharding_types=[sharding], compute_kernels=kernels, **extra)
    return out


def features(batch, generator, weighted, tables):
    """A KeyedJaggedTensor over every feature: bag lengths 0..5 (empty bags included), indices in
    range, per-sample weights when `weighted`."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    keys, lengths, values = [], [], []
    for _, rows, _, feats, _ in tables:
        for f in feats:
            n = torch.randint(0, 6, (batch,), generator=generator)
            keys.append(f)
            lengths.append(n)
            values.append(torch.randint(0, rows, (int(n.sum()),), generator=generator))
    lengths = torch.cat(lengths)
    values = torch.cat(values)
    weights = torch.rand(values.numel(), generator=generator) if weighted else None
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths, weights=weights)


def local_batch(kjt, rank, world):
    """This rank's share of a global batch: bags [rank*B/world, (rank+1)*B/world) of each feature."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    batch = kjt.stride() // world
    lengths = kjt.lengths().view(len(kjt.keys()), -1)
    offsets = kjt.offsets()
    values, weights, local_lengths = [], [], []
    w = kjt.weights_or_none()
    for f in range(len(kjt.keys())):
        first = f * kjt.stride() + rank * batch
        begin, end = int(offsets[first]), int(offsets[first + batch])
        values.append(kjt.values()[begin:end])
        if w is not None:
            weights.append(w[begin:end])
        local_lengths.append(lengths[f, rank * batch:(rank + 1) * batch])
    return KeyedJaggedTensor.from_lengths_sync(keys=kjt.keys(), values=torch.cat(values),
                                               lengths=torch.cat(local_lengths),
                                               weights=torch.cat(weights) if w is not None else None)


def in_key_order(kt, keys):
    """A KeyedTensor's values with the features in `keys`' order (a sharded collection groups
    them by sharding type)."""
    per_key = kt.to_dict()
    return torch.cat([per_key[k] for k in keys], dim=1)


def copy_into_shards(sharded_state, full_state):
    """Each local shard of the sharded model's state_dict given the unsharded tensor's slice."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    copied = 0
    for name, tensor in sharded_state.items():
        if not isinstance(tensor, ShardedTensor):  # a replicated (data-parallel) table
            if name in full_state and tensor.shape == full_state[name].shape:
                tensor.detach().copy_(full_state[name])
            continue
        full = full_state[name]
        for shard in tensor.local_shards():
            r, c = shard.metadata.shard_offsets
            rows, cols = shard.tensor.shape
            shard.tensor.detach().copy_(full[r:r + rows, c:c + cols])
            copied += 1
    if copied == 0:
        raise AssertionError("no sharded tensor in the sharded model's state_dict: {}".format(list(sharded_state)))


def local_shards(model):
    """{state_dict name: [local shard tensors]} (clones)."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    return {name: [s.tensor.detach().clone() for s in t.local_shards()]
            for name, t in model.state_dict().items() if isinstance(t, ShardedTensor)}


def plan_and_shard(module, sharder, kernel, world, pg, tables):
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.types import ShardingEnv
    topology = Topology(world_size=world, compute_device="cpu")
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints(kernel, tables))
    plan = planner.collective_plan(module, [sharder], pg)
    model = DistributedModelParallel(module, env=ShardingEnv.from_process_group(pg), plan=plan, sharders=[sharder],
                                     device=torch.device("cpu"))
    return model, plan


def sharding_types_of(plan):
    out = {}
    for module_plan in plan.plan.values():
        for table, ps in module_plan.items():
            out[table] = (ps.sharding_type, ps.compute_kernel, len(ps.ranks or []))
    return out


# ---- training -----------------------------------------------------------------------------------

def check_train(rank, world, pg, steps=3, batch=8, lr=0.05):
    """TorchRec's planner shards the collection (FUSED kernel, fused EXACT_SGD) once with TorchRec's
    kernels and once with shapejit's lookups; per step, both forwards must be bitwise equal and
    match the unsharded collection on the global batch; after `steps` steps of the same loss the
    local shards must be bitwise equal (and close to the unsharded collection trained with SGD)."""
    import torchrec
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from shapejit.torchrec import sharding
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    fused = EmbeddingComputeKernel.FUSED.value
    fused_params = {"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": lr}
    # MEAN: TorchRec 1.8.0 divides table- and column-wise features a second time when a row-wise
    # MEAN table is in the same collection (its mean-pooling callback, meant for the row-wise
    # features, sets the divisor to 1 only for SUM features): TorchRec's kernels and shapejit's
    # agree on that output, the unsharded one does not, so row-wise MEAN tables are checked apart.
    rw = tuple(t for t in TABLES if t[4] == "row_wise")
    others = tuple(t for t in TABLES if t[4] != "row_wise")
    for pooling, weighted, tables in ((torchrec.PoolingType.SUM, False, TABLES),
                                      (torchrec.PoolingType.SUM, True, TABLES),
                                      (torchrec.PoolingType.MEAN, False, others),
                                      (torchrec.PoolingType.MEAN, False, rw)):
        torch.manual_seed(1)
        full = torchrec.EmbeddingBagCollection(tables=table_configs(pooling, tables), is_weighted=weighted)
        full_state = {k: v.detach().clone() for k, v in full.state_dict().items()}
        models = {}
        for label, sharder in (("torchrec", sharding.CpuEmbeddingBagCollectionSharder(fused_params=fused_params)),
                               ("shapejit", sharding.ShapejitEmbeddingBagCollectionSharder(fused_params=fused_params))):
            module = torchrec.EmbeddingBagCollection(tables=table_configs(pooling, tables), is_weighted=weighted,
                                                     device=torch.device("meta"))
            model, plan = plan_and_shard(module, sharder, fused, world, pg, tables)
            copy_into_shards(model.state_dict(), full_state)
            models[label] = model
        kinds = sharding_types_of(plan)
        for name, _, _, _, sharding_type in tables:
            if kinds[name][0] != sharding_type or kinds[name][1] != ("dense" if sharding_type == "data_parallel"
                                                                     else fused):
                raise AssertionError("table {}: planned {}, wanted ({}, {})".format(name, kinds[name], sharding_type,
                                                                                 fused))
        swapped = [m for m in sharding._all_modules(models["shapejit"]) if isinstance(m, sharding.ShapejitFusedTableBags)]
        kept = [m for m in sharding._all_modules(models["torchrec"]) if isinstance(m, sharding.ShapejitFusedTableBags)]
        if not swapped or kept:
            raise AssertionError("shapejit TBEs: {} in the shapejit model, {} in the reference".format(
                len(swapped), len(kept)))
        # data-parallel tables: a replicated parameter (DDP averages its gradient), updated by torch's SGD
        optimizers = {label: torch.optim.SGD([p for n, p in m.named_parameters() if "dp_" in n], lr=lr)
                      for label, m in models.items()} if any(t[4] == "data_parallel" for t in tables) else {}
        gen = torch.Generator().manual_seed(100)
        what = "pooling={} weighted={} {}".format(pooling.name, weighted, sorted(set(t[4] for t in tables)))
        keys = [f for _, _, _, feats, _ in tables for f in feats]
        total_dim = sum(d * len(f) for _, _, d, f, _ in tables)
        sharded_columns = torch.tensor([t[4] != "data_parallel" for t in tables for _ in t[3] for _ in range(t[2])])
        for step in range(steps):
            glob = features(batch * world, gen, weighted, tables)
            mine = local_batch(glob, rank, world)
            target = torch.randn(batch * world, total_dim, generator=gen)
            local_target = target[rank * batch:(rank + 1) * batch]
            outs = {}
            for label, model in models.items():
                if optimizers:
                    optimizers[label].zero_grad()
                out = in_key_order(model(mine), keys)
                outs[label] = out.detach().clone()
                ((out - local_target) ** 2).sum().backward()  # the fused optimizer updates the shards
                if optimizers:
                    optimizers[label].step()
            with torch.no_grad():
                expected = in_key_order(full(glob), keys)[rank * batch:(rank + 1) * batch]
            # data-parallel columns only at step 0: their backward is torch's embedding-bag backward
            # (shapejit.autograd), TorchRec's is fbgemm's dense one, the same products summed in
            # another order; after a step they differ by ulps, and are checked against the unsharded
            compared = sharded_columns if step > 0 else slice(None)
            if not torch.equal(outs["shapejit"][:, compared], outs["torchrec"][:, compared]):
                raise AssertionError("step {} {}: shapejit's sharded forward differs from TorchRec's on the same "
                                     "shards by up to {}".format(step, what,
                                                                 (outs["shapejit"] - outs["torchrec"]).abs().max()))
            diff_full = (outs["shapejit"] - expected).abs().max().item()
            if not torch.allclose(outs["shapejit"], expected, rtol=1e-5, atol=1e-6):
                per_key, begin = {}, 0
                for _, _, dim, feats, _ in tables:
                    for f in feats:
                        per_key[f] = (outs["shapejit"][:, begin:begin + dim] - expected[:, begin:begin + dim]).abs().max().item()
                        begin += dim
                raise AssertionError("step {} {}: the sharded forward differs from the unsharded collection by up to "
                                     "{} (per feature: {})".format(step, what, diff_full, per_key))
            _log(rank, "train step", step, what, "forward: == TorchRec sharded (bitwise);",
                 "vs unsharded:", "bitwise" if diff_full == 0.0 else "max |diff| {:.3g}".format(diff_full))
            # TorchRec's all-to-all divides the gradient by the world size (gradient division, as
            # DDP averages): the unsharded equivalent is the mean of the ranks' losses
            full.zero_grad()
            (((in_key_order(full(glob), keys) - target) ** 2).sum() / world).backward()
            with torch.no_grad():
                for p in full.parameters():
                    p -= lr * p.grad
        ref, got = local_shards(models["torchrec"]), local_shards(models["shapejit"])
        for name in ref:
            for a, b in zip(ref[name], got[name]):
                if not torch.equal(a, b):
                    raise AssertionError("{} after {} steps: shapejit's shard of {} differs from TorchRec's by up to "
                                         "{}".format(what, steps, name, (a - b).abs().max().item()))
        # data-parallel tables against the unsharded collection (both within a few ulps of it)
        worst_dp = worst_dp_torchrec = 0.0
        dp_unchanged = True
        full_now = full.state_dict()
        for name, tensor in models["shapejit"].state_dict().items():
            if "dp_" in name:
                worst_dp = max(worst_dp, (tensor - full_now[name]).abs().max().item())
                theirs = models["torchrec"].state_dict()[name]
                dp_unchanged = dp_unchanged and torch.equal(theirs, full_state[name])
                worst_dp_torchrec = max(worst_dp_torchrec, (theirs - full_now[name]).abs().max().item())
        if worst_dp > 1e-5:
            raise AssertionError("{}: shapejit's data-parallel table differs from the unsharded one by {}".format(
                what, worst_dp))
        worst = 0.0
        full_state = full.state_dict()
        for name, shards in got.items():
            for shard, tensor in zip(models["shapejit"].state_dict()[name].local_shards(), shards):
                r, c = shard.metadata.shard_offsets
                rows, cols = tensor.shape
                worst = max(worst, (tensor - full_state[name][r:r + rows, c:c + cols]).abs().max().item())
        if worst > 1e-5:
            raise AssertionError("{} after {} steps: the sharded weights differ from the unsharded collection trained "
                                 "by SGD by up to {}".format(what, steps, worst))
        dense = [m for m in sharding._all_modules(models["shapejit"]) if isinstance(m, sharding.ShapejitDenseTableBags)]
        if optimizers and (not dense or any(m.served_forwards < steps for m in dense)):
            raise AssertionError("{}: data-parallel lookups: {} shapejit TBEs, forwards {}".format(
                what, len(dense), [m.served_forwards for m in dense]))
        if any(m.served_forwards < steps for m in swapped):
            raise AssertionError("{}: a swapped TBE computed fewer than {} forwards".format(what, steps))
        if sum(m.fallback_forwards for m in swapped):
            raise AssertionError("{}: {} forwards fell back to fbgemm".format(what, sum(m.fallback_forwards
                                                                                     for m in swapped)))
        _log(rank, "train", what, "after", steps, "fused SGD steps: shards == TorchRec's (bitwise);",
             "vs unsharded SGD: max |diff| {:.3g}".format(worst),
             "; data-parallel (DENSE, torch's SGD) vs unsharded: max |diff| {:.3g} (TorchRec's own kernel: {})".format(
                 worst_dp, "unchanged, no gradient" if dp_unchanged else "{:.3g}".format(worst_dp_torchrec))
             if optimizers else "")


# ---- inference ----------------------------------------------------------------------------------

def quantized_model(pooling, dtype, tables, weighted):
    """An unsharded QuantEmbeddingBagCollection (TorchRec's quantize_dynamic recipe) of a float
    collection with random weights, inside a module (TorchRec's sharders shard submodules)."""
    import torchrec
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEmbeddingBagCollection

    class Model(torch.nn.Module):
        def __init__(self, ebc):
            super().__init__()
            self.ebc = ebc

        def forward(self, kjt):
            return self.ebc(kjt)

    model = Model(torchrec.EmbeddingBagCollection(tables=table_configs(pooling, tables), is_weighted=weighted))
    qconfig = torch.ao.quantization.QConfig(
        activation=torch.ao.quantization.PlaceholderObserver.with_args(dtype=torch.float),
        weight=torch.ao.quantization.PlaceholderObserver.with_args(dtype=dtype))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice
        return torch.ao.quantization.quantize_dynamic(
            model, qconfig_spec={torchrec.EmbeddingBagCollection: qconfig},
            mapping={torchrec.EmbeddingBagCollection: QuantEmbeddingBagCollection}, inplace=False)


def copy_quantized_weights(sharded, unsharded, bits):
    """The unsharded QuantEmbeddingBagCollection's rows (fbgemm's IntNBit rows: fp16 scale and bias
    at the head, then the codes, padded) into the sharded model's state_dict tensors: weight
    (codes), weight_qscale and weight_qbias, table-, row- or column-wise shards."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor
    full = unsharded.state_dict()
    state = sharded.state_dict()
    copied = 0
    for name, tensor in state.items():
        if ".embedding_bags." not in name:
            continue
        table_key = name.rsplit(".", 1)[0] + ".weight"
        row = full[table_key]
        row = getattr(row, "elem", row)  # int4 rows come as torch.ao's UInt4Tensor over the bytes
        name_of_table = table_key.split(".")[-2]
        dim = [t[2] for t in TABLES if t[0] == name_of_table][0]
        codes = row[:, 4:4 + dim * bits // 8]
        scale_bias = row[:, :4].contiguous().view(torch.float16)
        source = codes if name.endswith(".weight") else scale_bias[:, :1] if name.endswith("qscale") else scale_bias[:, 1:]
        shards = tensor.local_shards() if isinstance(tensor, ShardedTensor) else None
        if shards is None:
            getattr(tensor, "elem", tensor).copy_(source)
            copied += 1
            continue
        # column shards in column order, each starting where the one before ended, in bytes of
        # codes (TorchRec 1.8.0's inference state_dict gives the second 8-column shard of a
        # 16-column table the column offset 16)
        begin = {}
        for shard in sorted(shards, key=lambda s: tuple(s.metadata.shard_offsets)):
            r = shard.metadata.shard_offsets[0]
            target = getattr(shard.tensor, "elem", shard.tensor)  # the bytes of torchrec's UInt4Tensor
            rows, width = target.shape
            if name.endswith(".weight"):
                c = begin.get(r, 0)
                begin[r] = c + width
                target.copy_(source[r:r + rows, c:c + width])
            else:
                target.copy_(source[r:r + rows])
            copied += 1
    if copied == 0:
        raise AssertionError("no quantized table in the sharded state_dict: {}".format(list(state)))


def check_infer(batch=6):
    """TorchRec's inference sharding (shard_quant_model: one process, the shards of 2 ranks on
    CPU) of a QuantEmbeddingBagCollection, table-, row- and column-wise, int8, int4 and int2: outputs
    with shapejit's lookups bitwise TorchRec's on the same shards and the unsharded collection's."""
    import copy
    import torchrec
    from shapejit.torchrec import sharding
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.global_settings import set_propogate_device
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.inference.modules import shard_quant_model
    # Without it TorchRec 1.8.0 places the inference shards on "cuda:<rank>" whatever the
    # compute device ("AssertionError: Torch not compiled with CUDA enabled" on a CPU build)
    set_propogate_device(True)
    quant = EmbeddingComputeKernel.QUANT.value
    gen = torch.Generator().manual_seed(7)
    for dtype, bits in ((torch.qint8, 8), (torch.quint4x2, 4), (torch.quint2x4, 2)):
        for pooling, weighted in ((torchrec.PoolingType.SUM, False), (torchrec.PoolingType.SUM, True),
                                  (torchrec.PoolingType.MEAN, False)):
            for sharding_type in SHARDING_TYPES_INFER:
                # column-wise: the tables of 2 or more 8-column shards (TorchRec's inference planner
                # gives a table of 8 or fewer columns two shards of its full width)
                # int2: fbgemm's quantizer needs rows of whole fp16 words (dims of 8 or more)
                tables = tuple((n, r, d, f, sharding_type) for n, r, d, f, _ in TABLES
                               if (sharding_type != "column_wise" or d >= 16) and (bits != 2 or d >= 8))
                torch.manual_seed(3)
                unsharded = quantized_model(pooling, dtype, tables, weighted)
                cons = {}
                for name, _, dim, _, _ in tables:
                    extra = {"min_partition": 8} if sharding_type == "column_wise" else {}
                    cons[name] = ParameterConstraints(sharding_types=[sharding_type], compute_kernels=[quant], **extra)
                models = {}
                for label in ("torchrec", "shapejit"):
                    model, plan = shard_quant_model(copy.deepcopy(unsharded), world_size=WORLD_INFER, compute_device="cpu",
                                                 sharding_device="cpu", constraints=cons)
                    if sharding_type != "column_wise":
                        copy_quantized_weights(model, unsharded, bits)
                    models[label] = model
                if sharding_type == "column_wise":
                    # TorchRec 1.8.0 shards a quantized table's padded byte row (16 columns int8:
                    # 4 + 16 bytes padded to 32) into column shards: its output has 32 columns
                    # where the unsharded one has 16. Only the two sharded models are compared
                    # (TorchRec's random initial rows, the same in both: the second is a copy).
                    models["shapejit"].load_state_dict(models["torchrec"].state_dict())
                swapped = sharding.swap_lookups(models["shapejit"])
                served = [m for m in sharding._all_modules(models["shapejit"])
                          if isinstance(m, sharding.ShapejitIntNBitTableBags)]
                if swapped == 0 or len(served) != swapped:
                    raise AssertionError("{} TBEs swapped, {} shapejit TBEs found".format(swapped, len(served)))
                keys = [f for _, _, _, feats, _ in tables for f in feats]
                what = "int{} {} weighted={} {}".format(bits, pooling.name, weighted, sharding_type)
                for _ in range(3):
                    kjt = features(batch, gen, weighted, tables)
                    with torch.no_grad():
                        want = in_key_order(unsharded(kjt), keys)
                        ref = in_key_order(models["torchrec"](kjt), keys)
                        got = in_key_order(models["shapejit"](kjt), keys)
                    if not torch.equal(got, ref):
                        raise AssertionError("{}: shapejit's sharded output differs from TorchRec's on the same "
                                             "shards by up to {}".format(what, (got - ref).abs().max().item()))
                    if sharding_type == "column_wise":
                        diff = "not compared: TorchRec's output has {} columns, the unsharded {}".format(
                            got.size(1), want.size(1))
                        continue
                    if sharding_type == "row_wise" and pooling == torchrec.PoolingType.MEAN:
                        # TorchRec 1.8.0 builds the quantized row-wise lookups without the sharding
                        # type (InferGroupedPooledEmbeddingsLookup -> QuantBatchedEmbeddingBag), so
                        # each shard pools MEAN over its own rows and the shards' outputs are then
                        # summed: not the unsharded mean. Both sharded models agree (checked above).
                        diff = "not compared: TorchRec's row-wise MEAN differs from the unsharded by {:.3g}".format(
                            (got - want).abs().max().item())
                        continue
                    diff = (got - want).abs().max().item()
                    if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                        raise AssertionError("{}: the sharded output differs from the unsharded collection by up to "
                                             "{}".format(what, diff))
                if any(m.served_forwards == 0 for m in served):
                    raise AssertionError("{}: a swapped TBE computed no forward".format(what))
                print("[infer] {}: {} TBEs swapped; == TorchRec sharded (bitwise); vs unsharded: {}".format(
                    what, swapped, diff if isinstance(diff, str) else "bitwise" if diff == 0.0 else
                    "max |diff| {:.3g}".format(diff)), flush=True)


WORLD_INFER = 2
SHARDING_TYPES_INFER = os.environ.get("INFER_TYPES", "table_wise,row_wise,column_wise").split(",")


def main():
    rank, world, port, check = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if check == "infer":  # TorchRec's inference sharding is one process holding every rank's shards
        torch.set_num_threads(1)
        check_infer()
        print("[infer] ok", flush=True)
        return
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        if check == "train":
            check_train(rank, world, dist.GroupMember.WORLD)
        else:
            raise ValueError("check must be one of {}, but is {!r}".format(CHECKS, check))
        dist.barrier()
        _log(rank, "ok")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
