"""torch.compile and torch.export through every shapejit module: no graph break at a shapejit op
(torch._dynamo.explain), dynamic batch sizes without recompiling, results equal to eager (and
the gradients of a compiled training step); every op's fake kernel agrees with its CPU kernel
(torch.library.opcheck: schema, fake tensors, autograd registration, AOT dispatch).

Inductor compiles take 10-30 s each on a small machine, so one model holds every bag module and
one the attention modules; each is compiled once."""
import random
import time

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch.export import Dim

from helpers import assert_same_tensor, replay


def assert_same_outputs(actual, expected, what, tolerance=None):
    assert len(actual) == len(expected), replay(what)
    for k, (a, e) in enumerate(zip(actual, expected)):
        if tolerance is None:
            assert_same_tensor(a, e, "{}: output {}".format(what, k))
        else:
            err = (a - e).abs().max().item()
            assert err <= tolerance, replay("{}: output {} differs by {}".format(what, k, err))


class BagModel(torch.nn.Module):
    """Every bag module: f32 sum with per_sample_weights, f16 mean, bf16 max with padding_idx
    and include_last_offset, a group (float and quantized members) called both ways, and a
    QuantizedEmbeddingBag."""

    def __init__(self, sj):
        super().__init__()
        self.sum_bag = sj.EmbeddingBag(50, 8, mode="sum")
        self.mean_bag = sj.EmbeddingBag(40, 6, mode="mean", dtype=torch.float16)
        self.max_bag = sj.EmbeddingBag(30, 4, mode="max", padding_idx=2, include_last_offset=True,
                                       dtype=torch.bfloat16)
        qbag = sj.QuantizedEmbeddingBag.from_float(torch.nn.EmbeddingBag(20, 8), bits=4)
        self.group = sj.EmbeddingBagGroup([torch.nn.EmbeddingBag(60, 8, mode="mean"), qbag,
                                           torch.nn.EmbeddingBag(25, 8, mode="max")])
        self.qbag = sj.QuantizedEmbeddingBag.from_float(torch.nn.EmbeddingBag(35, 8), bits=8)

    def forward(self, idx, offsets, psw, fixed, last_offsets):
        a = self.sum_bag(idx, offsets, psw)
        b = self.mean_bag(idx % 40, offsets)
        c = self.max_bag(idx % 30, last_offsets)
        members = [idx % 60, fixed % 20, fixed % 25]
        listed = self.group(members, [offsets, None, None])
        concat = self.group.concat(members, [offsets, None, None])
        q = self.qbag(fixed % 35)
        return a, b, c, listed[0], listed[1], listed[2], concat, q


def bag_inputs(gen, batch):
    n = 3 * batch + 1
    idx = torch.randint(0, 50, (n,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64),
                         torch.sort(torch.randint(0, n + 1, (batch - 1,), generator=gen)).values])
    psw = torch.randn(n, generator=gen)
    fixed = torch.randint(0, 1000, (batch, 3), generator=gen)
    last_offsets = torch.cat([offsets, torch.tensor([n])])
    return idx, offsets, psw, fixed, last_offsets


class AttentionModel(torch.nn.Module):
    """shapejit.MultiheadAttention (self- and cross-attention) and an InProjection."""

    def __init__(self, sj):
        super().__init__()
        self.attn = sj.MultiheadAttention(16, 4, batch_first=True)
        self.cross = sj.MultiheadAttention(16, 2, kdim=8, vdim=8)
        self.proj = sj.in_projection(torch.nn.MultiheadAttention(16, 4))

    def forward(self, x, memory):
        y, _ = self.attn(x, x, x, need_weights=False)
        seq_first = y.transpose(0, 1)
        z, weights = self.cross(seq_first, memory, memory)
        q, k, v = self.proj(seq_first, seq_first, seq_first)
        return y, z, weights, q, k, v


def attention_inputs(gen, batch):
    return torch.randn(batch, 5, 16, generator=gen), torch.randn(3, batch, 8, generator=gen)


def explain(model, args):
    torch._dynamo.reset()
    return torch._dynamo.explain(model)(*args)


def report_explain(name, ex):
    print("{}: dynamo explain graph_count={} graph_break_count={}".format(name, ex.graph_count,
                                                                          ex.graph_break_count))
    for reason in ex.break_reasons:
        print("  break:", reason.reason)


def assert_no_shapejit_break(name, ex):
    report_explain(name, ex)
    reasons = " ".join(str(r.reason) for r in ex.break_reasons)
    assert "shapejit" not in reasons, replay("{}: graph break at a shapejit op: {}".format(name, reasons))
    assert ex.graph_break_count == 0 and ex.graph_count == 1, replay("{}: {} graphs, breaks: {}".format(
        name, ex.graph_count, reasons))


