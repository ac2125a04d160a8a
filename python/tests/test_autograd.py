"""Gradients through shapejit: embedding bags' (dense and sparse weight gradients,
per_sample_weights) bitwise torch.nn.EmbeddingBag's, fed the same upstream gradient; groups' per
member bag; linear groups' and the in-projection's torch's linear backward; quantized tables
refuse a gradient; a few optimizer steps train bitwise as torch's modules do."""
import random

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same_tensor, replay

MODES = ("sum", "mean", "max")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CASES = 90


def random_bag_case(rng):
    """A random nn.EmbeddingBag configuration and a call of it: every mode, dtype, sparse,
    per_sample_weights, padding_idx (also negative), include_last_offset, scale_grad_by_freq,
    1-D and 2-D input, index and offset dtypes (also mixed), empty bags."""
    mode = rng.choice(MODES)
    n, dim = rng.randint(3, 30), rng.choice((1, 3, 8, 17))
    settings = dict(mode=mode, dtype=rng.choice(DTYPES),
                    sparse=mode != "max" and rng.random() < 0.3,
                    scale_grad_by_freq=mode != "max" and rng.random() < 0.2,
                    padding_idx=rng.choice((None, None, rng.randint(0, n - 1), -rng.randint(1, n))),
                    include_last_offset=False)
    use_psw = mode == "sum" and rng.random() < 0.5
    index_dtype = rng.choice((torch.int64, torch.int32))
    if rng.random() < 0.3:  # 2-D input: bags of fixed length
        inp = torch.randint(0, n, (rng.randint(1, 5), rng.randint(1, 4)), dtype=index_dtype)
        offsets = None
    else:
        count = rng.randint(0, 20)
        inp = torch.randint(0, n, (count,), dtype=index_dtype)
        bags = rng.randint(1, 6)
        offs = sorted([0] + [rng.randint(0, count) for _ in range(bags - 1)])
        settings["include_last_offset"] = rng.random() < 0.4
        if settings["include_last_offset"]:
            offs.append(count)
        offsets = torch.tensor(offs, dtype=rng.choice((index_dtype, torch.int64)))
    psw = torch.randn(inp.shape).to(settings["dtype"]) if use_psw else None
    return n, dim, settings, inp, offsets, psw


def bag_pair(sj, n, dim, settings, gen):
    weight = torch.randn(n, dim, generator=gen).to(settings["dtype"])
    kwargs = {k: v for k, v in settings.items() if k != "dtype"}
    ref = torch.nn.EmbeddingBag(n, dim, _weight=weight.clone(), **kwargs)
    ours = sj.EmbeddingBag.from_torch(torch.nn.EmbeddingBag(n, dim, _weight=weight.clone(), **kwargs))
    return ref, ours


def assert_same_grad(actual, expected, what):
    if expected is None:
        assert actual is None, replay("{}: torch has no gradient, shapejit has one".format(what))
        return
    assert actual is not None, replay("{}: shapejit has no gradient".format(what))
    assert actual.layout == expected.layout, replay("{}: layout {} != {}".format(what, actual.layout,
                                                                                expected.layout))
    if expected.is_sparse:
        assert_same_tensor(actual._indices(), expected._indices(), what + " (sparse indices)")
        assert_same_tensor(actual._values(), expected._values(), what + " (sparse values)")
    else:
        assert_same_tensor(actual, expected, what)


