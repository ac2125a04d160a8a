#!/usr/bin/python3
"""Quantized q/k/v projections from PyTorch: torch's dynamic quantized Linear (qint8, FBGEMM)
against shapejit.linear_group(quant=...) and f32 torch.nn.functional.linear, on the shapes of the
C++ benchmark's quantized rows (bench/linear_group_bench.cpp), one thread, one process.

Per case, the three projections (q, k, v) of attention's in-projection:
  f32 F.linear x3       torch.nn.functional.linear, one call per projection
  torch dq pt x3        torch.ao.nn.quantized.dynamic.Linear (qint8 weights per tensor, the default
                        of quantize_dynamic), one module per projection, FBGEMM engine: the input is
                        quantized per tensor inside each call (7-bit range, reduce_range on x86)
  torch dq pc x3        the same with weights per output channel (per_channel_dynamic_qconfig),
                        the closest to our qc8w weights
  shapejit f32          shapejit.linear_group over the packed weight, one call for all three
  shapejit <form>       shapejit.linear_group(..., quant=<form>), weights quantized at build time;
                        qd8 quantizes each distinct input once per call, per row
Until the engine has quantized kernels on the host, shapejit's quantized groups run the scalar
reference; the table's `path` column says which ran (the engine's reference_linear_groups counter
rising while the group was built). A build whose linear_group has no quant= prints those rows
as unavailable.

Timing: interleaved rounds of back-to-back batches (bench_timing.py), minimum per call. Every
output is checked once against the f64 product of the f32 data, within the f32 bound plus the
bound quantizing brings (rounding to nearest within the steps each side uses); the table shows
the largest error and that bound.

    PYTHONPATH=python SHAPEJIT_TORCH_LIB=build-pt/... python bench/linear_group_torch_bench.py
    python bench/linear_group_torch_bench.py --cases decode_e4096_m1 --rounds 5
"""
import argparse
import sys

import torch
import torch.nn.functional as F

import shapejit
from bench_timing import time_interleaved

# name: (E, M of the query input, M of the key/value input) as in linear_group_bench.cpp.
CASES = {
    "tiny_cross_e16": (16, 5, 7),
    "self_e768_m128": (768, 128, None),
    "decode_e4096_m1": (4096, 1, None),
}
FORMS = ("qd8-qc8w", "qd8-qc4w", "f32-qc8w", "f32-qc4w")
EPS = 2.0 ** -24


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    p.add_argument("--rounds", type=int, default=11, help="interleaved rounds per case (minimum taken)")
    p.add_argument("--batch-us", type=float, default=2000.0, help="target wall time of one batch of calls")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def uniform(shape, gen):
    return torch.rand(shape, generator=gen) * 2 - 1


class Quantization:
    """The steps an implementation rounds to: weights per channel (levels: 127 qc8w / qint8, 7 qc4w)
    or per tensor, inputs per row or per tensor over `input_levels` steps (0: f32)."""

    def __init__(self, weight_levels=0, weight_per_tensor=False, input_levels=0, input_per_tensor=False):
        self.weight_levels, self.weight_per_tensor = weight_levels, weight_per_tensor
        self.input_levels, self.input_per_tensor = input_levels, input_per_tensor


def form_quantization(form):
    if form == "f32":
        return Quantization()
    levels = 7 if form.endswith("qc4w") else 127
    return Quantization(levels, False, 255 if form.startswith("qd8") else 0, False)


def error_bound(x, w, b, q):
    """Per element [M, N]: the f32 bound 2 K 2^-24 sum|x w| (+ the epilogue's few roundings) plus
    sum_k |x| dw + |w| dx + dw dx for steps dw (weights) and dx (inputs), taken a little wide."""
    x, w, b = x.double(), w.double(), b.double()
    k = x.shape[1]
    magnitude = x.abs() @ w.abs().t() + b.abs()
    if q.weight_levels:
        amax = w.abs().amax() * torch.ones(w.shape[0], dtype=torch.float64) if q.weight_per_tensor \
            else w.abs().amax(dim=1)
        dw = 0.51 * amax / q.weight_levels
    else:
        dw = torch.zeros(w.shape[0], dtype=torch.float64)
    if q.input_levels:
        lo = x.amin(dim=1).clamp(max=0)
        hi = x.amax(dim=1).clamp(min=0)
        if q.input_per_tensor:
            lo, hi = lo.amin().expand_as(lo), hi.amax().expand_as(hi)
        dx = 1.01 * (hi - lo) / q.input_levels
    else:
        dx = torch.zeros(x.shape[0], dtype=torch.float64)
    quant = x.abs().sum(dim=1, keepdim=True) * dw + dx[:, None] * w.abs().sum(dim=1) + k * dx[:, None] * dw
    return quant + (2 * k + 8) * EPS * (magnitude + quant) + EPS * magnitude


def torch_dynamic(w, b, per_channel):
    lin = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        lin.weight.copy_(w)
        lin.bias.copy_(b)
    lin.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig if per_channel \
        else torch.ao.quantization.default_dynamic_qconfig
    return torch.ao.nn.quantized.dynamic.Linear.from_float(lin)