def compiled_runs(model, make_inputs, batches, what, tolerance=None, grad=False):
    """Compiles `model` once (inductor, dynamic shapes) and checks each batch size against eager;
    returns the number of frames dynamo compiled."""
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(model, backend=counter, dynamic=True)
    gen = torch.Generator().manual_seed(1)
    for batch in batches:
        args = make_inputs(gen, batch)
        with torch.set_grad_enabled(grad):
            expected = model(*args)
            actual = compiled(*args)
        assert_same_outputs([t.detach() for t in actual], [t.detach() for t in expected],
                            "{} batch {}".format(what, batch), tolerance)
    return counter.frame_count


def test_bag_modules_compile_without_breaks_and_match_eager(sj):
    start = time.time()
    model = BagModel(sj).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        assert_no_shapejit_break("bag modules (inference)", explain(model, bag_inputs(gen, 4)))
        frames = compiled_runs(model, bag_inputs, (4, 7, 9), "compiled bag modules")
    assert frames == 1, replay("dynamic batch sizes recompiled: {} frames".format(frames))
    print("bag modules: compile + 3 batch sizes in {:.1f} s".format(time.time() - start))


def test_bag_modules_train_compiled_like_eager(sj):
    """A compiled training step: forward through the gradient ops, backward through torch's
    embedding-bag backward; the weights' gradients equal eager's bit for bit."""
    start = time.time()
    torch.manual_seed(0)
    eager = BagModel(sj)
    model = BagModel(sj)
    model.load_state_dict(eager.state_dict())
    gen = torch.Generator().manual_seed(0)
    args = bag_inputs(gen, 5)
    assert_no_shapejit_break("bag modules (training)", explain(model, args))
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=True)
    for m in (eager, compiled):
        outs = m(*args)
        sum(o.float().sum() * (k + 1) for k, o in enumerate(outs) if o.requires_grad).backward()
    grads = 0
    for (name, p), (_, q) in zip(eager.named_parameters(), model.named_parameters()):
        assert p.grad is not None, replay(name)
        assert_same_tensor(q.grad, p.grad, "compiled training step: {}.grad".format(name))
        grads += 1
    assert grads == 5
    print("bag modules training step: compile + run in {:.1f} s".format(time.time() - start))


def test_attention_modules_compile_without_breaks_and_match_eager(sj):
    start = time.time()
    torch.manual_seed(0)
    model = AttentionModel(sj).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        assert_no_shapejit_break("attention modules", explain(model, attention_inputs(gen, 2)))
        frames = compiled_runs(model, attention_inputs, (2, 3), "compiled attention", tolerance=1e-5)
    assert frames == 1, replay("dynamic batch sizes recompiled: {} frames".format(frames))
    print("attention modules: compile + 2 batch sizes in {:.1f} s".format(time.time() - start))


def test_attention_modules_train_compiled_like_eager(sj):
    """A training step through AOTAutograd (fake kernels, the linear-group backward traced;
    backend aot_eager: inductor's code generation is the inference test's): gradients equal
    eager's to rounding (the traced graph may fuse torch ops differently)."""
    torch.manual_seed(0)
    eager = AttentionModel(sj).train()
    model = AttentionModel(sj).train()
    model.load_state_dict(eager.state_dict())
    model.proj = eager.proj  # not a module: its copied weights are not in the state_dict
    gen = torch.Generator().manual_seed(0)
    args = attention_inputs(gen, 3)
    assert_no_shapejit_break("attention modules (training)", explain(model, args))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", dynamic=True)
    for m in (eager, compiled):
        y, z, _, q, k, v = m(*[a.clone().requires_grad_() for a in args])
        (y.sum() + 2 * z.sum() + (q * k).sum() + v.sum()).backward()
    for (name, p), (_, c) in zip(eager.named_parameters(), model.named_parameters()):
        assert p.grad is not None and c.grad is not None, replay(name)
        err = (c.grad - p.grad).abs().max().item()
        assert err <= 1e-5 * (1 + p.grad.abs().max().item()), replay("{}.grad differs by {}".format(name, err))


def test_export_bag_modules(sj):
    model = BagModel(sj).eval()
    gen = torch.Generator().manual_seed(0)
    args = bag_inputs(gen, 4)
    batch, n = Dim("batch", min=2, max=1000), Dim("n", min=2, max=10000)
    dynamic = ({0: n}, {0: batch}, {0: n}, {0: batch}, {0: batch + 1})
    with torch.no_grad():
        exported = torch.export.export(model, args, dynamic_shapes=dynamic)
        ops = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
        assert any("shapejit" in o for o in ops), replay(str(ops))
        for size in (4, 6):
            other = bag_inputs(gen, size)
            assert_same_outputs(exported.module()(*other), model(*other), "exported bag modules batch {}".format(size))


def test_export_attention_modules(sj):
    torch.manual_seed(0)
    model = AttentionModel(sj).eval()
    gen = torch.Generator().manual_seed(0)
    args = attention_inputs(gen, 2)
    with torch.no_grad():
        exported = torch.export.export(model, args)
        assert_same_outputs(exported.module()(*args), model(*args), "exported attention modules")


