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
        self.renormed = torch.nn.EmbeddingBag(20, 16, max_norm=1.0)  # refused: max_norm
        self.dense = torch.nn.Linear(4, 16)
        self.top = torch.nn.Sequential(torch.nn.Linear(16 * 5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def forward(self, dense, indices, offsets):
        feats = [self.dense(dense)]
        for bag, idx, off in zip(self.bags, indices, offsets):
            feats.append(bag(idx, off))
        feats.append(self.renormed(indices[0] % 20, offsets[0]))
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
        optimized, report = sj.optimize(model)  # first: max_norm renormalises the weight it runs on
        expected = model(*inputs)
        actual = optimized(*inputs)
    assert optimized is not model and type(model.bags[0]) is torch.nn.EmbeddingBag  # the argument is untouched
    assert [s.name for s in report.swapped] == ["bags.0", "bags.1", "bags.2"], replay(str(report))
    assert all(type(b) is sj.EmbeddingBag for b in optimized.bags)
    assert [(s.name, "max_norm" in s.reason) for s in report.skipped] == [("renormed", True)], replay(str(report))
    assert torch.equal(actual, expected), replay("optimized DLRM output differs")
    text = str(report)
    assert "3 swapped, 1 skipped" in text and "renormed" in text and "max_norm" in text


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
