"""bench/dlrm_bench.py's DLRM-style model and bench/tbe_peers_bench.py's peers at toy sizes: the
model traces, optimize makes its 26 bags one concatenated group with torch's output bit for bit,
and every table-batched peer passes its check (fbgemm_gpu's when it can be imported)."""
import argparse
import sys
from pathlib import Path

import pytest
import torch

from helpers import replay

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def benches():
    sys.path.insert(0, str(BENCH))
    try:
        import dlrm_bench
        import tbe_peers_bench
        yield dlrm_bench, tbe_peers_bench
    finally:
        sys.path.remove(str(BENCH))


def toy_args(**kw):
    args = dict(dlrm_batch=8, dlrm_len=3.0, dlrm_max_mb=1, dlrm_threads="1", dlrm_rounds=1, dlrm_batch_us=1.0,
                threads=1, markdown=True)
    args.update(kw)
    return argparse.Namespace(**args)


def test_dlrm_model_becomes_one_concatenated_group(sj, benches, seed):
    dlrm_bench, _ = benches
    gen = torch.Generator().manual_seed(seed)
    rows = dlrm_bench.table_rows(26, 1000, 200000, 2 << 20, 64, gen)
    assert len(rows) == 26 and min(rows) >= 1000 and sum(rows) * 64 * 4 <= (2 << 20) + 26 * 1000 * 64 * 4  # cap + floors
    model = dlrm_bench.DLRM(rows, dim=16, bottom=(32,), top=(32,), gen=gen).eval()
    dense = torch.rand(8, 13, generator=gen)
    indices, offsets = dlrm_bench.sparse_inputs(rows, 8, 3.0, gen)
    with torch.no_grad():
        optimized, report = sj.optimize(model)
        expected, actual = model(dense, indices, offsets), optimized(dense, indices, offsets)
    assert [(len(g.members), g.concat) for g in report.groups] == [(26, True)], replay(str(report))
    assert torch.equal(actual, expected), replay("optimized DLRM differs")


def test_bench_sections_run_and_check(sj, benches, capsys):
    dlrm_bench, tbe_peers_bench = benches
    dlrm_bench.run(toy_args(), torch.Generator().manual_seed(0))
    tbe_peers_bench.run(toy_args(), torch.Generator().manual_seed(0))
    out = capsys.readouterr().out
    assert "| 1 | whole forward |" in out and "int2 shapejit EmbeddingBagGroup.concat" in out
    fb, why = tbe_peers_bench.import_fbgemm()
    if fb is None:
        assert "fbgemm_gpu rows skipped" in out and why in out
    else:
        assert "int4 fbgemm_gpu IntNBitTableBatchedEmbeddingBagsCodegen" in out


def test_fbgemm_rows_layout(benches):
    """The benchmark's own fbgemm-style quantization: codes packed low bits first, the fp16 scale
    and bias, and the table they stand for within half a step of the input."""
    _, tbe_peers_bench = benches
    table = torch.tensor([[0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 0.25, 3.0]])
    packed, qparams, deq = tbe_peers_bench.fbgemm_rows(table, 4)
    scale, bias = qparams.view(torch.float16)[0].tolist()
    assert bias == -1.0 and scale == pytest.approx(4.0 / 15, rel=1e-3)
    codes = [(int(b) >> s) & 15 for b in packed[0] for s in (0, 4)]
    assert codes == [round((x + 1) / scale) for x in table[0].tolist()]
    assert (deq - table).abs().max() <= scale / 2 + 1e-6


def test_without_fbgemm_rows_are_skipped(benches, monkeypatch):
    _, tbe_peers_bench = benches
    monkeypatch.setitem(sys.modules, "fbgemm_gpu", None)  # import fbgemm_gpu now raises ImportError
    fb, why = tbe_peers_bench.import_fbgemm()
    assert fb is None and "fbgemm_gpu" in why
