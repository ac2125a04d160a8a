#!/usr/bin/env python3
"""Turns shapejit_bench's JSON output into PNG charts.

    build/bench/shapejit_bench --benchmark_format=json --benchmark_out=bench.json
    tools/plot_bench.py bench.json --out-dir docs/img [--markdown]

Charts (one file each, only those the run has rows for):
  embedding_bag_t<T>.png      GB/s per implementation across D, one panel per mode, the measured
                              gather limit drawn dashed (rows <rows>x<dim>/<bags>x<len> swept over dim)
  embedding_bag_cases_t<T>.png  GB/s per implementation for the cases that are not a D sweep
                              (cold tables, power-law bag lengths), limit as a dashed mark
  embag_scaling.png           1 and 2 threads over work size (bench/embag_scaling_bench.cpp): GB/s
                              per implementation and thread count (t1 solid, t2 dashed) against rows
                              gathered per call, and the 2-thread speed-up below (above 1: t2 wins)
  linear_group.png            GFLOP/s per case against the peers, one panel per thread count, with
                              the case's measured limit (FMA peak, or DRAM bandwidth for decode
                              cases) drawn as a dashed mark
Names follow the benchmark names of README.md (section Benchmarks and charts): embedding_bag/<impl>/<mode>/<rows>x<dim>/<bags>x<len>/t<threads> and
linear_group/<impl>/<case>/t<threads>; counters GBps, GFLOPs, vs_peak, vs_bw.
Needs matplotlib: run with build-venv/bin/python (tools/python_env.sh installs it).
"""
import argparse
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

EMBAG = re.compile(r"^embedding_bag/(?P<impl>[^/]+)/(?P<mode>[^/]+)/(?P<rows>\d+)x(?P<dim>\d+)/"
                   r"(?P<bags>\d+)x(?P<len>[^/]+)/t(?P<threads>\d+)(/real_time)?$")
SCALING = re.compile(r"^embag_scaling/(?P<impl>[^/]+)/(?P<mode>[^/]+)/(?P<rows>\d+)x(?P<dim>\d+)/"
                     r"(?P<bags>\d+)x(?P<len>\d+)/t(?P<threads>\d+)(/real_time)?$")
LINEAR = re.compile(r"^linear_group/(?P<impl>[^/]+)/(?P<case>[^/]+)/t(?P<threads>\d+)(/real_time)?$")

EMBAG_IMPLS = ["jit", "fbgemm", "aten", "ref"]  # the limit is drawn separately
EMBAG_MODES = ["sum", "mean", "wsum", "max"]
LINEAR_IMPLS = ["jit", "onednn", "openblas_packed", "openblas_3x", "libxsmm_3x", "xnnpack_3x"]
LINEAR_LIMIT_ROWS = {"fma_peak", "read_peak"}
STYLE = {  # one colour per implementation, the same in every chart
    "jit": "#d62728", "fbgemm": "#17becf", "aten": "#1f77b4", "ref": "#7f7f7f", "onednn": "#1f77b4", "openblas_packed": "#2ca02c",
    "openblas_3x": "#98df8a", "libxsmm_3x": "#9467bd", "xnnpack_3x": "#ff7f0e",
}


