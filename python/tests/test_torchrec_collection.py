"""shapejit.torchrec.EmbeddingBagCollection against TorchRec 1.8.0 itself: random collections
(tables, features per table, shared feature names, SUM/MEAN, weighted, f32/fp16 float tables,
int8/int4/int2/fp16/fp32 QuantEBC tables, float/half/bfloat16 output, empty bags, batch 1, int32/int64
indices) compared bit for bit; gradients of float tables against TorchRec's EBC; variable-batch
KJTs; shapejit.optimize on TorchRec's DLRM; bad inputs. Skipped when torchrec is not installed."""
import random
import sys

import pytest
import torch

from helpers import assert_same_tensor, replay

torchrec = pytest.importorskip(
    "torchrec", reason="torchrec is not importable (pip install torchrec==1.8.0 --no-deps, README 'TorchRec')",
    exc_type=ImportError)

from torch.ao.quantization import PlaceholderObserver  # noqa: E402
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, PoolingType, QuantConfig  # noqa: E402
from torchrec.modules.embedding_modules import EmbeddingBagCollection as TorchRecEBC  # noqa: E402
from torchrec.quant.embedding_modules import EmbeddingBagCollection as TorchRecQuantEBC  # noqa: E402
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor  # noqa: E402

import shapejit  # noqa: E402
import shapejit.torchrec as sjt  # noqa: E402

_WEIGHT_DTYPES = {DataType.INT8: torch.qint8, DataType.INT4: torch.quint4x2, DataType.INT2: torch.quint2x4,
                  DataType.FP16: torch.float16, DataType.FP32: torch.float32}


def _random_collection(rng: random.Random, quantized: bool):
    """A random configuration: (tables, is_weighted, per-table data types, output dtype, description)."""
    n_tables = rng.randint(1, 4)
    weighted = rng.random() < 0.4
    tables, types = [], {}
    names_used = []
    for t in range(n_tables):
        count = rng.randint(1, 3)
        features = []
        for _ in range(count):
            if names_used and rng.random() < 0.2:  # a feature another table reads too ("f@table" keys)
                name = rng.choice(names_used)
                if name in features:
                    continue
            else:
                name = "f{}".format(len(names_used))
                names_used.append(name)
            features.append(name)
        # float collections: weights need SUM (torch refuses them with mean) and f32 tables
        pooling = PoolingType.SUM if (weighted and not quantized) else rng.choice([PoolingType.SUM, PoolingType.MEAN])
        if quantized:
            dtype = rng.choice([DataType.INT8, DataType.INT4, DataType.INT2, DataType.FP16, DataType.FP32])
        else:
            dtype = DataType.FP32 if weighted else rng.choice([DataType.FP32, DataType.FP32, DataType.FP16])
        # fbgemm_gpu wants whole, even byte counts of codes: D % 8 for int2, D % 4 for int4, even for int8
        dim = rng.choice({DataType.INT2: [8, 16, 64], DataType.INT4: [4, 12, 64]}.get(dtype, [2, 6, 10, 16, 64]))
        tables.append(EmbeddingBagConfig(name="t{}".format(t), embedding_dim=dim, num_embeddings=rng.randint(1, 300),
                                         feature_names=features, pooling=pooling, data_type=dtype))
        types["t{}".format(t)] = dtype
    output = rng.choice([torch.float32, torch.float16, torch.bfloat16]) if quantized else torch.float32
    desc = "tables={} weighted={} output={}".format(
        [(c.name, c.embedding_dim, c.num_embeddings, c.feature_names, c.pooling.name, c.data_type.name)
         for c in tables], weighted, output)
    return tables, weighted, types, output, desc