def test_embedding_bag_gradients_equal_torch(sj, seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    compared = unsupported = 0
    for case in range(CASES):
        n, dim, settings, inp, offsets, psw = random_bag_case(rng)
        ref, ours = bag_pair(sj, n, dim, settings, gen)
        what = "case {}: {} input {} offsets {} psw {}".format(case, settings, inp.tolist(),
                                                               None if offsets is None else offsets.tolist(),
                                                               psw is not None)
        psw_ref = None if psw is None else psw.clone().requires_grad_()
        psw_ours = None if psw is None else psw.clone().requires_grad_()
        try:
            out_ref = ref(inp, offsets, psw_ref)
            grad = torch.randn(out_ref.shape, generator=gen).to(out_ref.dtype)
            out_ref.backward(grad)
        except RuntimeError as e:  # a combination torch refuses: shapejit's backward (torch's ops) too
            unsupported += 1
            print("torch refuses {}: {}".format(what, str(e).splitlines()[0]))
            with pytest.raises(RuntimeError):
                ours(inp, offsets, psw_ours).backward(torch.ones(out_ref.shape, dtype=out_ref.dtype))
            continue
        out_ours = ours(inp, offsets, psw_ours)
        assert out_ours.requires_grad, replay(what)
        out_ours.backward(grad)
        if settings["dtype"] == torch.float32 and psw is None:  # (weighted sums may round differently)
            assert_same_tensor(out_ours.detach(), out_ref.detach(), what + " output")
        assert_same_grad(ours.weight.grad, ref.weight.grad, what + " weight.grad")
        if psw is not None:
            assert_same_grad(psw_ours.grad, psw_ref.grad, what + " per_sample_weights.grad")
        compared += 1
    print("embedding-bag gradients compared with torch: {} cases, {} refused by torch".format(compared, unsupported))
    assert compared >= CASES * 2 // 3


def torch_group(bags):
    return [torch.nn.EmbeddingBag(b.num_embeddings, b.embedding_dim, mode=b.mode, sparse=b.sparse,
                                  padding_idx=b.padding_idx, include_last_offset=b.include_last_offset,
                                  _weight=b.weight.detach().clone()) for b in bags]


@pytest.mark.parametrize("concat", [False, True])
def test_group_gradients_per_bag(sj, seed, concat):
    gen = torch.Generator().manual_seed(seed)
    bags = [torch.nn.EmbeddingBag(30, 4, mode="sum"), torch.nn.EmbeddingBag(20, 6, mode="mean", padding_idx=1),
            torch.nn.EmbeddingBag(25, 3, mode="max"), torch.nn.EmbeddingBag(40, 5, mode="sum", sparse=True,
                                                                            include_last_offset=True)]
    refs = torch_group(bags)
    group = sj.EmbeddingBagGroup(bags)
    inputs = [torch.randint(0, 30, (3, 4), generator=gen), torch.randint(0, 20, (9,), generator=gen),
              torch.randint(0, 25, (3, 2), generator=gen), torch.randint(0, 40, (7,), generator=gen)]
    offsets = [None, torch.tensor([0, 2, 2]), None, torch.tensor([0, 3, 3, 7])]
    psw = [torch.randn(3, 4, generator=gen), None, None, torch.randn(7, generator=gen)]
    psw[1] = None
    outs_ref = [r(i, o, p) for r, i, o, p in zip(refs, inputs, offsets, psw)]
    outs = group.concat(inputs, offsets, psw) if concat else group(inputs, offsets, psw)
    ref = torch.cat(outs_ref, dim=1) if concat else outs_ref
    if concat:
        grad = torch.randn(ref.shape, generator=gen)
        ref.backward(grad)
        outs.backward(grad)
    else:
        grads = [torch.randn(o.shape, generator=gen) for o in ref]
        torch.autograd.backward(ref, grads)
        torch.autograd.backward(outs, grads)
    for k, (b, r) in enumerate(zip(group.bags, refs)):
        assert_same_grad(b.weight.grad, r.weight.grad, "bags[{}].weight.grad (concat={})".format(k, concat))


def test_group_per_sample_weight_gradients(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    bags = [torch.nn.EmbeddingBag(30, 4, mode="sum"), torch.nn.EmbeddingBag(20, 6, mode="sum")]
    refs = torch_group(bags)
    group = sj.EmbeddingBagGroup(bags)
    inputs = [torch.randint(0, 30, (6,), generator=gen), torch.randint(0, 20, (2, 3), generator=gen)]
    offsets = [torch.tensor([0, 2, 2]), None]
    psw = [torch.randn(6, generator=gen), torch.randn(2, 3, generator=gen)]
    mine = [p.clone().requires_grad_() for p in psw]
    theirs = [p.clone().requires_grad_() for p in psw]
    outs = group(inputs, offsets, mine)
    refs_out = [r(i, o, p) for r, i, o, p in zip(refs, inputs, offsets, theirs)]
    grads = [torch.randn(o.shape, generator=gen) for o in refs_out]
    torch.autograd.backward(refs_out, grads)
    torch.autograd.backward(outs, grads)
    for k in range(2):
        assert_same_grad(mine[k].grad, theirs[k].grad, "per_sample_weights[{}].grad".format(k))
        assert_same_grad(group.bags[k].weight.grad, refs[k].weight.grad, "bags[{}].weight.grad".format(k))
    with pytest.raises(NotImplementedError, match="every bag needs per_sample_weights"):
        group(inputs, offsets, [mine[0], None])


def test_quantized_tables_are_inference_only(sj):
    packed = sj.quantized.embedding_bag_byte_prepack(torch.randn(10, 4))
    qbag = sj.QuantizedEmbeddingBag(packed, 8)
    out = qbag(torch.tensor([1, 2, 3]), torch.tensor([0, 1]))
    assert not out.requires_grad  # a buffer of codes: nothing to differentiate
    psw = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="inference only"):
        qbag(torch.tensor([1, 2, 3]), torch.tensor([0, 1]), psw)
    out = torch.ops.shapejit.quantized_embedding_bag(packed, 8, torch.tensor([1, 2, 3]), torch.tensor([0, 1]), 0,
                                                     psw)[0]
    with pytest.raises(RuntimeError, match="inference only"):
        out.sum().backward()
    group = sj.EmbeddingBagGroup([torch.nn.EmbeddingBag(10, 4), qbag])
    outs = group([torch.tensor([1, 2]), torch.tensor([1, 2, 3])], [torch.tensor([0]), torch.tensor([0, 1])])
    sum(o.sum() for o in outs).backward()
    assert group.bags[0].weight.grad is not None and group.quantized_bags[0].packed_weight.grad is None


def linear_in_projection_reference(x_q, x_k, x_v, w, b, heads, seq_first):
    """torch.nn.MultiheadAttention's in-projection (_in_projection_packed: one linear when q, k
    and v are one tensor, else one per part) split into heads [Nb, H, L, Dh]."""
    e = w.size(1)
    if x_q is x_k and x_k is x_v:
        parts = F.linear(x_q, w, b).split(e, dim=-1)
    else:
        ws, bs = w.chunk(3), b.chunk(3)
        parts = [F.linear(x, wp, bp) for x, wp, bp in zip((x_q, x_k, x_v), ws, bs)]
    out = []
    for y in parts:
        if seq_first:  # [L, Nb, E] -> [Nb, H, L, Dh]
            out.append(y.reshape(y.size(0), y.size(1), heads, -1).permute(1, 2, 0, 3))
        else:
            out.append(y.reshape(y.size(0), y.size(1), heads, -1).permute(0, 2, 1, 3))
    return out


@pytest.mark.parametrize("self_attention", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_in_projection_backward_is_torch_linear_backward(sj, seed, self_attention, batch_first):
    """The same upstream gradient gives bitwise torch's gradients of inputs, weight and bias."""
    gen = torch.Generator().manual_seed(seed)
    e, heads = 16, 4
    mha = sj.MultiheadAttention(e, heads, batch_first=batch_first)
    w = mha.in_proj_weight.detach().clone().requires_grad_()
    b = (torch.randn(3 * e, generator=gen)).requires_grad_()
    with torch.no_grad():
        mha.in_proj_bias.copy_(b)
    shape = (5, 3, e) if not batch_first else (3, 5, e)
    xs = [torch.randn(shape, generator=gen)] * 3 if self_attention else [torch.randn(shape, generator=gen)
                                                                         for _ in range(3)]
    mine = [x.clone().requires_grad_() for x in xs]
    theirs = [x.clone().requires_grad_() for x in xs]
    if self_attention:
        mine, theirs = [mine[0]] * 3, [theirs[0]] * 3
    outs = torch.ops.shapejit.linear_group_run_current(mha._group, [mha.in_proj_weight], mha.in_proj_bias, mine)
    refs = linear_in_projection_reference(*theirs, w, b, heads, not batch_first)
    grads = [torch.randn(r.shape, generator=gen) for r in refs]
    torch.autograd.backward(outs, grads)
    torch.autograd.backward(refs, grads)
    what = "self_attention={} batch_first={}".format(self_attention, batch_first)
    assert_same_tensor(mha.in_proj_weight.grad, w.grad, what + ": in_proj_weight.grad")
    assert_same_tensor(mha.in_proj_bias.grad, b.grad, what + ": in_proj_bias.grad")
    for k in range(1 if self_attention else 3):
        assert_same_tensor(mine[k].grad, theirs[k].grad, what + ": input {} grad".format(k))


def test_multihead_attention_gradients_near_torch(sj, seed):
    """The whole module against torch's: the forward rounds differently (the split-GEMM bound),
    so gradients agree to rounding."""
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    ours = sj.MultiheadAttention.from_torch(torch.nn.MultiheadAttention(16, 4, batch_first=True))
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(2, 5, 16)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ref, _ = ref(xa, xa, xa)
    out, _ = ours(xb, xb, xb)
    grad = torch.randn(out_ref.shape)
    out_ref.backward(grad)
    out.backward(grad)
    pairs = [("input", xb.grad, xa.grad)] + [(name, p.grad, dict(ref.named_parameters())[name].grad)
                                            for name, p in ours.named_parameters()]
    for name, got, expected in pairs:
        err = (got - expected).abs().max().item()
        assert err < 1e-4 * (1 + expected.abs().max().item()), replay("{}.grad differs by {}".format(name, err))


def test_in_projection_object_passes_input_gradients(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    mha = torch.nn.MultiheadAttention(8, 2)
    proj = sj.in_projection(mha)
    x = torch.randn(4, 2, 8, generator=gen, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    q, k, v = proj(x, x, x)
    refs = linear_in_projection_reference(xr, xr, xr, mha.in_proj_weight.detach(), mha.in_proj_bias.detach(), 2,
                                          True)
    grads = [torch.randn(r.shape, generator=gen) for r in refs]
    torch.autograd.backward([q, k, v], grads)
    torch.autograd.backward(refs, grads)
    assert_same_tensor(x.grad, xr.grad, "InProjection input grad")


class BagModel(torch.nn.Module):
    """Embedding bags of every mode (one sparse) under a linear layer."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.EmbeddingBag(50, 8, mode="sum")
        self.b = torch.nn.EmbeddingBag(40, 8, mode="mean", padding_idx=0)
        self.c = torch.nn.EmbeddingBag(30, 8, mode="max")
        self.d = torch.nn.EmbeddingBag(60, 8, mode="sum", sparse=True)
        self.top = torch.nn.Linear(32, 1)

    def forward(self, xa, xb, xc, xd, offsets, psw):
        return self.top(torch.cat([self.a(xa, offsets, psw), self.b(xb, offsets), self.c(xc, offsets),
                                   self.d(xd, offsets)], dim=1))


def test_optimized_model_trains_bitwise_as_torch(sj, seed):
    """optimize() of a training model: the same SGD steps give bitwise the same weights."""
    torch.manual_seed(seed)
    model = BagModel().train()
    optimized, report = sj.optimize(model)
    assert len(report.swapped) == 4, replay(str(report))
    gen = torch.Generator().manual_seed(seed)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, optimized)]
    for step in range(4):
        offsets = torch.tensor([0, 3, 3, 7, 10])
        args = [torch.randint(0, n, (12,), generator=gen) for n in (50, 40, 30, 60)]
        psw = torch.rand(12, generator=gen)
        target = torch.randn(5, 1, generator=gen)
        for m, opt in zip((model, optimized), opts):
            opt.zero_grad()
            F.mse_loss(m(*args, offsets, psw), target).backward()
            opt.step()
    # optimize groups the four bags (they have autograd): their parameters move to the group's keys
    assert report.groups, replay("the bags were not grouped: " + str(report))
    trained = optimized.state_dict()
    for name, p in model.state_dict().items():
        key = report.renamed_keys.get(name, name)
        assert key in trained, replay("{} has no counterpart in the optimized model ({})".format(name, key))
        assert_same_tensor(trained[key], p, "after 4 SGD steps: " + name)