def opcheck_cases(sj, seed):
    """(op, args) covering every shapejit tensor op."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(20, 5, generator=gen, requires_grad=True)
    idx = torch.randint(0, 20, (9,), generator=gen)
    offs = torch.tensor([0, 2, 2, 7])
    last = torch.tensor([0, 2, 2, 7, 9])  # include_last_offset: the last offset closes the last bag
    psw = torch.randn(9, generator=gen, requires_grad=True)
    packed8 = sj.quantized.embedding_bag_byte_prepack(torch.randn(20, 8, generator=gen))
    packed4 = sj.quantized.embedding_bag_4bit_prepack(torch.randn(20, 8, generator=gen))
    ops = torch.ops.shapejit
    cases = []
    for mode in (0, 1, 2):
        pad = rng.choice((None, 3))
        cases.append((ops.embedding_bag.default, (w, idx, offs, False, mode, False, psw if mode == 0 else None,
                                                  False, pad)))
        # The output-only ops have no gradient (the modules call the full ops then).
        cases.append((ops.embedding_bag_output.default, (w.detach(), idx, last, mode, None, True, pad)))
        cases.append((ops.embedding_bag.default, (w, idx.view(3, 3), None, False, mode, False, None, False, None)))
        cases.append((ops.quantized_embedding_bag.default, (packed8, 8, idx, offs, mode, None, pad, False, None,
                                                            True, None, None)))
        cases.append((ops.quantized_embedding_bag_output.default, (packed4, 4, idx, last, mode, None, None, True,
                                                                   None, False, torch.float16, None)))
    group_args = ([w, packed8, w.detach()], [0, 8, 0], [idx, idx, torch.randint(0, 20, (4, 2), generator=gen)], [offs, last, None], [0, 2, 1],
                  [psw, None, None], [False, True, False], [None, 1, None], [None, None, None])
    no_grad_args = ([w.detach(), packed8, w.detach()], ) + group_args[1:5] + ([psw.detach(), None, None],) + \
        group_args[6:]
    cases.append((ops.table_bags_output.default, no_grad_args))
    cases.append((ops.table_bags_concat_output.default, no_grad_args))
    cases.append((ops.table_bags.default, group_args + ([False] * 3, [False] * 3)))
    cases.append((ops.table_bags_concat.default, group_args + ([], [])))
    cases.append((ops.embedding_bags_output.default, ([w, w], [idx, idx], [offs, offs], [0, 2], [None, None],
                                                      [False, False], [None, None])))
    cases.append((ops.rowwise_prepack.default, (torch.randn(6, 8, generator=gen), 4)))
    cases.append((ops.rowwise_unpack.default, (packed8, 8)))
    mha = sj.MultiheadAttention(8, 2)
    x = torch.randn(4, 2, 8, generator=gen, requires_grad=True)
    cases.append((ops.linear_group_run_current.default, (mha._group, [mha.in_proj_weight], mha.in_proj_bias,
                                                         [x, x, x])))
    lin = sj.linear_group([torch.randn(6, 8, generator=gen), torch.randn(3, 8, generator=gen)])
    cases.append((ops.linear_group_run.default, (lin, [x, x.detach()])))
    return cases


def test_opcheck_every_op(sj, seed):
    """torch.library.opcheck: the schema, the fake kernel against the CPU kernel (shapes, dtypes,
    strides), the autograd registration, and AOT dispatch with dynamic shapes."""
    checked = set()
    for op, args in opcheck_cases(sj, seed):
        tests = ("test_schema", "test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")
        if "linear_group" in str(op):  # script-object arguments: opcheck's schema test cannot copy them
            tests = ("test_faketensor", "test_autograd_registration")
        torch.library.opcheck(op, args, test_utils=tests)
        checked.add(str(op))
    print("opcheck: {} ops: {}".format(len(checked), sorted(checked)))
    assert len(checked) == 13


@pytest.mark.parametrize("offsets,rule", [([0, 3, 2], "non-decreasing"), ([1, 2, 3], "offsets\\[0\\] must be 0"),
                                          ([0, 2, 9], "must not exceed")])
def test_compiled_quantized_calls_check_offsets(sj, offsets, rule):
    """Under torch.compile the rowwise offsets rules run as traced asserts (no graph break): a bad
    offsets tensor still raises naming the rule, and a good one gives eager's result."""
    packed = sj.quantized.embedding_bag_byte_prepack(torch.randn(10, 8))
    indices = torch.tensor([1, 2, 3, 4, 5, 6])

    def lookup(off):
        return sj.quantized.embedding_bag_byte_rowwise_offsets(packed, indices, off)

    compiled = torch.compile(lookup, backend="eager", fullgraph=True)
    good = torch.tensor([0, 2, 6])
    assert_same_tensor(compiled(good), lookup(good), "compiled rowwise lookup")
    with pytest.raises(RuntimeError, match=rule):
        compiled(torch.tensor(offsets))
