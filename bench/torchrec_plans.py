"""The scaling model of docs/torchrec-scaling.md: what TorchRec's own planner does with the full
(uncapped) Criteo Terabyte set of 26 tables on N CPU ranks, and what each rank then spends per
batch on lookups (from a measured gather rate) and on all-to-all traffic (from a link bandwidth).

TorchRec plans on the meta device (no table is allocated): EmbeddingShardingPlanner with a CPU
Topology of N ranks and a per-rank memory (--ddr-gb), EmbeddingBagCollectionSharder. TorchRec
1.8.0's sharder offers data-parallel, table-wise, column-wise and table-column-wise on CPU and adds
row-wise only for CUDA; --row-wise also offers row-wise and table-row-wise on CPU (a sharder whose
sharding_types adds them), which is what a table larger than one rank's memory needs.

Per rank and batch (per-rank batch b, global batch B = N b, L indices per sample and feature,
indices uniform over each table, f32 rows of D columns):
  lookups  table-wise shard: B L rows of D; column-wise shard of d columns: B L rows of d;
           row-wise shard: B L / N rows of D (uniform indices spread over the row ranges);
           data-parallel: b L rows of D (the local batch, no communication);
  gather   bytes = rows x columns x 4, time = bytes / --gather-gbs (a measured rate: README's
           TorchRec table, shapejit's rows/s x D x 4);
  all-to-all, forward, bytes a rank sends: its b samples' indices (8 bytes each, plus 4 for
           each length) to every other rank holding a shard of the feature, and the pooled
           [B, d] f32 results of its shards to the ranks that own the samples ((N-1)/N of them
           leave the rank; row-wise shards send partial sums, a reduce-scatter of the same size);
           training's backward sends the pooled gradients back (the same size as the results).
  link     time = bytes / --link-gbs (each rank its own link; no overlap with the lookup assumed).

    build-venv/bin/python bench/torchrec_plans.py --dim 128 --ddr-gb 64 --gather-gbs 3.5
"""
import argparse
import contextlib
import io
import logging
import sys
import warnings

import torch

CRITEO_ROWS = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
               11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2,4,8,16,32", help="world sizes, comma-separated")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--ddr-gb", type=float, default=64.0, help="memory per rank TorchRec may plan with (GB)")
    p.add_argument("--batch", type=int, default=2048, help="per-rank batch b (weak scaling: B grows with N)")
    p.add_argument("--global-batch", type=int, default=0, help="fix B instead (strong scaling: b = B / N)")
    p.add_argument("--pooling", type=int, default=20, help="indices per sample and feature (L)")
    p.add_argument("--gather-gbs", type=float, required=True, help="one rank's lookup rate in GB/s of rows read")
    p.add_argument("--link-gbs", default="3.125,12.5", help="link bandwidths in GB/s (25 and 100 Gb/s)")
    p.add_argument("--row-wise", action="store_true", help="offer row-wise sharding on CPU too")
    return p.parse_args(argv)