def shapejit_group(w, b, e, form):
    """shapejit.linear_group over the packed weight in `form`, or the reason it is unavailable."""
    if form == "f32":
        return shapejit.linear_group([w], b, rows=[e, e, e]), None
    try:
        return shapejit.linear_group([w], b, rows=[e, e, e], quant=form), None
    except TypeError as err:  # a linear_group without quant= (q-spec.md's API not in this build)
        return None, "unavailable: shapejit.linear_group has no quant= in this build ({})".format(err)


def run_case(name, args, gen):
    e, m_q, m_kv = CASES[name]
    w, b = uniform((3 * e, e), gen), uniform((3 * e,), gen)
    xq = uniform((m_q, e), gen)
    xkv = uniform((m_kv, e), gen) if m_kv else xq
    inputs = (xq, xkv, xkv)
    ws = [w[i * e:(i + 1) * e] for i in range(3)]
    bs = [b[i * e:(i + 1) * e] for i in range(3)]
    flops = sum(2.0 * x.shape[0] * e * e for x in inputs)
    decode = max(x.shape[0] for x in inputs) <= 8 and e >= 1024

    impls = []  # (label, form for weight bytes, quantization, fn, path, unavailable reason)
    impls.append(("f32 F.linear x3", "f32", Quantization(),
                  lambda: [F.linear(x, wi, bi) for x, wi, bi in zip(inputs, ws, bs)], "", None))
    for per_channel in (False, True):
        mods = [torch_dynamic(wi, bi, per_channel) for wi, bi in zip(ws, bs)]
        q = Quantization(127, not per_channel, 127, True)
        impls.append(("torch dq {} x3".format("pc" if per_channel else "pt"), "f32-qc8w", q,
                      lambda mods=mods: [mod(x) for mod, x in zip(mods, inputs)], "fbgemm", None))
    for form in ("f32",) + FORMS:
        before = shapejit.kernel_cache_stats()["reference_linear_groups"]
        group, why = shapejit_group(w, b, e, form)
        after = shapejit.kernel_cache_stats()["reference_linear_groups"]
        path = "" if group is None else "REFERENCE" if after > before else "kernels"
        fn = (lambda group=group: group.run([xq, xkv, xkv])) if group is not None else None
        impls.append(("shapejit " + form, form, form_quantization(form), fn, path, why))

    with torch.no_grad():
        runnable = [i for i in impls if i[3] is not None]
        errors = []
        for label, _, q, fn, _, _ in runnable:
            worst, worst_bound = 0.0, 0.0
            for x, wi, bi, y in zip(inputs, ws, bs, fn()):
                want = x.double() @ wi.double().t() + bi.double()
                bound = error_bound(x, wi, bi, q)
                err = (y.double() - want).abs()
                if bool((err > bound).any()):
                    sys.exit("linear_group_torch_bench: {} {}: error {:.3g} exceeds its bound {:.3g}".format(
                        name, label, float(err.max()), float(bound[err > bound][0])))
                at = int(err.argmax())
                if float(err.view(-1)[at]) >= worst:
                    worst, worst_bound = float(err.view(-1)[at]), float(bound.view(-1)[at])
            errors.append((worst, worst_bound))
        times = time_interleaved([i[3] for i in runnable], args.rounds, args.batch_us)

    base = {i[0]: t for i, t in zip(runnable, times)}
    print("\n{}: E={}, M={} (q) / {} (k, v), 1 thread, {} rounds".format(name, e, m_q, m_kv or m_q, args.rounds))
    print("{:18} {:>11} {:>8} {:>8} {:>9} {:>9} {:>10}  {:9} {}".format(
        "impl", "us", "GFLOP/s", "GB/s", "vs f32", "vs dq pc", "max err", "path", "(bound at max err)"))
    results = iter(zip(times, errors))
    for label, form, _, fn, path, why in impls:
        if fn is None:
            print("{:18} {}".format(label, why))
            continue
        t, (err, bound) = next(results)
        gbps = "{:.1f}".format(weight_bytes(e, form) / t * 1e-3) if decode else "-"
        print("{:18} {:11.2f} {:8.1f} {:>8} {:9.2f} {:9.2f} {:10.3g}  {:9} ({:.3g})".format(
            label, t, flops / t * 1e-3, gbps, base["f32 F.linear x3"] / t, base["torch dq pc x3"] / t, err, path,
            bound), flush=True)


def weight_bytes(e, form):
    """Bytes of the three projections' weights in `form` (codes and per-channel f32 scales)."""
    per_code = 4.0 if form == "f32" else 0.5 if form.endswith("qc4w") else 1.0
    return 3 * e * (e * per_code + (0 if form == "f32" else 4))


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)
    shapejit.set_num_threads(1)
    torch.backends.quantized.engine = "fbgemm"
    gen = torch.Generator().manual_seed(args.seed)
    for name in filter(None, args.cases.split(",")):
        if name not in CASES:
            sys.exit("linear_group_torch_bench: --cases takes {}, but got {}".format(", ".join(CASES), name))
        run_case(name, args, gen)
    print("\n1 thread (torch {}, quantized engine {}, shapejit ISA {}); GB/s: weight bytes of the row's form per "
          "second (decode); vs f32 / vs dq pc: time of f32 F.linear x3 / torch dq pc x3 over the row's".format(
              torch.__version__, torch.backends.quantized.engine, shapejit.isa()))


if __name__ == "__main__":
    main(sys.argv[1:])