def _random_kjt(rng: random.Random, gen: torch.Generator, tables, weighted: bool):
    """A KJT over the tables' features in shuffled order plus an unused key, indices within every
    table reading each key, some empty bags, batch 1 now and then."""
    rows = {}
    for c in tables:
        for f in c.feature_names:
            rows[f] = min(rows.get(f, c.num_embeddings), c.num_embeddings)
    keys = list(rows) + ["unused"]
    rows["unused"] = 1000
    rng.shuffle(keys)
    batch = 1 if rng.random() < 0.25 else rng.randint(2, 7)
    index_dtype = rng.choice([torch.int32, torch.int64])
    lengths_dtype = index_dtype if rng.random() < 0.7 else rng.choice([torch.int32, torch.int64])
    lengths = torch.randint(0, 6, (len(keys) * batch,), generator=gen)
    lengths[torch.rand(lengths.shape, generator=gen) < 0.2] = 0
    values = torch.cat([torch.randint(0, rows[k], (int(n),), generator=gen)
                        for k_i, k in enumerate(keys) for n in lengths[k_i * batch:(k_i + 1) * batch]]
                       + [torch.zeros(0, dtype=torch.int64)])
    w = torch.rand(values.numel(), generator=gen) if weighted else None
    kjt = KeyedJaggedTensor(keys=keys, values=values.to(index_dtype), lengths=lengths.to(lengths_dtype), weights=w)
    return kjt, "keys={} batch={} values {} lengths {}".format(keys, batch, index_dtype, lengths_dtype)


def _quantize(ebc, types, output):
    ebc.qconfig = QuantConfig(activation=PlaceholderObserver.with_args(dtype=output),
                              weight=PlaceholderObserver.with_args(dtype=torch.qint8),
                              per_table_weight_dtype={name: _WEIGHT_DTYPES[t] for name, t in types.items()})
    return TorchRecQuantEBC.from_float(ebc)


def _assert_same_keyed(actual, expected, what):
    assert actual.keys() == expected.keys(), replay("{}: keys {} != {}".format(what, actual.keys(), expected.keys()))
    assert actual.length_per_key() == expected.length_per_key(), replay("{}: length_per_key".format(what))
    assert_same_tensor(actual.values(), expected.values(), what)


@pytest.mark.parametrize("quantized", [False, True], ids=["float", "quantized"])
def test_random_collections_bitwise(seed, quantized):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    for case in range(12):
        tables, weighted, types, output, desc = _random_collection(rng, quantized)
        ebc = TorchRecEBC(tables=tables, is_weighted=weighted)
        if quantized:
            ebc = _quantize(ebc, types, output)
        ours = sjt.EmbeddingBagCollection.from_torchrec(ebc)
        for _ in range(3):
            kjt, kdesc = _random_kjt(rng, gen, tables, weighted)
            what = "seed {} case {}: {} {}".format(seed, case, desc, kdesc)
            with torch.no_grad():
                _assert_same_keyed(ours(kjt), ebc(kjt), what)


def test_float_weights_are_shared_and_state_dict_loads():
    tables = [EmbeddingBagConfig(name="t0", embedding_dim=8, num_embeddings=10, feature_names=["a", "b"]),
              EmbeddingBagConfig(name="t1", embedding_dim=16, num_embeddings=7, feature_names=["c"])]
    ebc = TorchRecEBC(tables=tables)
    ours = sjt.EmbeddingBagCollection.from_torchrec(ebc)
    assert ours.state_dict().keys() == ebc.state_dict().keys()
    for key, t in ebc.state_dict().items():
        assert ours.state_dict()[key].data_ptr() == t.data_ptr(), key  # shared, not copied
    other = TorchRecEBC(tables=tables)
    ours.load_state_dict(other.state_dict())
    assert torch.equal(ebc.embedding_bags["t0"].weight, other.embedding_bags["t0"].weight)


