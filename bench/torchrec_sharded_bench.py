"""TorchRec-sharded EmbeddingBagCollection on localhost ranks over gloo: per rank, the local
lookup computed by TorchRec's own kernel (fbgemm's TBE) against shapejit's
(shapejit.torchrec.sharding) on the same shards, and the whole sharded forward, whose remainder
after the lookup is TorchRec's input all-to-all, output all-to-all / reduce-scatter and KJT glue.

    python bench/torchrec_sharded_bench.py [--tables 8 --dim 64 --rows 100000 --batch 1024
                                            --pooling 20 --world 2 --threads 1]

Each rank runs `--threads` threads; on a 2-core machine 2 ranks of 1 thread fill it, so the figures
say how a rank's time splits, not how anything scales. The lookups are timed one rank at a time
(the others wait in a barrier), TorchRec's and shapejit's rounds interleaved; the whole forwards
run on every rank together. Forward only (inference-style lookups, no
gradient); the batch is per rank. Needs torchrec and fbgemm_gpu (CPU build) beside shapejit.
"""
import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

import torch


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--rows", type=int, default=100000, help="rows per table")
    p.add_argument("--batch", type=int, default=1024, help="bags per feature per rank")
    p.add_argument("--pooling", type=int, default=20, help="indices per bag")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch (and shapejit) threads per rank")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=10, help="calls per timed round")
    p.add_argument("--shardings", default="table_wise,row_wise,column_wise")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before the ranks are ended")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(args):
    """Starts the ranks as processes of this script, prints rank 0's table, fails on any failure."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a for a in sys.argv[1:]]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--rank", str(r), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(args.world)]
    deadline = time.monotonic() + args.timeout
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            out, _ = proc.communicate()
            out += "\n(ended after {} s)".format(args.timeout)
        outputs.append(out)
    if any(p.returncode != 0 for p in procs):
        for r, out in enumerate(outputs):
            print("---- rank {} (exit {}) ----\n{}".format(r, procs[r].returncode, out[-4000:]))
        sys.exit(1)
    print("\n".join(line for line in outputs[0].splitlines() if not line.startswith(("WARNING", "W1", "  "))
                    and "Warning" not in line))


def features(args, gen):
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    keys = ["f{}".format(t) for t in range(args.tables)]
    lengths = torch.full((args.tables * args.batch,), args.pooling, dtype=torch.int64)
    values = torch.randint(0, args.rows, (args.tables * args.batch * args.pooling,), generator=gen)
    return KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)


def timed_interleaved(fns, rounds, calls):
    """timed() of several functions, their rounds interleaved (load on a shared machine hits
    each alike)."""
    per_round = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            per_round[i].append((time.perf_counter_ns() - t0) / 1e6 / calls)
    return [(min(r), statistics.median(r)) for r in per_round]


def timed(fn, rounds, calls):
    """Milliseconds per call: (minimum, median) over rounds of `calls` back-to-back calls. The
    same counts on every rank, as the sharded forward holds collectives."""
    per_round = []
    fn()
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        per_round.append((time.perf_counter_ns() - t0) / 1e6 / calls)
    return min(per_round), statistics.median(per_round)


def run_rank(args):
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world, timeout=datetime.timedelta(seconds=300))
    import torchrec
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
    from torchrec.distributed.batched_embedding_kernel import BatchedFusedEmbeddingBag
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingEnv

    import shapejit
    from shapejit.torchrec import sharding

    pg = dist.GroupMember.WORLD
    rows = []
    gen = torch.Generator().manual_seed(1000 + args.rank)
    kjt = features(args, gen)
    for sharding_type in args.shardings.split(","):
        tables = [torchrec.EmbeddingBagConfig(name="t{}".format(t), num_embeddings=args.rows, embedding_dim=args.dim,
                                              feature_names=["f{}".format(t)]) for t in range(args.tables)]
        ebc = torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
        extra = {"min_partition": args.dim // 2} if sharding_type == "column_wise" else {}
        cons = {t.name: ParameterConstraints(sharding_types=[sharding_type],
                                             compute_kernels=[EmbeddingComputeKernel.FUSED.value], **extra)
                for t in tables}
        sharder = sharding.ShapejitEmbeddingBagCollectionSharder(
            fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.01})
        plan = EmbeddingShardingPlanner(topology=Topology(world_size=args.world, compute_device="cpu"),
                                        constraints=cons).collective_plan(ebc, [sharder], pg)
        model = DistributedModelParallel(ebc, env=ShardingEnv.from_process_group(pg), plan=plan, sharders=[sharder],
                                         device=torch.device("cpu"))
        kernels = [m for m in sharding._all_modules(model) if isinstance(m, BatchedFusedEmbeddingBag)]
        # what reaches each local lookup, captured from one sharded forward
        seen = {}
        hooks = [k.register_forward_pre_hook(lambda mod, a, kw=None: seen.__setitem__(id(mod), a[0]))
                 for k in kernels]
        with torch.no_grad():
            model(kjt)
        for h in hooks:
            h.remove()
        calls = []
        for k in kernels:
            f = seen.get(id(k))
            if f is None or f.values().numel() == 0:
                continue
            shapejit_tbe = k._emb_module
            fbgemm_tbe = SplitTableBatchedEmbeddingBagsCodegen.__new__(SplitTableBatchedEmbeddingBagsCodegen)
            fbgemm_tbe.__dict__.update(shapejit_tbe.__dict__)  # the same state, fbgemm's forward
            calls.append((k, shapejit_tbe, fbgemm_tbe, f.values().long(), f.offsets().long()))
        indices_here = sum(c[3].numel() for c in calls)

        def lookups(which):
            def run():
                for _, sj, fb, idx, off in calls:
                    (sj if which == "shapejit" else fb)(idx, off)
            return run

        with torch.no_grad():
            same = all(torch.equal(sj(idx, off), fb(idx, off)) for _, sj, fb, idx, off in calls)
            # one rank at a time (the others wait in a barrier), fbgemm and shapejit interleaved
            for r in range(args.world):
                dist.barrier()
                if r == args.rank:
                    t_fb, t_sj = timed_interleaved([lookups("fbgemm"), lookups("shapejit")], args.rounds, args.calls)
            dist.barrier()
            def forward_with(which):
                def run():
                    for k, sj, fb, _, _ in calls:
                        k._emb_module = sj if which == "shapejit" else fb
                    model(kjt)
                return run

            # every rank runs the same interleaved sequence (the forwards hold collectives)
            dist.barrier()
            total_fb, total_sj = timed_interleaved([forward_with("fbgemm"), forward_with("shapejit")], args.rounds,
                                                   args.calls)
            totals = {"fbgemm": total_fb, "shapejit": total_sj}
            for k, sj, _, _, _ in calls:
                k._emb_module = sj
        rows.append((sharding_type, args.rank, indices_here, t_fb, t_sj, totals["fbgemm"], totals["shapejit"], same))
        del model, calls, kernels, seen
    gathered = [None] * args.world
    dist.all_gather_object(gathered, rows)
    if args.rank == 0:
        print("TorchRec {} sharded EBC, {} tables x {} rows, D={}, B={} per rank, L={}, {} ranks x {} thread(s), "
              "gloo on localhost; shapejit {} ({}); ms per forward, min (median) of {} rounds of {}".format(
                  torchrec.__version__ if hasattr(torchrec, "__version__") else "", args.tables, args.rows, args.dim,
                  args.batch, args.pooling, args.world, args.threads, shapejit.__version__, shapejit.isa(),
                  args.rounds, args.calls))
        print("| sharding | rank | local indices | lookup TorchRec (fbgemm) | lookup shapejit | lookup speedup | "
              "forward TorchRec | forward shapejit | forward - lookup, min (comm + glue) | bitwise |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for per_rank in zip(*gathered):
            for st, rank, n, fb, sj, tot_fb, tot_sj, same in per_rank:
                print("| {} | {} | {} | {:.2f} ({:.2f}) | {:.2f} ({:.2f}) | {:.2f}x | {:.2f} ({:.2f}) | {:.2f} ({:.2f}) | "
                      "{:.2f} | {} |".format(st, rank, n, fb[0], fb[1], sj[0], sj[1], fb[0] / sj[0], tot_fb[0], tot_fb[1],
                                              tot_sj[0], tot_sj[1], tot_sj[0] - sj[0], "yes" if same else "NO"))
    dist.barrier()
    dist.destroy_process_group()


def main():
    args = parse()
    if args.rank is None:
        launch(args)
    else:
        run_rank(args)


if __name__ == "__main__":
    main()
