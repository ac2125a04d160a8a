"""A DLRM-style model for torch_ops_bench.py --sections dlrm: 26 sparse features through
nn.EmbeddingBag tables (log-uniform cardinalities), 13 dense features through a bottom MLP, a dot
interaction of the 27 vectors, a top MLP. Timed as torch eager, shapejit.optimize with the bags
swapped one by one (group_bags=False), and shapejit.optimize with the bags grouped (the
GraphModule whose 26 calls are one EmbeddingBagGroup.concat), at each thread count."""
import math

import torch

import shapejit
from bench_timing import time_min_median


def table_rows(tables, low, high, max_bytes, dim, gen):
    """Log-uniform cardinalities in [low, high], scaled down together when their f32 tables
    would exceed max_bytes (so the model fits a shared machine)."""
    u = torch.rand(tables, generator=gen, dtype=torch.float64)
    rows = [int(math.exp(math.log(low) + x * (math.log(high) - math.log(low)))) for x in u.tolist()]
    total = sum(rows) * dim * 4
    if total > max_bytes:
        rows = [max(low, int(r * max_bytes / total)) for r in rows]
    return rows


def mlp(sizes, last_sigmoid=False):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        layers.append(torch.nn.Sigmoid() if last_sigmoid and i == len(sizes) - 2 else torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    """DLRM's forward: bottom MLP on the dense features, one bag per sparse feature, the pairwise
    dots of the 27 vectors (strictly lower triangle) next to the dense vector, a top MLP."""

    def __init__(self, rows, dim=64, dense_in=13, bottom=(512, 256), top=(512, 256), gen=None):
        super().__init__()
        self.emb_l = torch.nn.ModuleList()
        for n in rows:
            bag = torch.nn.EmbeddingBag(n, dim, mode="sum")
            with torch.no_grad():
                bag.weight.uniform_(-(1.0 / n) ** 0.5, (1.0 / n) ** 0.5, generator=gen)
            self.emb_l.append(bag)
        self.bot_l = mlp((dense_in,) + tuple(bottom) + (dim,))
        vectors = len(rows) + 1
        li, lj = torch.tril_indices(vectors, vectors, offset=-1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top_l = mlp((dim + li.numel(),) + tuple(top) + (1,), last_sigmoid=True)
        self.dim = dim

    def embeddings(self, indices, offsets):
        """The 26 pooled vectors side by side, [B, 26 * dim] (the stage timed alone)."""
        return torch.cat([self.emb_l[k](indices[k], offsets[k]) for k in range(len(self.emb_l))], dim=1)

    def forward(self, dense, indices, offsets):
        x = self.bot_l(dense)
        ly = [self.emb_l[k](indices[k], offsets[k]) for k in range(len(self.emb_l))]
        t = torch.cat([x] + ly, dim=1).view(x.shape[0], -1, self.dim)
        z = torch.bmm(t, t.transpose(1, 2))
        return self.top_l(torch.cat([x, z[:, self.li, self.lj]], dim=1))


def sparse_inputs(rows, batch, mean_len, gen):
    """Per table: indices uniform over its rows and bag starts, bag lengths Poisson(mean_len)."""
    indices, offsets = [], []
    for n in rows:
        lengths = torch.poisson(torch.full((batch,), float(mean_len)), generator=gen).long()
        starts = torch.zeros(batch, dtype=torch.long)
        starts[1:] = lengths.cumsum(0)[:-1]
        indices.append(torch.randint(0, n, (int(lengths.sum()),), generator=gen))
        offsets.append(starts)
    return indices, offsets


def run(args, gen):
    """Prints the DLRM lines (and a Markdown table with --markdown) for each thread count."""
    rows = table_rows(26, 1000, 200000, args.dlrm_max_mb << 20, 64, gen)
    model = DLRM(rows, gen=gen).eval()
    dense = torch.rand(args.dlrm_batch, 13, generator=gen)
    indices, offsets = sparse_inputs(rows, args.dlrm_batch, args.dlrm_len, gen)
    lookups = sum(i.numel() for i in indices)
    print("dlrm: 26 tables of {}..{} rows (sum {}, {:.0f} MB f32), D=64, B={}, Poisson({}) lengths ({} lookups), "
          "bottom MLP 13-512-256-64, dot interaction, top MLP {}-512-256-1".format(
              min(rows), max(rows), sum(rows), sum(rows) * 256 / 2 ** 20, args.dlrm_batch, args.dlrm_len, lookups,
              64 + model.li.numel()), flush=True)
    with torch.no_grad():
        swapped, _ = shapejit.optimize(model, group_bags=False)
        grouped, report = shapejit.optimize(model)
        if len(report.groups) != 1 or not report.groups[0].concat:
            raise SystemExit("dlrm: expected one concatenated bag group, got:\n{}".format(report))
        group = getattr(grouped, report.groups[0].name)
        stage = (lambda: model.embeddings(indices, offsets),
                 lambda: swapped.embeddings(indices, offsets),
                 lambda: group(indices, offsets))
        forward = (lambda: model(dense, indices, offsets),
                   lambda: swapped(dense, indices, offsets),
                   lambda: grouped(dense, indices, offsets))
        want_stage, want = stage[0](), forward[0]()
        for f in stage[1:]:
            if not torch.equal(f(), want_stage):
                raise SystemExit("dlrm: shapejit's embedding stage differs from torch's")
        for f in forward[1:]:
            if not torch.equal(f(), want):
                raise SystemExit("dlrm: the optimized model's output differs from torch's")
        results = []
        for threads in (int(t) for t in args.dlrm_threads.split(",")):
            torch.set_num_threads(threads)
            t = time_min_median(stage + forward, args.dlrm_rounds, args.dlrm_batch_us)
            results.append((threads, t))
            for what, part in (("embedding stage", t[:3]), ("whole forward", t[3:])):
                print("dlrm {} thread(s) {:16} eager {:9.0f} / {:9.0f} us, swapped bags {:9.0f} / {:9.0f} us "
                      "({:.2f}x), grouped {:9.0f} / {:9.0f} us ({:.2f}x)  [min / median]".format(
                          threads, what, part[0][0], part[0][1], part[1][0], part[1][1], part[0][0] / part[1][0],
                          part[2][0], part[2][1], part[0][0] / part[2][0]), flush=True)
        torch.set_num_threads(args.threads)
    if args.markdown:
        print("| threads | part | torch eager us (min / median) | optimize, bags swapped | optimize, bags grouped |")
        print("|---|---|---|---|---|")
        for threads, t in results:
            for what, part in (("embedding stage", t[:3]), ("whole forward", t[3:])):
                print("| {} | {} | {:.0f} / {:.0f} | {:.0f} / {:.0f} ({:.2f}x) | {:.0f} / {:.0f} ({:.2f}x) |".format(
                    threads, what, part[0][0], part[0][1], part[1][0], part[1][1], part[0][0] / part[1][0],
                    part[2][0], part[2][1], part[0][0] / part[2][0]))
