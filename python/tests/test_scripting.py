"""torch.jit.script and torch.jit.trace of shapejit.EmbeddingBag and shapejit.MultiheadAttention,
and torch.jit.save/load round trips: the same results as the eager module, and a loaded module
still follows parameter changes (the LinearGroup is saved through its def_pickle)."""
import io
import warnings

import pytest
import torch

from helpers import replay


def save_load(module):
    buf = io.BytesIO()
    torch.jit.save(module, buf)
    buf.seek(0)
    return torch.jit.load(buf)


def assert_same(actual, expected, what):
    if isinstance(expected, tuple):
        assert len(actual) == len(expected), replay(what)
        for a, e in zip(actual, expected):
            assert_same(a, e, what)
        return
    if expected is None:
        assert actual is None, replay(what + ": expected None")
        return
    assert torch.equal(actual, expected), replay("{}: differs from the eager module".format(what))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(sj, seed, mode):
    gen = torch.Generator().manual_seed(seed)
    bag = sj.EmbeddingBag(40, 8, mode=mode, padding_idx=3, _weight=torch.randn(40, 8, generator=gen))
    bag.weight.requires_grad_(False)
    idx2 = torch.randint(0, 40, (5, 3), generator=gen)
    idx1, offsets = torch.randint(0, 40, (9,), generator=gen), torch.tensor([0, 2, 2, 7])
    psw = torch.randn(9, generator=gen) if mode == "sum" else None
    scripted = torch.jit.script(bag)
    traced = torch.jit.trace(bag, (idx1, offsets))
    for name, m in (("script", scripted), ("script+load", save_load(scripted)), ("trace", traced),
                    ("trace+load", save_load(traced))):
        assert_same(m(idx1, offsets), bag(idx1, offsets), "{} {} 1-D".format(name, mode))
        if name.startswith("script"):  # a trace is specialised to the call it saw
            assert_same(m(idx2), bag(idx2), "{} {} 2-D".format(name, mode))
            if psw is not None:
                assert_same(m(idx1, offsets, psw), bag(idx1, offsets, psw), "{} weighted".format(name))
    with pytest.raises(Exception, match="offsets"):  # the argument rules are compiled too
        scripted(idx1)


@pytest.mark.parametrize("bits", [8, 4, 2])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_quantized_embedding_bag(sj, seed, bits, mode):
    # What shapejit.optimize makes of a torch.ao quantized bag must script and trace as well.
    gen = torch.Generator().manual_seed(seed)
    float_bag = torch.nn.EmbeddingBag.from_pretrained(torch.randn(40, 16, generator=gen), mode=mode)
    bag = sj.QuantizedEmbeddingBag.from_float(float_bag, bits=bits)
    idx1, offsets = torch.randint(0, 40, (9,), generator=gen), torch.tensor([0, 2, 2, 7])
    idx2 = torch.randint(0, 40, (5, 3), generator=gen)
    scripted = torch.jit.script(bag)
    traced = torch.jit.trace(bag, (idx1, offsets))
    for name, m in (("script", scripted), ("script+load", save_load(scripted)), ("trace", traced),
                    ("trace+load", save_load(traced))):
        assert_same(m(idx1, offsets), bag(idx1, offsets), "{} q{} {} 1-D".format(name, bits, mode))
        if name.startswith("script"):
            assert_same(m(idx2), bag(idx2), "{} q{} {} 2-D".format(name, bits, mode))


def test_scripted_embedding_bag_renormalises_as_torch(sj, seed):
    weight = torch.randn(10, 3, generator=torch.Generator().manual_seed(seed)) * 4
    ref = torch.nn.EmbeddingBag.from_pretrained(weight.clone(), max_norm=1.0, mode="mean")
    scripted = torch.jit.script(sj.EmbeddingBag.from_pretrained(weight.clone(), max_norm=1.0, mode="mean"))
    for inp in (torch.tensor([[1, 2], [2, 7]]), torch.tensor([[0, 9], [4, 4]])):
        assert torch.equal(scripted(inp), ref(inp))
        assert torch.equal(scripted.weight, ref.weight)
    assert not torch.equal(scripted.weight, weight)  # rows were renormalised


