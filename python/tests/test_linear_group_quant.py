"""Quantized linear groups from Python (docs/quantized-linear-semantics.md): quantize_linear_weights
against the rules written out in torch, qd8 outputs bitwise against the rules emulated in torch
(activation none), every form against float32 F.linear within the quantization bound (the error
printed), side by side with torch's dynamic quantized Linear, MultiheadAttention and
in_projection with quant=..., the autograd rule (inputs' gradient through codes * scale),
pickling, torch.compile and torch.export."""
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers import assert_same_tensor, replay

FORMS = ["qd8-qc8w", "qd8-qc4w", "f32-qc8w", "f32-qc4w"]


def rules_quantize_weights(w, quant):
    """The weight rule in torch's float32 arithmetic (torch.round: half to even)."""
    top, bottom = (7.0, -8.0) if quant.endswith("qc4w") else (127.0, -127.0)
    s = w.abs().amax(dim=1) / top
    safe = torch.where(s == 0, torch.ones_like(s), s)
    codes = torch.clamp(torch.round(w / safe[:, None]), bottom, top)
    codes = torch.where(s[:, None] == 0, torch.zeros_like(codes), codes)
    return codes.to(torch.int8), s


def rules_quantize_inputs(x):
    """The qd8 input rule per row, each step in float32: (q - z) as float and the scales."""
    lo = torch.clamp(x.amin(dim=1), max=0.0)
    hi = torch.clamp(x.amax(dim=1), min=0.0)
    scale = (hi - lo) / 255.0
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    z = torch.clamp(torch.round(-128.0 - lo / scale), -128, 127)
    q = torch.clamp(torch.round(x / scale[:, None]) + z[:, None], -128, 127)
    return q, z, scale


def rules_qd8_linear(x, codes, s, b):
    """pre = f32(f32(f32(acc) * f32(scale * s)) + b) with the exact int64 accumulator."""
    q, z, scale = rules_quantize_inputs(x)
    acc = (q.to(torch.int64) - z.to(torch.int64)[:, None]) @ codes.to(torch.int64).t()
    pre = acc.to(torch.float32) * (scale[:, None] * s[None, :])
    return pre + b if b is not None else pre


def quantization_bound(x, w, s, quant):
    """e_x sum|W| + e_w sum|X| + K e_x e_w per output, plus float32 rounding room (the doc's bound)."""
    k = x.size(1)
    e_w = (s / 2).double()
    if quant.startswith("qd8"):
        _, _, scale = rules_quantize_inputs(x)
        e_x = (scale / 2).double()
    else:
        e_x = torch.zeros(x.size(0), dtype=torch.float64)
    xa, wa = x.double().abs(), w.double().abs()
    bound = e_x[:, None] * wa.sum(1)[None, :] + e_w[None, :] * xa.sum(1)[:, None] + k * e_x[:, None] * e_w[None, :]
    rounding = 2 * (k + 2) * 2.0 ** -24 * (xa @ wa.t() + bound)
    return bound * (1 + 2.0 ** -10) + rounding + 1e-30


@pytest.mark.parametrize("quant", FORMS)
def test_quantize_linear_weights_follows_the_rule(sj, seed, quant):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(37, 29, generator=gen) * torch.rand(37, 1, generator=gen) * 3
    w[3] = 0.0
    w[5, :2] = torch.tensor([7.0, 3.5])
    w[5, 2:] = 0.0
    codes, scales = sj.quantize_linear_weights(w, quant)
    want_codes, want_scales = rules_quantize_weights(w, quant)
    assert codes.dtype == torch.int8 and scales.dtype == torch.float32
    assert_same_tensor(scales, want_scales, "scales")
    assert_same_tensor(codes, want_codes, "codes")
    with pytest.raises(RuntimeError, match="not finite"):
        sj.quantize_linear_weights(torch.tensor([[1.0, float("nan")]]), quant)
    with pytest.raises(RuntimeError, match="quant must be"):
        sj.quantize_linear_weights(w, "int8")