def test_quantized_collection_loads_torchrec_state_dict(seed):
    """A QuantEBC's state_dict (fbgemm_gpu's rows) loads into the collection made from another
    QuantEBC of the same tables, which then computes what the first one does."""
    torch.manual_seed(seed)
    types = {"t0": DataType.INT8, "t1": DataType.INT4, "t2": DataType.INT2, "t3": DataType.FP16, "t4": DataType.FP32}
    tables = [EmbeddingBagConfig(name=name, embedding_dim=16, num_embeddings=30, feature_names=["f" + name])
              for name in types]
    source = _quantize(TorchRecEBC(tables=tables), types, torch.float32)
    ours = sjt.EmbeddingBagCollection.from_torchrec(_quantize(TorchRecEBC(tables=tables), types, torch.float32))
    ours.load_state_dict(source.state_dict())
    kjt, kdesc = _random_kjt(random.Random(seed), torch.Generator().manual_seed(seed), tables, False)
    _assert_same_keyed(ours(kjt), source(kjt), "after loading a QuantEBC state_dict: " + kdesc)
    again = sjt.EmbeddingBagCollection.from_torchrec(_quantize(TorchRecEBC(tables=tables), types, torch.float32))
    again.load_state_dict(ours.state_dict())  # its own keys
    _assert_same_keyed(again(kjt), source(kjt), "after loading its own state_dict: " + kdesc)


def test_gradients_equal_torchrec(seed):
    """Float tables (shared by up to three features, SUM and MEAN, weighted or not): the weights'
    gradients (and the KJT weights') are TorchRec's, bit for bit."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    for case in range(4):
        weighted = case % 2 == 1
        pooling = PoolingType.SUM if weighted else rng.choice([PoolingType.SUM, PoolingType.MEAN])
        tables = [EmbeddingBagConfig(name="t0", embedding_dim=16, num_embeddings=40, feature_names=["a", "b", "c"],
                                     pooling=pooling),
                  EmbeddingBagConfig(name="t1", embedding_dim=8, num_embeddings=30, feature_names=["d"])]
        ebc = TorchRecEBC(tables=tables, is_weighted=weighted)
        twin = TorchRecEBC(tables=tables, is_weighted=weighted)
        twin.load_state_dict(ebc.state_dict())
        ours = sjt.EmbeddingBagCollection.from_torchrec(twin)
        kjt, kdesc = _random_kjt(rng, gen, tables, weighted)
        what = "seed {} case {} pooling {} weighted {} {}".format(seed, case, pooling.name, weighted, kdesc)
        grad_out = None
        results = []
        for model in (ebc, ours):
            w = kjt.weights_or_none()
            if w is not None:
                w = w.detach().clone().requires_grad_()
            k = KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values(), lengths=kjt.lengths(), weights=w)
            out = model(k).values()
            if grad_out is None:
                grad_out = torch.randn(out.shape, generator=gen)
            (out * grad_out).sum().backward()
            results.append((out.detach(), {n: b.weight.grad for n, b in model.embedding_bags.items()}, w))
        (e_out, e_grads, e_w), (a_out, a_grads, a_w) = results
        assert_same_tensor(a_out, e_out, what + ": output")
        for name in e_grads:
            assert_same_tensor(a_grads[name], e_grads[name], what + ": grad of " + name)
        if weighted:
            assert_same_tensor(a_w.grad, e_w.grad, what + ": grad of the KJT weights")


def test_variable_batch_kjt():
    """A KJT with a batch size per key and inverse_indices (TorchRec's VBE), as TorchRec's float
    collection takes it; the quantized collection refuses it as TorchRec's cannot compute it."""
    torch.manual_seed(1)
    tables = [EmbeddingBagConfig(name="t0", embedding_dim=8, num_embeddings=20, feature_names=["a", "b"]),
              EmbeddingBagConfig(name="t1", embedding_dim=16, num_embeddings=20, feature_names=["c"],
                                 pooling=PoolingType.MEAN)]
    ebc = TorchRecEBC(tables=tables)
    ours = sjt.EmbeddingBagCollection.from_torchrec(ebc)
    keys = ["c", "a", "b"]
    strides = [3, 1, 2]
    lengths = torch.tensor([2, 0, 3, 1, 4, 2])
    values = torch.randint(0, 20, (int(lengths.sum()),))
    inverse = torch.tensor([[0, 1, 2, 2], [0, 0, 0, 0], [1, 0, 1, 0]])
    kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, stride_per_key_per_rank=[[s] for s in strides],
                            inverse_indices=(keys, inverse))
    _assert_same_keyed(ours(kjt), ebc(kjt), "variable-batch KJT")
    twin = TorchRecEBC(tables=tables)
    twin.load_state_dict(ebc.state_dict())
    twin_ours = sjt.EmbeddingBagCollection.from_torchrec(twin)
    grad_out = torch.randn(4, 32)
    for model in (ebc, twin_ours):
        (model(kjt).values() * grad_out).sum().backward()
    for name in ("t0", "t1"):
        assert_same_tensor(twin.embedding_bags[name].weight.grad, ebc.embedding_bags[name].weight.grad,
                           "variable-batch KJT: grad of " + name)
    no_inverse = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths,
                                   stride_per_key_per_rank=[[s] for s in strides])
    with pytest.raises(ValueError, match="without inverse_indices"):
        ours(no_inverse)


