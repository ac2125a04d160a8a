"""shapejit.in_projection(mha) against nn.MultiheadAttention's own in-projection, and the general
torch.classes.shapejit.LinearGroup against float64 references, with the acceptance rule of
split-gemm-semantics.md: |y - ref| <= 2 K 2^-24 (sum |x w| + |b|) + ulp(ref)."""
import math
import random

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same_tensor, heads, linear_reference, replay, ulp


def assert_within(actual, ref, bound, what):
    """actual (float32) is within bound of ref (float64), element by element."""
    assert actual.dtype == torch.float32, replay("{}: dtype {}".format(what, actual.dtype))
    assert actual.shape == ref.shape, replay("{}: shape {} != {}".format(what, tuple(actual.shape),
                                                                        tuple(ref.shape)))
    err = (actual.double() - ref).abs()
    bad = ~(err <= bound)
    if bad.any():
        at = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(replay("{}: {} of {} elements outside the bound; first at {}: got {}, reference {}, "
                                    "bound {}".format(what, int(bad.sum()), bad.numel(), at, actual[at].item(),
                                                      ref[at].item(), bound[at].item())))


def mha_in_projection(mha, query, key, value):
    """q, k, v exactly as nn.MultiheadAttention computes them, as [Nb, H, L, Dh]."""
    if mha.batch_first:
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    e, h = mha.embed_dim, mha.num_heads
    if mha._qkv_same_embed_dim:
        q, k, v = F._in_projection_packed(query, key, value, mha.in_proj_weight, mha.in_proj_bias)
    else:
        b = mha.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        q, k, v = F._in_projection(query, key, value, mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight,
                                   bq, bk, bv)
    nb = query.shape[1]
    return tuple(t.contiguous().view(t.shape[0], nb * h, e // h).transpose(0, 1).reshape(nb, h, t.shape[0], e // h)
                 for t in (q, k, v))


def random_mha(g, seed):
    e_heads = g.choice([(8, 1), (8, 2), (16, 4), (64, 8), (96, 4), (48, 3)])
    kwargs = dict(embed_dim=e_heads[0], num_heads=e_heads[1], bias=g.random() < 0.8, batch_first=g.random() < 0.5)
    if g.random() < 0.3:
        kwargs["kdim"], kwargs["vdim"] = g.choice([5, 16, 40]), g.choice([3, 16, 33])
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(**kwargs)
    if mha.in_proj_bias is not None:  # MHA initialises the bias to zero: make it count
        with torch.no_grad():
            mha.in_proj_bias.normal_()
    return mha, kwargs


def attention_inputs(g, gen, mha, kwargs):
    """(query, key, value, form): self-attention (one tensor), cross (shared key/value) or distinct."""
    nb, seq_q, seq_kv = g.choice([1, 2, 3]), g.choice([1, 4, 7]), g.choice([1, 5, 9])
    shape = (lambda seq, width: (nb, seq, width)) if mha.batch_first else (lambda seq, width: (seq, nb, width))
    e, kdim, vdim = mha.embed_dim, mha.kdim, mha.vdim
    query = torch.randn(shape(seq_q, e), generator=gen)
    if kdim == e and vdim == e and g.random() < 0.4:
        return query, query, query, "self"
    if kdim == vdim and g.random() < 0.5:
        memory = torch.randn(shape(seq_kv, kdim), generator=gen)
        return query, memory, memory, "cross"
    return (query, torch.randn(shape(seq_kv, kdim), generator=gen), torch.randn(shape(seq_kv, vdim), generator=gen),
            "distinct")


def check_projection(sj, mha, kwargs, query, key, value, form, scale_query=False):
    what = "mha {} form {} q {} k {}".format(kwargs, form, tuple(query.shape), tuple(key.shape))
    proj = sj.in_projection(mha, scale_query=scale_query)
    with torch.no_grad():
        q, k, v = proj(query, key, value)
        torch_qkv = mha_in_projection(mha, query, key, value)
    e, h = mha.embed_dim, mha.num_heads
    if mha._qkv_same_embed_dim:
        weights = mha.in_proj_weight.detach().chunk(3)
    else:
        weights = (mha.q_proj_weight.detach(), mha.k_proj_weight.detach(), mha.v_proj_weight.detach())
    biases = (None,) * 3 if mha.in_proj_bias is None else mha.in_proj_bias.detach().chunk(3)
    for name, ours, theirs, x, w, b in zip("qkv", (q, k, v), torch_qkv, (query, key, value), weights, biases):
        seq = x.shape[1] if mha.batch_first else x.shape[0]
        nb = x.shape[0] if mha.batch_first else x.shape[1]
        ref, bound = linear_reference(x.reshape(-1, x.shape[-1]), w, b)
        ref, bound = heads(ref, nb, seq, h, mha.batch_first), heads(bound, nb, seq, h, mha.batch_first)
        assert ours.is_contiguous() and ours.shape == (nb, h, seq, e // h), replay(what + " " + name)
        if scale_query and name == "q":
            s = 1.0 / math.sqrt(e // h)
            ref, bound = ref * float(torch.tensor(s, dtype=torch.float32)), bound * s + ulp((ref * s).float())
            assert_within(ours, ref, bound, what + " scaled q")
            continue
        assert_within(ours, ref, bound, what + " " + name)
        assert_within(theirs, ref, bound, what + " torch's own " + name)  # the bound is fair to torch too


def test_in_projection_matches_multihead_attention(sj, seed):
    g = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    forms = set()
    for _ in range(80):
        mha, kwargs = random_mha(g, g.randrange(1 << 30))
        query, key, value, form = attention_inputs(g, gen, mha, kwargs)
        forms.add((form, mha.batch_first, mha._qkv_same_embed_dim, mha.in_proj_bias is not None))
        check_projection(sj, mha, kwargs, query, key, value, form)
    assert len(forms) >= 10, replay("too few forms covered: {}".format(sorted(forms)))


@pytest.mark.parametrize("batch_first", [False, True])
def test_in_projection_with_folded_query_scale(sj, seed, batch_first):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(64, 8, batch_first=batch_first)
    x = torch.randn(3, 5, 64)
    check_projection(sj, mha, {"scaled": True}, x, x, x, "self", scale_query=True)


def test_in_projection_of_unbatched_inputs(sj, seed):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(32, 4)
    x, mem = torch.randn(6, 32), torch.randn(9, 32)
    q, k, v = sj.in_projection(mha)(x, mem, mem)
    assert q.shape == (4, 6, 8) and k.shape == (4, 9, 8) and v.shape == (4, 9, 8)
    q3, k3, _ = sj.in_projection(mha)(x.unsqueeze(1), mem.unsqueeze(1), mem.unsqueeze(1))
    assert torch.equal(q, q3[0]) and torch.equal(k, k3[0])


def test_in_projection_at_transformer_sizes(sj, seed):
    """A BERT-base-sized self-attention block (E 768, 12 heads, 128 tokens): the parallel path."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(768, 12, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    x = torch.randn(2, 64, 768)
    check_projection(sj, mha, {"E": 768}, x, x, x, "self")


ACTIVATIONS = {
    "none": lambda y: y, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"), "silu": F.silu,
}


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_linear_group_epilogues_row_major(sj, seed, activation):
    """Separate weights with different K, packed bias, activation then scale, row-major outputs of
    any leading shape; checked against float64 with the bound (plus the epilogue's roundings)."""
    gen = torch.Generator().manual_seed(seed)
    w0, w1 = torch.randn(24, 5, generator=gen), torch.randn(17, 33, generator=gen)
    bias = torch.randn(41, generator=gen)
    scales = [0.5, 1.0] if activation != "none" else [3.0, -0.25]
    group = sj.linear_group([w0, w1], bias, activations=[activation, activation], scales=scales)
    assert group.num_parts() == 2
    x0, x1 = torch.randn(2, 3, 5, generator=gen), torch.randn(7, 33, generator=gen)
    y0, y1 = group.run([x0, x1])
    assert y0.shape == (2, 3, 24) and y1.shape == (7, 17)
    assert [t.tolist() for t in sj.linear_group_run(group, [x0, x1])] == [y0.tolist(), y1.tolist()]
    for y, x, w, b, s, name in ((y0, x0, w0, bias[:24], scales[0], "part 0"), (y1, x1, w1, bias[24:], scales[1],
                                                                               "part 1")):
        ref, bound = linear_reference(x.reshape(-1, x.shape[-1]), w, b)
        act = ACTIVATIONS[activation](ref.float().double())  # the kernel rounds before the activation
        # The activation may grow an input error by up to ~1.13 (gelu's slope); SLEEF adds 1 ulp.
        act_bound = 1.2 * bound + 2 * ulp(act.float()) if activation != "none" else bound
        expected, tol = act * s, act_bound * abs(s) + ulp((act * s).float())
        assert_within(y.reshape(-1, y.shape[-1]), expected, tol, "{} {}".format(activation, name))


def test_linear_group_packed_row_ranges_without_bias(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(50, 20, generator=gen)
    group = sj.linear_group([w], None, rows=[10, 30, 7])  # rows 47..49 belong to no part
    x = torch.randn(9, 20, generator=gen)
    outs = group.run([x, x, x])
    for y, (begin, end) in zip(outs, ((0, 10), (10, 40), (40, 47))):
        ref, bound = linear_reference(x, w[begin:end], None)
        assert_within(y, ref, bound, "packed rows {}..{}".format(begin, end))


def test_linear_group_errors(sj):
    w = torch.randn(8, 4)
    group = sj.linear_group([w], None, rows=[4, 4])
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="inputs"):
        group.run([x])
    with pytest.raises(RuntimeError, match="K = 4"):
        group.run([x, torch.randn(3, 5)])
    with pytest.raises(RuntimeError, match="float32"):
        group.run([x, x.double()])
    with pytest.raises(RuntimeError, match="layouts"):
        sj.linear_group([w], None, rows=[4, 4], layouts=["row_major", "columns"])
    with pytest.raises(RuntimeError, match="rows"):  # more rows than the weight has
        sj.linear_group([w], None, rows=[4, 5])
    with pytest.raises(RuntimeError, match="heads"):  # 3 heads do not divide 4 rows
        sj.linear_group([w], None, rows=[4, 4], layouts=["heads_seq_first"] * 2, heads=[3, 1])
    head_group = sj.linear_group([w], None, rows=[4, 4], layouts=["heads_seq_first"] * 2, heads=[2, 2])
    with pytest.raises(RuntimeError, match="3-D"):
        head_group.run([x, x])


def test_outputs_equal_for_strided_inputs(sj, seed):
    """A strided input (rows farther apart, or a transposed view) gives the same bits as its copy."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(12, 16, generator=gen)
    group = sj.linear_group([w], torch.randn(12, generator=gen), rows=[12])
    wide = torch.randn(10, 40, generator=gen)
    for x in (wide[:, 3:19], torch.randn(16, 10, generator=gen).t()):
        (y,) = group.run([x])
        (y_dense,) = group.run([x.contiguous()])
        assert_same_tensor(y, y_dense, "strided input {}".format(tuple(x.stride())))