class WithMasks(torch.nn.Module):
    """Calls attention with both masks and need_weights=True, for torch.jit.trace."""

    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    def forward(self, query, key, value, key_padding_mask, attn_mask):
        return self.attention(query, key, value, key_padding_mask, True, attn_mask)


@pytest.mark.parametrize("kwargs", [dict(), dict(batch_first=True, add_bias_kv=True, add_zero_attn=True),
                                    dict(kdim=5, vdim=7, bias=False)], ids=["default", "bias_kv", "kdim"])
def test_multihead_attention(sj, seed, kwargs):
    torch.manual_seed(seed)
    ours = sj.MultiheadAttention(16, 4, **kwargs).eval()
    if ours.in_proj_bias is not None:
        with torch.no_grad():
            ours.in_proj_bias.normal_()
    shape = (lambda seq: (2, seq)) if kwargs.get("batch_first") else (lambda seq: (seq, 2))
    q = torch.randn(*shape(3), 16)
    k, v = torch.randn(*shape(5), kwargs.get("kdim", 16)), torch.randn(*shape(5), kwargs.get("vdim", 16))
    kpm = torch.tensor([[False, True, False, False, False], [False, False, False, True, True]])
    mask = torch.randn(3, 5)
    with torch.no_grad():
        expected = ours(q, k, v, kpm, True, mask)
        scripted = torch.jit.script(ours)
        traced = torch.jit.trace(WithMasks(ours), (q, k, v, kpm, mask))  # trace takes tensor arguments only
        for name, m in (("script", scripted), ("script+load", save_load(scripted))):
            assert_same(m(q, k, v, kpm, True, mask), expected, "{} {}".format(name, kwargs))
        for name, m in (("trace", traced), ("trace+load", save_load(traced))):
            assert_same(m(q, k, v, kpm, mask), expected, "{} {}".format(name, kwargs))
        for name, m in (("script", scripted), ("script+load", save_load(scripted))):  # other arguments
            assert_same(m(q, k, v, None, False, None), ours(q, k, v, None, False, None), name + " no masks")
            assert_same(m(q[:, 0] if not kwargs.get("batch_first") else q[0],
                          k[:, 0] if not kwargs.get("batch_first") else k[0],
                          v[:, 0] if not kwargs.get("batch_first") else v[0]),
                        ours(q[:, 0] if not kwargs.get("batch_first") else q[0],
                             k[:, 0] if not kwargs.get("batch_first") else k[0],
                             v[:, 0] if not kwargs.get("batch_first") else v[0]), name + " unbatched")


def test_loaded_module_follows_parameter_changes(sj, seed):
    """After torch.jit.load, an in-place change or load_state_dict reaches the group (repacked)."""
    torch.manual_seed(seed)
    ours = sj.MultiheadAttention(16, 4).eval()
    x = torch.randn(3, 2, 16)
    loaded = save_load(torch.jit.script(ours))
    other = sj.MultiheadAttention(16, 4).eval()
    with torch.no_grad():
        loaded.in_proj_weight.mul_(3)
        ours.in_proj_weight.mul_(3)
        assert_same(loaded(x, x, x), ours(x, x, x), "loaded, after an in-place change")
        loaded.load_state_dict(other.state_dict())
        assert_same(loaded(x, x, x), other(x, x, x), "loaded, after load_state_dict")


def test_scripted_transformer_layer_with_swapped_attention(sj, seed):
    """A TransformerEncoderLayer whose self_attn is shapejit's scripts and runs (training mode:
    the layer's unfused path, which calls the module)."""
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0).train()
    layer.self_attn = sj.MultiheadAttention.from_torch(layer.self_attn)
    x = torch.randn(5, 2, 16)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = layer(x)
        scripted = torch.jit.script(layer)
        assert_same(scripted(x), expected, "scripted TransformerEncoderLayer")