def test_errors_name_the_argument():
    tables = [EmbeddingBagConfig(name="t0", embedding_dim=8, num_embeddings=10, feature_names=["a"]),
              EmbeddingBagConfig(name="t1", embedding_dim=8, num_embeddings=5, feature_names=["b"])]
    ebc = TorchRecEBC(tables=tables, is_weighted=True)
    ours = sjt.EmbeddingBagCollection.from_torchrec(ebc)
    before = {k: v.clone() for k, v in ebc.state_dict().items()}
    missing = KeyedJaggedTensor(keys=["a", "x"], values=torch.tensor([1, 2]), lengths=torch.tensor([1, 1]),
                                weights=torch.ones(2))
    with pytest.raises(ValueError, match=r"features has no key 'b', which table 't1' reads"):
        ours(missing)
    unweighted = KeyedJaggedTensor(keys=["a", "b"], values=torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"is_weighted=True.*weights_or_none\(\) is None"):
        ours(unweighted)
    out_of_range = KeyedJaggedTensor(keys=["a", "b"], values=torch.tensor([1, 7]), lengths=torch.tensor([1, 1]),
                                     weights=torch.ones(2))
    with pytest.raises(RuntimeError, match=r"bags\[1\] is feature 'b' of table 't1'"):
        ours(out_of_range)
    floats = KeyedJaggedTensor(keys=["a", "b"], values=torch.tensor([1.0, 2.0]), lengths=torch.tensor([1, 1]),
                               weights=torch.ones(2))
    with pytest.raises(ValueError, match=r"features.values\(\) must be int32 or int64"):
        ours(floats)
    with pytest.raises(TypeError, match="features must be a torchrec KeyedJaggedTensor"):
        ours(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="module must be a torchrec"):
        sjt.EmbeddingBagCollection.from_torchrec(torch.nn.EmbeddingBag(3, 4))
    for k, v in ebc.state_dict().items():
        assert torch.equal(v, before[k]), k  # the failed calls wrote nothing


def _dlrm(seed, quantized):
    from torchrec.models.dlrm import DLRM
    torch.manual_seed(seed)
    tables = [EmbeddingBagConfig(name="t{}".format(i), embedding_dim=8, num_embeddings=50 + 10 * i,
                                 feature_names=["f{}".format(i)]) for i in range(3)]
    ebc = TorchRecEBC(tables=tables)
    if quantized:
        ebc = _quantize(ebc, {c.name: DataType.INT4 for c in tables}, torch.float32)
    return DLRM(embedding_bag_collection=ebc, dense_in_features=4, dense_arch_layer_sizes=[16, 8],
                over_arch_layer_sizes=[8, 1]).eval()


