"""shapejit.optimize(model): swaps the supported modules of a DLRM-like model and a small
transformer, reports what it swapped and skipped with reasons, and the outputs stay torch's."""
import warnings

import pytest
import torch

from helpers import replay


class TinyDLRM(torch.nn.Module):
    """Sparse features through bags (float, half and 8/4-bit quantized), a dense MLP, a top MLP."""

    def __init__(self):
        super().__init__()
        self.bags = torch.nn.ModuleList([torch.nn.EmbeddingBag(50, 16, mode="sum"),
                                         torch.nn.EmbeddingBag(30, 16, mode="mean", padding_idx=0),
                                         torch.nn.EmbeddingBag(40, 16, mode="max", include_last_offset=True)])
        self.renormed = torch.nn.EmbeddingBag(20, 16, max_norm=1.0)  # renormalises the rows it reads
        self.hooked = torch.nn.EmbeddingBag(20, 16)  # refused: a forward hook
        self.hooked.register_forward_hook(lambda module, args, out: out * 2)
        self.dense = torch.nn.Linear(4, 16)
        self.top = torch.nn.Sequential(torch.nn.Linear(16 * 5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def forward(self, dense, indices, offsets):
        feats = [self.dense(dense)]
        for bag, idx, off in zip(self.bags, indices, offsets):
            feats.append(bag(idx, off))
        feats.append(self.renormed(indices[0] % 20, offsets[0]) + self.hooked(indices[0] % 20, offsets[0]))
        return self.top(torch.cat(feats, 1))


def dlrm_inputs(gen, batch=6):
    indices, offsets = [], []
    for n, last in ((50, False), (30, False), (40, True)):
        lengths = torch.randint(1, 5, (batch,), generator=gen)
        idx = torch.randint(0, n, (int(lengths.sum()),), generator=gen)
        off = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        indices.append(idx)
        offsets.append(off if last else off[:-1])
    return torch.randn(batch, 4, generator=gen), indices, offsets


def test_dlrm_like_model(sj, seed):
    torch.manual_seed(seed)
    model = TinyDLRM().eval()
    inputs = dlrm_inputs(torch.Generator().manual_seed(seed))
    with torch.no_grad():
        optimized, report = sj.optimize(model)  # a copy: max_norm renormalises each model's own weight
        expected = model(*inputs)
        actual = optimized(*inputs)
    assert optimized is not model and type(model.bags[0]) is torch.nn.EmbeddingBag  # the argument is untouched
    assert [s.name for s in report.swapped] == ["bags.0", "bags.1", "bags.2", "renormed"], replay(str(report))
    assert all(type(b) is sj.EmbeddingBag for b in optimized.bags) and type(optimized.renormed) is sj.EmbeddingBag
    assert [(s.name, "hook" in s.reason) for s in report.skipped] == [("hooked", True)], replay(str(report))
    assert torch.equal(actual, expected), replay("optimized DLRM output differs")
    assert torch.equal(optimized.renormed.weight, model.renormed.weight), replay("renormalised rows differ")
    text = str(report)
    assert "4 swapped, 1 skipped" in text and "hooked" in text and "hook" in text


def test_quantized_bags_and_inplace(sj, seed):
    """torch.ao quantized bags become shapejit.QuantizedEmbeddingBag (exact results); odd-dim
    4-bit bags are refused with the converter's reason; a shared module is converted once."""
    torch.manual_seed(seed)
    qconfig = torch.ao.quantization.float_qparams_weight_only_qconfig
    q8 = torch.ao.nn.quantized.EmbeddingBag.from_float(
        _with_qconfig(torch.nn.EmbeddingBag(30, 8, mode="sum"), qconfig))
    q4_odd = torch.ao.nn.quantized.EmbeddingBag(30, 7, dtype=torch.quint4x2)
    shared = torch.nn.EmbeddingBag(10, 4)
    model = torch.nn.ModuleDict(dict(q8=q8, q4_odd=q4_odd, a=shared, b=shared))
    idx, off = torch.randint(0, 10, (12,)), torch.tensor([0, 3, 7])
    with torch.no_grad():
        expected = q8(idx, off)
        result = sj.optimize(model, inplace=True)
    assert result.model is model
    assert type(model["q8"]) is sj.QuantizedEmbeddingBag and model["a"] is model["b"]
    assert torch.equal(model["q8"](idx, off), expected), replay("quantized bag differs")
    assert [s.name for s in result.report.skipped] == ["q4_odd"] and "odd" in result.report.skipped[0].reason


def _with_qconfig(module, qconfig):
    module.qconfig = qconfig
    return module


class SmallTransformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0, batch_first=True), 2)
        self.cross = torch.nn.MultiheadAttention(16, 2, kdim=8, vdim=8, batch_first=True)
        self.double_attn = torch.nn.MultiheadAttention(16, 2).double()  # refused: float64

    def forward(self, x, memory):
        y = self.encoder(x)
        y = y + self.cross(y, memory, memory, need_weights=False)[0]
        z = self.double_attn(y.double().transpose(0, 1), y.double().transpose(0, 1),
                             y.double().transpose(0, 1))[0]
        return y, z


