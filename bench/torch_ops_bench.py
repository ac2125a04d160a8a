#!/usr/bin/python3
"""shapejit against PyTorch, called from PyTorch: torch.ops.shapejit.embedding_bag beside
torch.embedding_bag, and shapejit.EmbeddingBag beside nn.EmbeddingBag, in one process; then a
model's tables: one nn.EmbeddingBag call per table, one shapejit.EmbeddingBag call per table, and
one shapejit.EmbeddingBagGroup call for all of them, then the outputs concatenated (torch.cat of
the nn.EmbeddingBag outputs against EmbeddingBagGroup.concat) (--groups). Opt-in sections
(--sections): dlrm, a DLRM-style model eager against shapejit.optimize (dlrm_bench.py), and tbe,
its 26 tables through torch's per-table ops, shapejit's group and fbgemm_gpu's CPU table-batched
ops (tbe_peers_bench.py; skipped with the reason without fbgemm_gpu).

Every case times each implementation in interleaved rounds (round r runs A's batch, then B's,
then the other pair's), each batch a run of back-to-back calls; a figure is the minimum over the
rounds of (batch time / calls), so a burst of load on a shared machine shows up in neither. The
results of the two sides are compared once per case (bitwise for these f32 tables), so a fast
wrong answer cannot pass.

    /usr/bin/python3 bench/torch_ops_bench.py                  # the issue's grid, 1 thread
    /usr/bin/python3 bench/torch_ops_bench.py --dims 64 --rounds 11 --markdown
    python bench/torch_ops_bench.py --sections dlrm,tbe --markdown   # min / median, 1 and 2 threads

Needs the extension: an installed shapejit, or PYTHONPATH=python with build/python/ built.
"""
import argparse
import sys
import time

import torch

import shapejit
from bench_timing import time_interleaved

MODES = {"sum": 0, "mean": 1, "max": 2, "weighted": 0}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", default="8,16,32,64,128,256", help="embedding dims, comma-separated")
    p.add_argument("--shapes", default="512x13,256x32", help="bags x indices per bag, comma-separated")
    p.add_argument("--modes", default="sum,mean,weighted,max", help="sum, mean, weighted (sum), max")
    p.add_argument("--rows", type=int, default=4096, help="table rows (the indices are uniform over them)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for both sides")
    p.add_argument("--rounds", type=int, default=41, help="interleaved rounds per case (minimum taken)")
    p.add_argument("--batch-us", type=float, default=2000.0, help="target wall time of one batch of calls")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--groups", default="26x64x128x4,8x64x256x8",
                   help="model-like groups T x D x bags x indices per bag (2-D inputs), comma-separated; "
                        "'' for none")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sections", default="ops,groups",
                   help="what to run, comma-separated: ops (the per-op grid), groups (--groups), dlrm (a DLRM-style "
                        "model, dlrm_bench.py), tbe (table-batched peers over the DLRM tables, tbe_peers_bench.py)")
    p.add_argument("--dlrm-batch", type=int, default=2048, help="dlrm/tbe: bags per table")
    p.add_argument("--dlrm-len", type=float, default=20.0, help="dlrm/tbe: mean (Poisson) indices per bag")
    p.add_argument("--dlrm-max-mb", type=int, default=256, help="dlrm/tbe: cap on the 26 f32 tables' size")
    p.add_argument("--dlrm-threads", default="1,2", help="dlrm/tbe: thread counts, comma-separated")
    p.add_argument("--dlrm-rounds", type=int, default=11, help="dlrm/tbe: interleaved rounds (min and median)")
    p.add_argument("--dlrm-batch-us", type=float, default=1.0, help="dlrm/tbe: target time of a batch (1: one call)")
    return p.parse_args(argv)


def make_case(rows, dim, bags, per_bag, mode, gen):
    weight = torch.randn(rows, dim, generator=gen)
    indices = torch.randint(0, rows, (bags * per_bag,), generator=gen)
    offsets = torch.arange(0, bags * per_bag, per_bag)
    psw = torch.rand(bags * per_bag, generator=gen) if mode == "weighted" else None
    return weight, indices, offsets, psw


def case_functions(weight, indices, offsets, psw, mode):
    """(torch op, shapejit op, nn.EmbeddingBag, shapejit.EmbeddingBag) as zero-argument calls."""
    m = MODES[mode]
    name = "sum" if mode == "weighted" else mode
    nn_bag = torch.nn.EmbeddingBag.from_pretrained(weight, mode=name, freeze=True)
    sj_bag = shapejit.EmbeddingBag.from_pretrained(weight, mode=name, freeze=True)
    return (
        lambda: torch.embedding_bag(weight, indices, offsets, False, m, False, psw, False, None),
        lambda: torch.ops.shapejit.embedding_bag(weight, indices, offsets, False, m, False, psw, False, None),
        lambda: nn_bag(indices, offsets, per_sample_weights=psw),
        lambda: sj_bag(indices, offsets, per_sample_weights=psw),
    )


