"""tools/plot_bench.py on a synthetic Google Benchmark JSON file: name parsing, the limits it
derives, the charts it writes and the Markdown tables."""
import importlib.util
import json
from pathlib import Path

import pytest

matplotlib = pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "plot_bench.py"


@pytest.fixture(scope="module")
def plot_bench():
    spec = importlib.util.spec_from_file_location("plot_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_json(tmp_path):
    rows = []
    for t in (1, 2):
        for mode in ("sum", "max"):
            for dim in (32, 64, 128):
                for impl, gbps in (("jit", 100 + dim / 8), ("aten", 60.0), ("ref", 20.0), ("limit", 150.0)):
                    if t == 2 and impl in ("aten", "ref"):
                        continue
                    rows.append({"name": "embedding_bag/{}/{}/4096x{}/256x32/t{}".format(impl, mode, dim, t),
                                 "run_type": "iteration", "GBps": gbps * t})
        rows.append({"name": "embedding_bag/jit/sum/1000000x128/256x32/t{}".format(t), "GBps": 9.5})
        rows.append({"name": "embedding_bag/limit/sum/1000000x128/256x32/t{}".format(t), "GBps": 11.0})
        rows.append({"name": "linear_group/jit/self_e768_m128/t{}".format(t), "GFLOPs": 250.0 * t,
                     "vs_peak": 0.9})
        rows.append({"name": "linear_group/onednn/self_e768_m128/t{}".format(t), "GFLOPs": 200.0 * t,
                     "vs_peak": 0.72})
        rows.append({"name": "linear_group/jit/decode_e4096_m1/t{}".format(t), "GFLOPs": 5.0, "vs_peak": 0.02,
                     "GBps": 20.0, "vs_bw": 0.5})
    rows.append({"name": "linear_group/fma_peak/zmm/t1", "GFLOPs": 280.0})
    rows.append({"name": "embedding_bag/jit/mean/4096x32/256x32/t1", "error_occurred": True,
                 "error_message": "mismatch"})
    rows.append({"name": "embedding_bag/jit/sum/4096x32/256x32/t1", "run_type": "aggregate", "GBps": 1.0})
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"context": {"num_cpus": 2, "mhz_per_cpu": 2600, "date": "2026-11-30T00:00:00"},
                                "benchmarks": rows}))
    return path


def test_rows_are_parsed_by_name(plot_bench, tmp_path):
    rows, context = plot_bench.load_rows(bench_json(tmp_path))
    assert context["num_cpus"] == 2
    embag = plot_bench.parse_embag(rows)
    # 2 modes x 3 dims x (4 impls at t1 + 2 at t2) + 2 cold rows per thread count; the error row
    # and the aggregate row are dropped.
    assert len(embag) == 2 * 3 * (4 + 2) + 4
    first = embag[0]
    assert (first["impl"], first["mode"], first["rows"], first["dim"], first["shape"], first["threads"]) == \
        ("jit", "sum", 4096, 32, "256x32", 1)
    assert plot_bench.EMBAG.match("embedding_bag/jit/sum/4096x32/256xzipf32/t2/real_time")
    linear = plot_bench.parse_linear(rows)
    assert {r["impl"] for r in linear} == {"jit", "onednn"}  # the fma_peak row is a limit, not a peer
    by = {(r["impl"], r["case"], r["threads"]): r for r in linear}
    assert by[("jit", "self_e768_m128", 1)]["limit"] == pytest.approx(250.0 / 0.9)
    assert by[("jit", "decode_e4096_m1", 1)]["limit"] == pytest.approx(10.0)  # bandwidth-bound: GFLOPs / vs_bw


def test_charts_are_written(plot_bench, tmp_path):
    out = tmp_path / "img"
    assert plot_bench.main([str(bench_json(tmp_path)), "--out-dir", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["embedding_bag_cases_t1.png", "embedding_bag_cases_t2.png", "embedding_bag_t1.png",
                     "embedding_bag_t2.png", "linear_group.png"]
    import matplotlib.image
    for name in names:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        height, width = matplotlib.image.imread(str(out / name)).shape[:2]
        assert width >= 500 and height >= 400, (name, width, height)


def test_markdown_tables(plot_bench, tmp_path, capsys):
    assert plot_bench.main([str(bench_json(tmp_path)), "--out-dir", str(tmp_path / "img"), "--markdown"]) == 0
    text = capsys.readouterr().out
    assert "| embedding_bag case | threads | jit | aten | ref | limit |" in text
    assert "| sum 4096x64 256x32 | 1 | 108.0 | 60.0 | 20.0 | 150.0 |" in text
    assert "| self_e768_m128 | 2 | 500.0 | 400.0 | 555.6 |" in text


def test_a_file_without_rows_is_an_error(plot_bench, tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"benchmarks": [{"name": "other/thing", "GBps": 1.0}]}))
    assert plot_bench.main([str(path), "--out-dir", str(tmp_path / "img")]) == 1
    assert not (tmp_path / "img").exists()