def load_rows(path):
    """(rows, context): the benchmark rows with their counters; error rows are dropped."""
    with open(path) as f:
        data = json.load(f)
    rows = []
    for b in data.get("benchmarks", []):
        if b.get("error_occurred") or b.get("run_type", "iteration") != "iteration":
            continue
        counters = {k: v for k, v in b.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        rows.append({"name": b.get("run_name", b["name"]), "counters": counters})
    return rows, data.get("context", {})


def parse_embag(rows):
    """Embedding-bag rows with a GBps counter, keyed by their name's fields."""
    out = []
    for r in rows:
        m = EMBAG.match(r["name"])
        if m and "GBps" in r["counters"]:
            d = m.groupdict()
            out.append(dict(impl=d["impl"], mode=d["mode"], rows=int(d["rows"]), dim=int(d["dim"]),
                            shape="{}x{}".format(d["bags"], d["len"]), threads=int(d["threads"]),
                            gbps=r["counters"]["GBps"]))
    return out


def parse_scaling(rows):
    """embag_scaling rows with a GBps counter; the sweep is the table plus whichever of bags and
    len varies (the other is part of the sweep's name)."""
    out = []
    for r in rows:
        m = SCALING.match(r["name"])
        if m and "GBps" in r["counters"]:
            d = {k: (v if k in ("impl", "mode") else int(v)) for k, v in m.groupdict().items() if v and k != "real_time"}
            out.append(dict(d, gbps=r["counters"]["GBps"], rows_per_call=d["bags"] * d["len"]))
    return out


def plot_scaling(plt, rows, machine, path):
    """Per sweep: GB/s over rows per call (t1 solid, t2 dashed), and t2/t1 underneath."""
    sweeps = defaultdict(list)  # (mode, rows, dim, fixed part) -> rows
    for r in rows:
        fixed_bags = len({x["bags"] for x in rows if (x["mode"], x["rows"], x["dim"], x["len"]) ==
                          (r["mode"], r["rows"], r["dim"], r["len"])}) == 1
        fixed = "{} bags".format(r["bags"]) if fixed_bags else "{} indices/bag".format(r["len"])
        sweeps[(r["mode"], r["rows"], r["dim"], fixed)].append(r)
    sweeps = {k: v for k, v in sweeps.items() if len({r["rows_per_call"] for r in v}) >= 2}
    if not sweeps:
        return False
    keys = sorted(sweeps)
    fig, axes = plt.subplots(2, len(keys), figsize=(6.0 * len(keys), 7.5), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, key in enumerate(keys):
        group = sweeps[key]
        top, bottom = axes[0, col], axes[1, col]
        for impl in ordered({r["impl"] for r in group}, EMBAG_IMPLS + ["limit"]):
            color = "k" if impl == "limit" else STYLE.get(impl)
            by_t = {t: sorted((r["rows_per_call"], r["gbps"]) for r in group if r["impl"] == impl and r["threads"] == t)
                    for t in sorted({r["threads"] for r in group})}
            for t, pts in by_t.items():
                if pts:
                    top.plot([p[0] for p in pts], [p[1] for p in pts], "-" if t == 1 else "--", marker="o",
                             markersize=3, color=color, label="{} t{}".format(impl, t))
            if by_t.get(1) and by_t.get(2):
                t1 = dict(by_t[1])
                pts = [(x, y / t1[x]) for x, y in by_t[2] if x in t1 and t1[x] > 0]
                bottom.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, color=color,
                            label=impl)
        mode, table_rows, dim, fixed = key
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        top.set_title("{} {}x{}, {}".format(mode, table_rows, dim, fixed), fontsize=10)
        top.set_ylabel("GB/s (row bytes gathered)")
        top.set_ylim(bottom=0)
        bottom.axhline(1.0, color="0.4", linewidth=1)
        bottom.set_ylabel("speed-up of 2 threads over 1")
        bottom.set_xlabel("rows gathered per call")
    fig.suptitle("shapejit embedding_bag: 1 and 2 threads over work size\n{}".format(machine), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_linear(rows):
    """Linear-group rows with GFLOPs, and the case's limit in GFLOP/s where the row carries it:
    GFLOPs / vs_bw (bandwidth-bound decode cases), else GFLOPs / vs_peak."""
    out = []
    for r in rows:
        m = LINEAR.match(r["name"])
        if not m or m.group("impl") in LINEAR_LIMIT_ROWS or "GFLOPs" not in r["counters"]:
            continue
        c = r["counters"]
        limit = None
        for ratio in ("vs_bw", "vs_peak"):
            if c.get(ratio):
                limit = c["GFLOPs"] / c[ratio]
                break
        out.append(dict(impl=m.group("impl"), case=m.group("case"), threads=int(m.group("threads")),
                        gflops=c["GFLOPs"], limit=limit))
    return out


def machine_text(context, override):
    if override:
        return override
    parts = []
    if context.get("num_cpus"):
        parts.append("{} CPUs".format(context["num_cpus"]))
    if context.get("mhz_per_cpu"):
        parts.append("{} MHz".format(context["mhz_per_cpu"]))
    caches = [c for c in context.get("caches", []) if c.get("type") in ("Data", "Unified")]
    if caches:
        parts.append(" ".join("L{} {}K".format(c["level"], c["size"] // 1024) for c in caches))
    if context.get("date"):
        parts.append(context["date"][:10])
    return ", ".join(parts)


def ordered(values, preferred):
    return [v for v in preferred if v in values] + sorted(v for v in values if v not in preferred)


def plot_embag_sweeps(plt, rows, threads, machine, path):
    """One panel per mode: GB/s against D for each implementation, the limit dashed."""
    sweeps = defaultdict(list)  # (mode, rows, shape) -> rows of this thread count
    for r in rows:
        if r["threads"] == threads:
            sweeps[(r["mode"], r["rows"], r["shape"])].append(r)
    sweeps = {k: v for k, v in sweeps.items() if len({r["dim"] for r in v}) >= 2}
    if not sweeps:
        return False
    modes = ordered({k[0] for k in sweeps}, EMBAG_MODES)
    cols = min(2, len(modes))
    nrows = math.ceil(len(modes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 4.2 * nrows), squeeze=False)
    for ax, mode in zip(axes.flat, modes):
        for (m, table_rows, shape), group in sorted(sweeps.items()):
            if m != mode:
                continue
            label_suffix = "" if len([k for k in sweeps if k[0] == mode]) == 1 else " {}x*/{}".format(table_rows, shape)
            for impl in ordered({r["impl"] for r in group}, EMBAG_IMPLS + ["limit"]):
                pts = sorted((r["dim"], r["gbps"]) for r in group if r["impl"] == impl)
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                if impl.startswith("limit"):  # limit, and limit-avx2 on AVX-512 hosts
                    isa = impl[len("limit-"):] if impl != "limit" else ""
                    ax.plot(xs, ys, "--", color="k" if not isa else "0.5", linewidth=1.5,
                            label="measured limit" + (" " + isa if isa else "") + label_suffix)
                else:
                    ax.plot(xs, ys, marker="o", color=STYLE.get(impl), label=impl + label_suffix,
                            linewidth=2.5 if impl == "jit" else 1.5)
            dims = sorted({r["dim"] for r in group})
            ax.set_xscale("log", base=2)
            ax.set_xticks(dims)
            ax.set_xticklabels([str(d) for d in dims])
            ax.set_title("{} ({} rows, {} bags x {})".format(mode, table_rows, *shape.split("x")))
        ax.set_xlabel("D (embedding dim)")
        ax.set_ylabel("GB/s (row bytes gathered)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(modes):]:
        ax.axis("off")
    fig.suptitle("shapejit embedding_bag, {} thread{}: GB/s across D\n{}".format(
        threads, "" if threads == 1 else "s", machine), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_embag_cases(plt, rows, threads, machine, path):
    """Bars for the cases that are not part of a D sweep, the limit as a dashed mark."""
    groups = defaultdict(list)
    for r in rows:
        if r["threads"] == threads:
            groups[(r["mode"], r["rows"], r["shape"])].append(r)
    dims_per = defaultdict(set)
    for (mode, table_rows, shape), group in groups.items():
        dims_per[(mode, table_rows, shape)] = {r["dim"] for r in group}
    cases = sorted(k for k, dims in dims_per.items() if len(dims) == 1)
    if not cases:
        return False
    impls = ordered({r["impl"] for k in cases for r in groups[k]} - {"limit"}, EMBAG_IMPLS)
    width = min(0.25, 0.8 / max(1, len(impls)))
    fig, ax = plt.subplots(figsize=(max(6.5, 2.2 * len(cases)), 5.0))
    for i, impl in enumerate(impls):
        xs, ys = [], []
        for j, k in enumerate(cases):
            vals = [r["gbps"] for r in groups[k] if r["impl"] == impl]
            if vals:
                xs.append(j + width * (i - (len(impls) - 1) / 2))
                ys.append(vals[0])
        ax.bar(xs, ys, width, label=impl, color=STYLE.get(impl))
    for j, k in enumerate(cases):
        lim = [r["gbps"] for r in groups[k] if r["impl"] == "limit"]
        if lim:
            half = width * len(impls) / 2 + 0.05
            ax.hlines(lim[0], j - half, j + half, colors="k", linestyles="--",
                      label="measured limit" if j == 0 else None)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(["{}\n{}x{}\n{}".format(m, n, next(iter(dims_per[(m, n, s)])), s) for m, n, s in cases],
                       fontsize=8)
    ax.set_ylabel("GB/s (row bytes gathered)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False)
    ax.set_title("shapejit embedding_bag, {} thread{}: other cases\n{}".format(
        threads, "" if threads == 1 else "s", machine), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_linear(plt, rows, machine, path):
    """One panel per thread count: GFLOP/s per case and implementation, jit's bars labelled, the
    case's limit as a dashed mark, one legend under the panels."""
    if not rows:
        return False
    threads = sorted({r["threads"] for r in rows})
    cases = ordered({r["case"] for r in rows}, ["tiny_cross_e16", "self_e768_m128", "self_e1024_m512",
                                                "decode_e4096_m1", "decode_e4096_m8"])
    impls = ordered({r["impl"] for r in rows}, LINEAR_IMPLS)
    width = 0.8 / len(impls)
    top = 1.15 * max([r["gflops"] for r in rows] + [r["limit"] for r in rows if r["limit"]])
    fig, axes = plt.subplots(len(threads), 1, figsize=(max(7.0, 1.9 * len(cases)), 3.8 * len(threads) + 0.8),
                             squeeze=False)
    handles = {}
    for ax, t in zip(axes[:, 0], threads):
        at_t = [r for r in rows if r["threads"] == t]
        for i, impl in enumerate(impls):
            pts = [(cases.index(r["case"]), r["gflops"]) for r in at_t if r["impl"] == impl]
            if not pts:
                continue
            xs = [j - 0.4 + width * (i + 0.5) for j, _ in pts]
            bars = ax.bar(xs, [v for _, v in pts], width, label=impl, color=STYLE.get(impl),
                          edgecolor="k" if impl == "jit" else None)
            handles.setdefault(impl, bars)
            if impl == "jit":
                for bar, (_, v) in zip(bars, pts):
                    ax.annotate("{:.3g}".format(v), (bar.get_x() + bar.get_width() / 2, v), ha="center",
                                va="bottom", fontsize=7)
        for j, case in enumerate(cases):
            limits = [r["limit"] for r in at_t if r["case"] == case and r["limit"]]
            if limits:
                line = ax.hlines(max(limits), j - 0.45, j + 0.45, colors="k", linestyles="--")
                handles.setdefault("limit", line)
        ax.set_ylim(0, top)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, fontsize=8)
        ax.set_ylabel("GFLOP/s")
        ax.set_title("{} thread{}".format(t, "" if t == 1 else "s"), fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    labels = [k if k != "limit" else "limit (FMA peak / DRAM bw)" for k in handles]
    fig.legend(list(handles.values()), labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8,
               frameon=False)
    fig.suptitle("shapejit linear_group vs peers: GFLOP/s per case\n{}".format(machine), fontsize=11)
    fig.tight_layout(rect=(0, 0.06 if len(handles) <= 4 else 0.09, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown_tables(embag, linear):
    """The measured figures as Markdown tables (for the README)."""
    lines = []
    if embag:
        impls = ordered({r["impl"] for r in embag}, EMBAG_IMPLS + ["limit"])
        lines += ["| embedding_bag case | threads | " + " | ".join(impls) + " |",
                  "|---|---|" + "---|" * len(impls)]
        keys = sorted({(r["mode"], r["rows"], r["dim"], r["shape"], r["threads"]) for r in embag},
                      key=lambda k: (k[4], EMBAG_MODES.index(k[0]) if k[0] in EMBAG_MODES else 9, k[1], k[2], k[3]))
        for mode, table_rows, dim, shape, t in keys:
            cells = []
            for impl in impls:
                v = [r["gbps"] for r in embag if (r["impl"], r["mode"], r["rows"], r["dim"], r["shape"],
                                                  r["threads"]) == (impl, mode, table_rows, dim, shape, t)]
                cells.append("{:.1f}".format(v[0]) if v else "")
            lines.append("| {} {}x{} {} | {} | {} |".format(mode, table_rows, dim, shape, t, " | ".join(cells)))
        lines.append("")
    if linear:
        impls = ordered({r["impl"] for r in linear}, LINEAR_IMPLS)
        lines += ["| linear_group case (GFLOP/s) | threads | " + " | ".join(impls) + " | limit |",
                  "|---|---|" + "---|" * (len(impls) + 1)]
        for case, t in sorted({(r["case"], r["threads"]) for r in linear}, key=lambda k: (k[1], k[0])):
            at = [r for r in linear if r["case"] == case and r["threads"] == t]
            cells = []
            for impl in impls:
                v = [r["gflops"] for r in at if r["impl"] == impl]
                cells.append("{:.1f}".format(v[0]) if v else "")
            limits = [r["limit"] for r in at if r["limit"]]
            cells.append("{:.1f}".format(max(limits)) if limits else "")
            lines.append("| {} | {} | {} |".format(case, t, " | ".join(cells)))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="shapejit_bench --benchmark_out file (JSON)")
    parser.add_argument("--out-dir", default="docs/img", help="where the PNGs go (default docs/img)")
    parser.add_argument("--machine", default="", help="machine description for the titles "
                                                      "(default: from the JSON context)")
    parser.add_argument("--markdown", action="store_true", help="also print the figures as Markdown tables")
    args = parser.parse_args(argv)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, context = load_rows(args.json)
    embag, linear, scaling = parse_embag(rows), parse_linear(rows), parse_scaling(rows)
    if not embag and not linear and not scaling:
        print("plot_bench: no embedding_bag, embag_scaling or linear_group rows with GBps / GFLOPs in " + args.json,
              file=sys.stderr)
        return 1
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_text(context, args.machine)
    written = []
    for t in sorted({r["threads"] for r in embag}):
        for plot, stem in ((plot_embag_sweeps, "embedding_bag_t{}"), (plot_embag_cases, "embedding_bag_cases_t{}")):
            path = out / (stem.format(t) + ".png")
            if plot(plt, embag, t, machine, path):
                written.append(path)
    if plot_scaling(plt, scaling, machine, out / "embag_scaling.png"):
        written.append(out / "embag_scaling.png")
    if plot_linear(plt, linear, machine, out / "linear_group.png"):
        written.append(out / "linear_group.png")
    for p in written:
        print(p)
    if args.markdown:
        print(markdown_tables(embag, linear))
    return 0


if __name__ == "__main__":
    sys.exit(main())