@pytest.mark.parametrize("quant", FORMS)
def test_forms_against_f32_linear_and_torch_dynamic(sj, seed, quant):
    """Every output within the quantization bound of F.linear in float32; qd8 outputs bitwise the
    rules emulated in torch. The largest errors, ours and torch's dynamic quantized Linear's
    (qint8 per tensor, reduce_range), are printed side by side."""
    gen = torch.Generator().manual_seed(seed)
    k, n = 131, 77
    w = torch.randn(n, k, generator=gen) * 0.1
    b = torch.randn(n, generator=gen)
    x = torch.randn(45, k, generator=gen) * 2
    x[7] = 0.0
    x[9] = x[9].abs()
    group = sj.linear_group([w], b, rows=[n], quant=quant)
    (y,) = group.run([x])
    exact = F.linear(x.double(), w.double(), b.double())
    codes, s = sj.quantize_linear_weights(w, quant)
    if quant.startswith("qd8"):
        assert_same_tensor(y, rules_qd8_linear(x, codes, s, b), "qd8 output against the rules")
    bound = quantization_bound(x, w, s, quant)
    err = (y.double() - exact).abs()
    assert bool((err <= bound).all()), replay("{}: error {} beyond bound".format(quant, float((err / bound).max())))
    print("{}: max |error| against f32 F.linear {:.3e} (at most {:.2f} of the bound)".format(
        quant, float(err.max()), float((err / bound).max())))
    if quant == "qd8-qc8w":
        lin = torch.nn.Linear(k, n)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dq = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear},
                                                        dtype=torch.qint8)
        theirs = dq(x)
        print("error against f32 (max |error|): shapejit qd8-qc8w {:.3e}, torch dynamic quantized Linear "
              "{:.3e}".format(float(err.max()), float((theirs.double() - exact).abs().max())))


@pytest.mark.parametrize("quant", ["qd8-qc4w", "f32-qc8w"])
def test_given_codes_and_pickling(sj, seed, quant):
    """Codes + scales give the same group as quantizing the f32 weights; both pickle."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(24, 9, generator=gen)
    b = torch.randn(24, generator=gen)
    codes, scales = sj.quantize_linear_weights(w, quant)
    from_f32 = sj.linear_group([w], b, rows=[8, 16], layouts=["row_major", "heads_seq_first"], heads=[1, 4],
                               scales=[0.5, 1.0], activations=["relu", "none"], quant=quant)
    from_codes = sj.linear_group([], b, rows=[8, 16], layouts=["row_major", "heads_seq_first"], heads=[1, 4],
                                 scales=[0.5, 1.0], activations=["relu", "none"], quant=quant, codes=[codes],
                                 code_scales=[scales])
    x, x3 = torch.randn(6, 9, generator=gen), torch.randn(3, 2, 9, generator=gen)
    for g in (from_codes, pickle.loads(pickle.dumps(from_f32)), pickle.loads(pickle.dumps(from_codes))):
        for a, b_ in zip(from_f32.run([x, x3]), g.run([x, x3])):
            assert_same_tensor(b_, a, "group from codes / pickled")
    with pytest.raises(ValueError, match="together"):
        sj.linear_group([], b, rows=[24], quant=quant, codes=[codes])
    with pytest.raises(ValueError, match="quant must be"):
        sj.linear_group([w], b, rows=[24], quant="int3")
    with pytest.raises(RuntimeError, match="outside"):
        bad = codes.clone()
        bad[0, 0] = -128
        sj.linear_group([], b, rows=[24], quant=quant, codes=[bad], code_scales=[scales])


@pytest.mark.parametrize("quant", FORMS)
def test_multihead_attention_quantized(sj, seed, quant):
    """from_torch(mha, quant=...) computes the in-projection from the quantized weights; the
    attention output stays near torch's f32 one (error printed), and in_projection(quant=...)
    gives the same q, k, v as the module's group."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(32, 4, kdim=24, vdim=20) if quant == "f32-qc4w" else \
        torch.nn.MultiheadAttention(32, 4)
    ours = sj.MultiheadAttention.from_torch(mha, quant=quant)
    x = torch.randn(5, 2, 32)
    mem_k, mem_v = (torch.randn(7, 2, 24), torch.randn(7, 2, 20)) if quant == "f32-qc4w" else (x, x)
    with torch.no_grad():
        want, _ = mha(x, mem_k, mem_v)
        got, _ = ours(x, mem_k, mem_v)
    err = float((got - want).abs().max())
    print("{}: MultiheadAttention max |error| against torch f32 {:.3e}".format(quant, err))
    assert err < 0.25 * float(want.abs().max()) + 1e-3, replay("quantized attention far from f32")
    if mha._qkv_same_embed_dim:
        proj = sj.in_projection(mha, quant=quant)
        q, k, v = proj(x, x, x)
        codes, s = sj.quantize_linear_weights(mha.in_proj_weight, quant)
        if quant.startswith("qd8"):
            rows = x.reshape(-1, 32)
            want_qkv = rules_qd8_linear(rows, codes, s, mha.in_proj_bias.detach())
            want_q = want_qkv[:, :32].reshape(5, 2, 4, 8).permute(1, 2, 0, 3)
            assert_same_tensor(q, want_q.contiguous(), "in_projection q (qd8 rules)")
        assert q.shape == (2, 4, 5, 8) and k.shape == v.shape == (2, 4, 5, 8)