def plan(torchrec, n, args):
    """TorchRec's plan for the 26 tables on n CPU ranks: {table: [(sharding type, rows, cols, rank)]},
    or the planner's error."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.types import ShardingType

    class Sharder(EmbeddingBagCollectionSharder):
        def sharding_types(self, compute_device_type):
            types = super().sharding_types(compute_device_type)
            if args.row_wise:
                types += [t.value for t in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE)
                          if t.value not in types]
            return types

    configs = [torchrec.EmbeddingBagConfig(name="t{}".format(k), embedding_dim=args.dim, num_embeddings=rows,
                                           feature_names=["f{}".format(k)]) for k, rows in enumerate(CRITEO_ROWS)]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    topology = Topology(world_size=n, compute_device="cpu", ddr_cap=int(args.ddr_gb * 1024 ** 3))
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=args.batch)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the planner prints its own report
            sharding = planner.plan(ebc, [Sharder()]).plan[""]
    except Exception as e:  # noqa: BLE001  (the planner's refusal is a result here)
        return None, "{}: {}".format(type(e).__name__, str(e).splitlines()[0])
    shards = {}
    for name, option in sharding.items():
        kind = option.sharding_type
        if option.sharding_spec is None:  # data-parallel: a replica on every rank
            shards[name] = [(kind, CRITEO_ROWS[int(name[1:])], args.dim, r) for r in range(n)]
        else:
            shards[name] = [(kind, s.shard_sizes[0], s.shard_sizes[1], s.placement.rank())
                            for s in option.sharding_spec.shards]
    return shards, None


def per_rank_costs(shards, n, args):
    """Per rank: (table bytes, rows looked up per batch, bytes gathered, bytes sent forward, bytes
    sent backward)."""
    b, big_b, L = args.batch, args.batch * n, args.pooling  # b = B / N under --global-batch
    memory, rows, gathered, sent_fwd, sent_bwd = ([0.0] * n for _ in range(5))
    for name, parts in shards.items():
        owners = {r for (_, _, _, r) in parts}
        for kind, nrows, cols, r in parts:
            memory[r] += nrows * cols * 4
            if kind == "data_parallel":
                looked = b * L
            elif kind in ("row_wise", "table_row_wise"):
                looked = big_b * L * nrows / CRITEO_ROWS[int(name[1:])]
            else:  # table-wise, column-wise, table-column-wise: every sample's indices
                looked = big_b * L
            rows[r] += looked
            gathered[r] += looked * cols * 4
            if kind != "data_parallel":
                results = big_b * cols * 4 * (n - 1) / n
                sent_fwd[r] += results
                sent_bwd[r] += results
        if parts[0][0] != "data_parallel":
            for r in range(n):  # every rank sends its samples' indices to the other owners
                sent_fwd[r] += b * (L * 8 + 4) * len(owners - {r})
    return memory, rows, gathered, sent_fwd, sent_bwd


def main(argv):
    args = parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    import torchrec
    links = [float(x) for x in args.link_gbs.split(",")]
    print("Criteo Terabyte, 26 tables, {:,} rows, D {} f32 ({:.1f} GB); batch {}, L {}; {} GB per rank; "
          "gather {} GB/s per rank; row-wise on CPU: {}".format(
              sum(CRITEO_ROWS), args.dim, sum(CRITEO_ROWS) * args.dim * 4 / 1e9,
              "B = {} (b = B / N)".format(args.global_batch) if args.global_batch
              else "b = {} per rank".format(args.batch), args.pooling, args.ddr_gb, args.gather_gbs, "offered" if args.row_wise else "not offered (TorchRec's CPU default)"))
    head = ("| ranks | plan (tables per sharding type) | max table GB / rank | max Mrows / rank / batch | lookup ms "
            "| a2a MB sent fwd / bwd | " + " | ".join("a2a ms fwd+bwd @ {:g} GB/s".format(x) for x in links) + " |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in [int(x) for x in args.ranks.split(",")]:
        if args.global_batch:
            args.batch = max(1, args.global_batch // n)
        shards, error = plan(torchrec, n, args)
        if shards is None:
            print("| {} | no plan: {} |".format(n, error[:110]) + " |" * (head.count("|") - 3))
            continue
        kinds = {}
        for parts in shards.values():
            kinds[parts[0][0]] = kinds.get(parts[0][0], 0) + 1
        memory, rows, gathered, fwd, bwd = per_rank_costs(shards, n, args)
        worst = max(range(n), key=lambda r: gathered[r])
        lookup_ms = gathered[worst] / (args.gather_gbs * 1e9) * 1e3
        sent = max(fwd[r] + bwd[r] for r in range(n))
        print("| {} | {} | {:.1f} | {:.2f} | {:.1f} | {:.1f} / {:.1f} | {} |".format(
            n, ", ".join("{} {}".format(v, k) for k, v in sorted(kinds.items())), max(memory) / 1e9,
            max(rows) / 1e6, lookup_ms, max(fwd) / 1e6, max(bwd) / 1e6,
            " | ".join("{:.1f}".format(sent / (x * 1e9) * 1e3) for x in links)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