@pytest.mark.parametrize("quantized", [False, True], ids=["float", "quantized"])
def test_optimize_swaps_the_collection_in_dlrm(seed, quantized):
    model = _dlrm(seed, quantized)
    fast, report = shapejit.optimize(model)
    swapped = [s for s in report.swapped if s.name == "sparse_arch.embedding_bag_collection"]
    assert swapped and swapped[0].now == "EmbeddingBagCollection", str(report)
    assert isinstance(fast.sparse_arch.embedding_bag_collection, sjt.EmbeddingBagCollection), str(report)
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (3 * 5,), generator=gen)
    kjt = KeyedJaggedTensor(keys=["f0", "f1", "f2"], values=torch.randint(0, 50, (int(lengths.sum()),), generator=gen),
                            lengths=lengths)
    dense = torch.randn(5, 4, generator=gen)
    with torch.no_grad():
        assert_same_tensor(fast.sparse_arch(kjt), model.sparse_arch(kjt), "sparse arch output")
        assert_same_tensor(fast(dense, kjt), model(dense, kjt), "DLRM output")


def test_dlrm_trains_like_torchrec(seed):
    """Three SGD steps of TorchRec's DLRM (train mode) and of its optimize()d copy leave every
    parameter with the same bits."""
    import copy
    model = _dlrm(seed, False).train()
    twin = copy.deepcopy(model)
    fast, report = shapejit.optimize(twin, inplace=True)
    assert isinstance(fast.sparse_arch.embedding_bag_collection, sjt.EmbeddingBagCollection), str(report)
    gen = torch.Generator().manual_seed(seed)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, fast)]
    for step in range(3):
        lengths = torch.randint(0, 4, (3 * 6,), generator=gen)
        kjt = KeyedJaggedTensor(keys=["f0", "f1", "f2"], lengths=lengths,
                                values=torch.randint(0, 50, (int(lengths.sum()),), generator=gen))
        dense = torch.randn(6, 4, generator=gen)
        target = torch.rand(6, 1, generator=gen)
        for m, opt in zip((model, fast), optimizers):
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(m(dense, kjt), target).backward()
            opt.step()
    ours = dict(fast.named_parameters())
    for name, p in model.named_parameters():
        assert_same_tensor(ours[name].detach(), p.detach(), "seed {}: {} after 3 SGD steps".format(seed, name))


def test_fp16_and_mixed_tables_gradients(seed):
    """fp16 tables beside f32 ones (TorchRec returns their outputs as float32): gradients are
    TorchRec's, in each table's dtype."""
    torch.manual_seed(seed)
    tables = [EmbeddingBagConfig(name="h", embedding_dim=8, num_embeddings=20, feature_names=["a", "b"],
                                 data_type=DataType.FP16),
              EmbeddingBagConfig(name="s", embedding_dim=16, num_embeddings=20, feature_names=["c"],
                                 pooling=PoolingType.MEAN)]
    ebc = TorchRecEBC(tables=tables)
    twin = TorchRecEBC(tables=tables)
    twin.load_state_dict(ebc.state_dict())
    ours = sjt.EmbeddingBagCollection.from_torchrec(twin)
    kjt, kdesc = _random_kjt(random.Random(seed), torch.Generator().manual_seed(seed), tables, False)
    grad_out = None
    for model in (ebc, ours):
        out = model(kjt).values()
        grad_out = torch.randn(out.shape) if grad_out is None else grad_out
        (out * grad_out).sum().backward()
    for name in ("h", "s"):
        assert_same_tensor(ours.embedding_bags[name].weight.grad, ebc.embedding_bags[name].weight.grad,
                           "seed {} {}: grad of {}".format(seed, kdesc, name))


def test_shapejit_import_does_not_import_torchrec():
    import subprocess
    code = "import sys, shapejit; print('torchrec' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_missing_torchrec_says_how_to_install():
    import subprocess
    code = ("import sys; sys.modules['torchrec'] = None\n"  # an import of torchrec now raises ImportError
            "try:\n    import shapejit.torchrec\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install torchrec==1.8.0 --no-deps" in out.stdout, out.stdout + out.stderr
