"""TorchRec's collections against shapejit's drop-in (shapejit.torchrec) on a DLRM-sized set:
26 tables with the Criteo Terabyte cardinalities of MLPerf's DLRM, each capped at --cap rows so the
set fits a shared machine, D = 64 / 128, B = 2048, pooling factor L uniform in [L/2, 3L/2]
(default L = 20), indices uniform over each table (no cache-friendly skew: every lookup is a row
fetched from memory, the case sharding is for). Per row of the table:
  - f32: torchrec.EmbeddingBagCollection (CPU: one F.embedding_bag per table, torch's FBGEMM
    kernels) vs shapejit.torchrec.EmbeddingBagCollection.from_torchrec of it (the same weights);
  - int8 / int4 / int2: torchrec's QuantEmbeddingBagCollection (fbgemm_gpu's CPU table-batched
    kernel) vs shapejit's collection made from it.
Each pair is checked bitwise before timing; times are the minimum and median of interleaved rounds
(bench/bench_timing.py), per forward call, with the lookup rate in millions of rows per second.

    build-venv/bin/python bench/torchrec_bench.py --markdown            # 1 and 2 threads
    build-venv/bin/python bench/torchrec_bench.py --cap 100000 --rounds 3   # a quick look

Needs torchrec 1.8.0 (installed with --no-deps, see README "TorchRec") and fbgemm-gpu-cpu 1.8.0."""
import argparse
import sys
import time

import torch

import shapejit
from bench_timing import time_min_median

# The 26 categorical features of Criteo Terabyte (MLPerf DLRM's day-23 cardinalities).
CRITEO_ROWS = [39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10, 2208,
               11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cap", type=int, default=1_000_000, help="rows per table at most (default 1e6)")
    p.add_argument("--dims", default="64,128", help="embedding dims, comma-separated")
    p.add_argument("--dtypes", default="f32,int8,int4,int2", help="table dtypes, comma-separated")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--pooling", type=int, default=20, help="mean indices per bag (L)")
    p.add_argument("--threads", default="1,2", help="torch.set_num_threads for both sides, comma-separated")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--target-us", type=float, default=200_000.0, help="length of one timed batch of calls")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return p.parse_args(argv)


def make_ebc(torchrec, rows, dim, gen):
    """A float collection, one feature per table, weights uniform in +-1/sqrt(rows) (DLRM's init)."""
    configs = [torchrec.EmbeddingBagConfig(name="t{}".format(k), embedding_dim=dim, num_embeddings=n,
                                           feature_names=["f{}".format(k)], pooling=torchrec.PoolingType.SUM)
               for k, n in enumerate(rows)]
    ebc = torchrec.EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    with torch.no_grad():
        for k, n in enumerate(rows):
            w = ebc.embedding_bags["t{}".format(k)].weight
            bound = (1.0 / n) ** 0.5
            w.uniform_(-bound, bound, generator=gen)
    return ebc.eval()


QUANT_DTYPES = {"int8": torch.qint8, "int4": torch.quint4x2, "int2": torch.quint2x4}


def make_quant_ebc(ebc, dtype):
    """torchrec's QuantEmbeddingBagCollection of ebc's tables in dtype (its from_float)."""
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC
    ebc.qconfig = torch.ao.quantization.QConfig(
        activation=torch.ao.quantization.PlaceholderObserver.with_args(dtype=torch.float),
        weight=torch.ao.quantization.PlaceholderObserver.with_args(dtype=QUANT_DTYPES[dtype]))
    return QuantEBC.from_float(ebc).eval()


def make_kjt(torchrec, rows, batch, pooling, gen):
    """A KeyedJaggedTensor of one feature per table: lengths uniform in [L/2, 3L/2], indices uniform."""
    lengths, values = [], []
    for n in rows:
        ln = torch.randint(pooling // 2, pooling + pooling // 2 + 1, (batch,), generator=gen)
        lengths.append(ln)
        values.append(torch.randint(0, n, (int(ln.sum()),), generator=gen))
    return torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=["f{}".format(k) for k in range(len(rows))], values=torch.cat(values), lengths=torch.cat(lengths))


def same_keyed_tensor(a, b):
    return a.keys() == b.keys() and torch.equal(a.values(), b.values())


def main(argv):
    args = parse_args(argv)
    try:
        import torchrec
        import shapejit.torchrec as sj_torchrec
    except ImportError as e:
        print("torchrec_bench: skipped, {}".format(e))
        return 0
    gen = torch.Generator().manual_seed(args.seed)
    rows = [min(n, args.cap) for n in CRITEO_ROWS]
    threads = [int(t) for t in args.threads.split(",")]
    print("torchrec_bench: {} tables, {:,} rows in all (cap {:,}), B {}, L ~{}, shapejit ISA {}, torch {}, "
          "torchrec {}".format(len(rows), sum(rows), args.cap, args.batch, args.pooling, shapejit.isa(),
                               torch.__version__, getattr(torchrec, "__version__", "?")))
    results = []
    for dim in [int(d) for d in args.dims.split(",")]:
        ebc = make_ebc(torchrec, rows, dim, gen)
        kjt = make_kjt(torchrec, rows, args.batch, args.pooling, gen)
        lookups = kjt.values().numel()
        for dtype in args.dtypes.split(","):
            t0 = time.perf_counter()
            peer = ebc if dtype == "f32" else make_quant_ebc(ebc, dtype)
            t1 = time.perf_counter()
            ours = sj_torchrec.EmbeddingBagCollection.from_torchrec(peer)
            t2 = time.perf_counter()
            with torch.no_grad():
                if not same_keyed_tensor(peer(kjt), ours(kjt)):
                    print("torchrec_bench: D {} {}: outputs differ; not timed".format(dim, dtype))
                    results.append((dim, dtype, None, None, None, lookups))
                    continue
                for n in threads:
                    torch.set_num_threads(n)
                    (p_min, p_med), (o_min, o_med) = time_min_median(
                        [lambda: peer(kjt), lambda: ours(kjt)], args.rounds, args.target_us)
                    results.append((dim, dtype, n, (p_min, p_med), (o_min, o_med), lookups))
                    if not args.markdown:
                        print("D {:4d} {:5s} t{}: torchrec {:9.0f} us, shapejit {:9.0f} us (min), speedup {:.2f}x, "
                              "{:.1f} vs {:.1f} Mrows/s".format(dim, dtype, n, p_min, o_min, p_min / o_min,
                                                                lookups / p_min, lookups / o_min))
            print("   D {} {}: built in {:.2f} s, shapejit's collection from it in {:.2f} s".format(
                dim, dtype, t1 - t0, t2 - t1))
            del peer, ours
        del ebc
    if args.markdown:
        print("| D | dtype | threads | TorchRec min / median (ms) | shapejit min / median (ms) | speedup (min) | "
              "Mrows/s TorchRec / shapejit |")
        print("|---|---|---|---|---|---|---|")
        for dim, dtype, n, p, o, lookups in results:
            if p is None:
                print("| {} | {} | - | outputs differ | | | |".format(dim, dtype))
                continue
            print("| {} | {} | {} | {:.2f} / {:.2f} | {:.2f} / {:.2f} | {:.2f}x | {:.1f} / {:.1f} |".format(
                dim, dtype, n, p[0] / 1e3, p[1] / 1e3, o[0] / 1e3, o[1] / 1e3, p[0] / o[0], lookups / p[0],
                lookups / o[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