@pytest.mark.parametrize("train", [False, True])
def test_small_transformer(sj, seed, train):
    torch.manual_seed(seed)
    model = SmallTransformer().train(train)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 3, 8)
    with torch.no_grad():
        expected = model(x, memory)
        optimized, report = sj.optimize(model)
        actual = optimized(x, memory)
    names = [s.name for s in report.swapped]
    attention = ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn", "cross"]
    if train:  # training would round differently from torch's: left alone (test_autograd.py: bags train)
        assert names == [], replay(str(report))
        assert [s.name for s in report.skipped] == attention + ["double_attn"], replay(str(report))
        assert all("training" in s.reason for s in report.skipped), replay(str(report))
        return
    assert names == attention, replay(str(report))
    assert all("fused path" in s.note for s in report.swapped[:2]) and report.swapped[2].note == ""
    assert [s.name for s in report.skipped] == ["double_attn"] and "float64" in report.skipped[0].reason
    for a, e in zip(actual, expected):
        err = (a - e).abs().max().item()
        assert err < 1e-4, replay("optimized transformer differs by {}".format(err))


def test_subclasses_and_hooks_are_left_alone(sj):
    class MyBag(torch.nn.EmbeddingBag):
        pass
    hooked = torch.nn.EmbeddingBag(5, 2)
    hooked.register_forward_hook(lambda m, i, o: o)
    model = torch.nn.Sequential(MyBag(5, 2), hooked, sj.EmbeddingBag(5, 2))
    _, report = sj.optimize(model)
    assert report.swapped == []
    reasons = {s.name: s.reason for s in report.skipped}
    assert "subclass" in reasons["0"] and "hooks" in reasons["1"] and "2" not in reasons
    with pytest.raises(TypeError, match="torch.nn.Module"):
        sj.optimize("model")