def test_autograd_goes_through_the_dequantized_weights(sj, seed):
    """The inputs' gradient is g (codes * scale); the weights' is the straight-through x^T g."""
    gen = torch.Generator().manual_seed(seed)
    mha = torch.nn.MultiheadAttention(16, 2)
    ours = sj.MultiheadAttention.from_torch(mha, quant="qd8-qc8w")
    x = torch.randn(4, 3, 16, generator=gen, requires_grad=True)
    q, k, v = torch.ops.shapejit.linear_group_run_current(ours._group, [mha.in_proj_weight], mha.in_proj_bias,
                                                          [x, x, x])
    g = [torch.randn(t.shape, generator=gen) for t in (q, k, v)]
    torch.autograd.backward([q, k, v], g)
    codes, s = sj.quantize_linear_weights(mha.in_proj_weight, "qd8-qc8w")
    deq = codes.float() * s[:, None]
    rows = torch.cat([t.permute(2, 0, 1, 3).reshape(12, 16) for t in g], dim=1)  # [L*Nb, 3E]
    want_x = (rows @ deq).view(4, 3, 16)
    want_w = (x.detach().reshape(12, 16).t() @ rows).t()
    assert torch.allclose(x.grad, want_x, atol=1e-5, rtol=1e-5), replay("input gradient")
    assert torch.allclose(mha.in_proj_weight.grad, want_w, atol=1e-5, rtol=1e-5), replay("weight gradient")


def test_compile_and_export_quantized_attention(sj, seed):
    torch.manual_seed(seed)
    model = sj.MultiheadAttention.from_torch(torch.nn.MultiheadAttention(16, 2), quant="qd8-qc4w").eval()
    x = torch.randn(5, 3, 16)
    with torch.no_grad():
        want = model(x, x, x, need_weights=False)[0]
        compiled = torch.compile(model, backend="aot_eager")
        assert_same_tensor(compiled(x, x, x, need_weights=False)[0], want, "compiled quantized attention")

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = model

        def forward(self, t):
            return self.attn(t, t, t, need_weights=False)[0]

    exported = torch.export.export(Wrap(), (x,))
    with torch.no_grad():
        assert_same_tensor(exported.module()(x), want, "exported quantized attention")