def check_equal(fns, label):
    ref_op, sj_op, ref_mod, sj_mod = (f() for f in fns)
    if not torch.equal(ref_op[0], sj_op[0]) or not torch.equal(ref_mod, sj_mod):
        sys.exit("torch_ops_bench: {}: shapejit's output differs from torch's".format(label))


def time_groups(args, gen):
    """One line per group: T tables of args.rows + 16 t rows (distinct tables), 2-D inputs."""
    for spec in filter(None, args.groups.split(",")):
        tables, dim, bags, per_bag = (int(x) for x in spec.split("x"))
        nn_bags = [torch.nn.EmbeddingBag.from_pretrained(torch.randn(args.rows + 16 * t, dim, generator=gen),
                                                         mode="sum", freeze=True) for t in range(tables)]
        sj_bags = [shapejit.EmbeddingBag.from_torch(b) for b in nn_bags]
        group = shapejit.EmbeddingBagGroup(nn_bags)
        inputs = [torch.randint(0, args.rows, (bags, per_bag), generator=gen) for _ in range(tables)]
        fns = (lambda: [b(i) for b, i in zip(nn_bags, inputs)],
               lambda: [b(i) for b, i in zip(sj_bags, inputs)],
               lambda: group(inputs),
               lambda: torch.cat([b(i) for b, i in zip(nn_bags, inputs)], dim=1),
               lambda: group.concat(inputs))
        want, per_bag_out, grouped, want_cat, concat = (f() for f in fns)
        if not all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(want, per_bag_out, grouped)) or \
                not torch.equal(want_cat, concat):
            sys.exit("torch_ops_bench: group {}: shapejit's outputs differ from torch's".format(spec))
        t = time_interleaved(fns, args.rounds, args.batch_us)
        print("group {:14} nn.EmbeddingBag x{} {:8.1f} us, shapejit.EmbeddingBag x{} {:8.1f} us, "
              "EmbeddingBagGroup {:8.1f} us ({:.2f}x torch, {:.2f}x one module per table); "
              "concatenated: torch.cat of nn.EmbeddingBag x{} {:8.1f} us, EmbeddingBagGroup.concat {:8.1f} us "
              "({:.2f}x)".format(spec, tables, t[0], tables, t[1], t[2], t[0] / t[2], t[1] / t[2], tables, t[3], t[4],
                                 t[3] / t[4]), flush=True)


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sections = set(filter(None, args.sections.split(",")))
    unknown = sections - {"ops", "groups", "dlrm", "tbe"}
    if unknown:
        sys.exit("torch_ops_bench: --sections takes ops, groups, dlrm and tbe, but got {}".format(", ".join(sorted(unknown))))
    gen = torch.Generator().manual_seed(args.seed)
    if "ops" in sections:
        time_ops(args, gen)
    if "groups" in sections:
        with torch.no_grad():
            time_groups(args, gen)
    if "dlrm" in sections:
        import dlrm_bench
        dlrm_bench.run(args, torch.Generator().manual_seed(args.seed))
    if "tbe" in sections:
        import tbe_peers_bench
        tbe_peers_bench.run(args, torch.Generator().manual_seed(args.seed))
    print("threads {}, {} rounds (shapejit {} ISA, torch {})".format(
        args.threads, args.rounds, getattr(shapejit, "isa", lambda: "?")(), torch.__version__))


def time_ops(args, gen):
    cases = []
    for shape in args.shapes.split(","):
        bags, per_bag = (int(x) for x in shape.split("x"))
        for dim in (int(d) for d in args.dims.split(",")):
            for mode in args.modes.split(","):
                cases.append(("{}x{}".format(bags, per_bag), dim, mode, make_case(args.rows, dim, bags, per_bag, mode, gen)))
    # The fixed cost: one bag of one index (the op and the module).
    for dim in (8, 128):
        cases.append(("1x1", dim, "sum", make_case(args.rows, dim, 1, 1, "sum", gen)))

    header = ("bags", "D", "mode", "torch op us", "shapejit op us", "op speedup", "nn module us",
              "shapejit module us", "module speedup")
    rows = []
    with torch.no_grad():
        for shape, dim, mode, (weight, indices, offsets, psw) in cases:
            fns = case_functions(weight, indices, offsets, psw, mode)
            label = "{} D={} {}".format(shape, dim, mode)
            check_equal(fns, label)
            t = time_interleaved(fns, args.rounds, args.batch_us)
            rows.append((shape, dim, mode, t[0], t[1], t[0] / t[1], t[2], t[3], t[2] / t[3]))
            if not args.markdown:
                print("{:8} {:4} {:9} op {:8.2f} vs {:8.2f} us ({:.2f}x)   module {:8.2f} vs {:8.2f} us ({:.2f}x)".format(
                    shape, dim, mode, t[0], t[1], t[0] / t[1], t[2], t[3], t[2] / t[3]), flush=True)
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| {} | {} | {} | {:.2f} | {:.2f} | {:.2f}x | {:.2f} | {:.2f} | {:.2f}x |".format(*r))
    worst = min(min(r[5], r[8]) for r in rows)
    print("ops: slowest speedup {:.2f}x".format(worst))


if __name__ == "__main__":
    main(sys.argv[1:])