def test_model_itself_is_swapped(sj):
    bag = torch.nn.EmbeddingBag(5, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new, report = sj.optimize(bag)
    assert type(new) is sj.EmbeddingBag and report.swapped[0].name == ""


# ---- grouping bag calls (bag_grouping.py) -------------------------------------------------------

def _grouping_possible(sj, model):
    """Whether optimize may group this model's bags (eval mode, or a group with autograd)."""
    return not model.training or sj.bag_grouping.group_supports_autograd()


class DictDLRM(torch.nn.Module):
    """A DLRM-style model: a dict of bags (mixed modes, per_sample_weights, include_last_offset,
    padding_idx, an 8-bit torch.ao bag) whose outputs follow the dense features in one torch.cat."""

    def __init__(self):
        super().__init__()
        qconfig = torch.ao.quantization.float_qparams_weight_only_qconfig
        self.bags = torch.nn.ModuleDict(dict(
            u=torch.nn.EmbeddingBag(50, 8, mode="sum"),
            v=torch.nn.EmbeddingBag(30, 8, mode="mean", padding_idx=3),
            w=torch.nn.EmbeddingBag(40, 4, mode="max", include_last_offset=True),
            p=torch.nn.EmbeddingBag(60, 8, mode="sum"),
            q=torch.ao.nn.quantized.EmbeddingBag.from_float(_with_qconfig(torch.nn.EmbeddingBag(20, 8), qconfig))))
        self.dense = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.top = torch.nn.Linear(8 + 8 + 8 + 4 + 8 + 8, 1)

    def forward(self, dense, idx, off, weights):
        feats = [self.dense(dense)]
        for name in ("u", "v", "w"):
            feats.append(self.bags[name](idx[name], off[name]))
        feats.append(self.bags["p"](idx["p"], off["p"], per_sample_weights=weights))
        feats.append(self.bags["q"](idx["q"], off["q"]))
        return self.top(torch.cat(feats, dim=1))


def dict_dlrm_inputs(gen, batch=5):
    idx, off = {}, {}
    for name, rows in (("u", 50), ("v", 30), ("w", 40), ("p", 60), ("q", 20)):
        lengths = torch.randint(0, 5, (batch,), generator=gen)
        idx[name] = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
        starts = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        off[name] = starts if name == "w" else starts[:-1]
    weights = torch.rand(idx["p"].numel(), generator=gen)
    return torch.randn(batch, 4, generator=gen), idx, off, weights


def test_dlrm_bags_become_one_concatenated_group(sj, seed):
    torch.manual_seed(seed)
    model = DictDLRM().eval()
    inputs = dict_dlrm_inputs(torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = model(*inputs)
        optimized, report = sj.optimize(model)
        actual = optimized(*inputs)
    assert isinstance(optimized, torch.fx.GraphModule) and report.grouping == "", replay(str(report))
    assert [(g.members, g.concat) for g in report.groups] == [
        (("bags.u", "bags.v", "bags.w", "bags.p", "bags.q"), True)], replay(str(report))
    assert torch.equal(actual, expected), replay("grouped DLRM output differs")
    assert "(concatenated in place of their torch.cat run)" in str(report)
    calls = [n for n in optimized.graph.nodes if n.op == "call_module" and n.target.startswith("bags")]
    assert calls == [], replay("a bag still runs alone:\n" + optimized.code)
    cats = [n for n in optimized.graph.nodes if n.target is torch.cat]
    assert len(cats) == 1 and len(cats[0].args[0]) == 2  # the dense features and the group's block
    # The same Parameters, under the keys the report names; copies keep working.
    group = getattr(optimized, report.groups[0].name)
    assert report.renamed_keys["bags.u.weight"] == report.groups[0].name + ".bags.0.weight"
    assert group.bags[0].weight is optimized.get_parameter(report.renamed_keys["bags.u.weight"])
    assert torch.equal(group.bags[3].weight, model.bags["p"].weight)
    import copy
    import pickle
    with torch.no_grad():
        for clone in (copy.deepcopy(optimized), pickle.loads(pickle.dumps(optimized))):
            assert list(clone.state_dict()) == list(optimized.state_dict())
            assert torch.equal(clone(*inputs), expected), replay("a copy of the grouped model differs")


class FloatDLRM(DictDLRM):
    """DictDLRM without its quantized bag (whose state_dict the swap itself changes)."""

    def __init__(self):
        super().__init__()
        del self.bags["q"]
        self.top = torch.nn.Linear(8 + 8 + 8 + 4 + 8, 1)

    def forward(self, dense, idx, off, weights):
        feats = [self.dense(dense)] + [self.bags[k](idx[k], off[k]) for k in ("u", "v", "w")]
        feats.append(self.bags["p"](idx["p"], off["p"], per_sample_weights=weights))
        return self.top(torch.cat(feats, dim=1))


def test_renamed_keys_load_an_old_checkpoint(sj, seed):
    torch.manual_seed(seed)
    model = FloatDLRM().eval()
    optimized, report = sj.optimize(model)
    assert len(report.groups) == 1, replay(str(report))
    checkpoint = {k: v.clone() + 1 for k, v in model.state_dict().items()}
    optimized.load_state_dict({report.renamed_keys.get(k) or k: v for k, v in checkpoint.items()})
    model.load_state_dict(checkpoint)
    inputs = dict_dlrm_inputs(torch.Generator().manual_seed(seed))
    with torch.no_grad():
        assert torch.equal(optimized(*inputs), model(*inputs)), replay("reloaded grouped model differs")


class ReusedOutput(torch.nn.Module):
    """Bag a's output feeds the cat and a product computed before bag b runs; b's input comes
    later (from a dict); a bag called twice; a f16 bag between f32 ones."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.EmbeddingBag(50, 8)
        self.b = torch.nn.EmbeddingBag(30, 8, mode="mean")
        self.f16 = torch.nn.EmbeddingBag(20, 8).half()
        self.c = torch.nn.EmbeddingBag(20, 8, mode="max")

    def forward(self, ia, ib):
        a = self.a(ia)
        twice = a * 2
        b = self.b(ib["b"])
        again = self.b(ib["again"])
        h = self.f16(ib["half"])
        c = self.c(ib["c"])
        return torch.cat([a, b, again], 1) + torch.cat([twice, b, c], 1), h


def test_output_used_twice_is_not_concatenated(sj, seed):
    torch.manual_seed(seed)
    model = ReusedOutput().eval()
    gen = torch.Generator().manual_seed(seed)
    inputs = (torch.randint(0, 50, (4, 3), generator=gen),
              {k: torch.randint(0, 20, (4, 2), generator=gen) for k in ("b", "again", "half", "c")})
    with torch.no_grad():
        expected = model(*inputs)
        optimized, report = sj.optimize(model)
        actual = optimized(*inputs)
    assert [(g.members, g.concat) for g in report.groups] == [(("a", "b", "b", "f16", "c"), False)], replay(str(report))
    assert "a's output is also used outside the torch.cat" in report.groups[0].note
    for x, y in zip(actual, expected):
        assert x.dtype == y.dtype and torch.equal(x, y), replay("grouped outputs differ")


class Chained(torch.nn.Module):
    """Bag b's indices are computed from bag a's output: no group can hold both."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.EmbeddingBag(50, 4)
        self.b = torch.nn.EmbeddingBag(50, 4)

    def forward(self, x):
        a = self.a(x)
        return self.b((a.abs() * 10).long() % 50)


def test_dependent_bags_stay_apart(sj):
    model = Chained().eval()
    x = torch.randint(0, 50, (3, 2))
    with torch.no_grad():
        optimized, report = sj.optimize(model)
        assert torch.equal(optimized(x), model(x))
    assert report.groups == [] and "independent" in report.grouping, replay(str(report))
    assert not isinstance(optimized, torch.fx.GraphModule)


def test_untraceable_model_keeps_per_module_swaps(sj, seed):
    torch.manual_seed(seed)
    model = TinyDLRM().eval()  # zip() over a traced argument: torch.fx cannot trace it
    inputs = dlrm_inputs(torch.Generator().manual_seed(seed))
    with torch.no_grad():
        optimized, report = sj.optimize(model)
        expected = model(*inputs)
        actual = optimized(*inputs)
    assert report.groups == [] and "could not trace" in report.grouping, replay(str(report))
    assert "bags not grouped: torch.fx could not trace" in str(report)
    assert type(optimized) is TinyDLRM and all(type(b) is sj.EmbeddingBag for b in optimized.bags)
    assert torch.equal(actual, expected)


def test_training_mode_groups_only_with_autograd(sj, seed):
    torch.manual_seed(seed)
    model = DictDLRM().train()
    inputs = dict_dlrm_inputs(torch.Generator().manual_seed(seed))
    optimized, report = sj.optimize(model)
    if _grouping_possible(sj, model):
        assert len(report.groups) == 1, replay(str(report))
    else:
        assert report.groups == [] and "training mode" in report.grouping, replay(str(report))
        assert not isinstance(optimized, torch.fx.GraphModule)
    with torch.no_grad():
        assert torch.equal(optimized(*inputs), model(*inputs))


def test_group_bags_false_swaps_only(sj):
    model = DictDLRM().eval()
    optimized, report = sj.optimize(model, group_bags=False)
    assert report.groups == [] and report.grouping == "" and type(optimized) is DictDLRM


class OnlyBags(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = torch.nn.ModuleList([torch.nn.EmbeddingBag(10 + k, 4 * (k + 1)) for k in range(3)])

    def forward(self, x):
        return torch.cat([self.tables[0](x[0]), self.tables[1](x[1]), self.tables[2](x[2])], -1)


def test_cat_of_bags_alone_disappears(sj):
    model = OnlyBags().eval()
    x = torch.randint(0, 10, (3, 6, 2))
    with torch.no_grad():
        optimized, report = sj.optimize(model)
        assert torch.equal(optimized(x), model(x))
    assert [(g.members, g.concat) for g in report.groups] == [(("tables.0", "tables.1", "tables.2"), True)]
    assert not any(n.target is torch.cat for n in optimized.graph.nodes), optimized.code


class WritesInPlace(torch.nn.Module):
    """An input is changed in place between two bag calls: running the first bag later (as a
    group would) would read the changed indices."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.EmbeddingBag(20, 4)
        self.b = torch.nn.EmbeddingBag(20, 4)

    def forward(self, x, y):
        a = self.a(x)
        x.add_(1)
        return torch.cat([a, self.b(y)], 1), self.b(x)


def test_in_place_writes_keep_bags_apart(sj):
    model = WritesInPlace().eval()
    x, y = torch.randint(0, 19, (3, 2)), torch.randint(0, 20, (3, 2))
    with torch.no_grad():
        expected = model(x.clone(), y)
        optimized, report = sj.optimize(model)
        actual = optimized(x.clone(), y)
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))
    assert all("a" not in g.members for g in report.groups), replay(str(report))


def test_one_bag_is_not_traced(sj):
    """Nothing to group: no trace, no note, the swapped model itself."""
    model = torch.nn.ModuleDict(dict(bag=torch.nn.EmbeddingBag(5, 2)))  # no forward: tracing would fail
    optimized, report = sj.optimize(model)
    assert report.grouping == "" and report.groups == [] and type(optimized) is torch.nn.ModuleDict
