"""TorchRec-sharded collections with shapejit computing each rank's lookups
(shapejit.torchrec.sharding): 2 ranks on localhost over gloo, launched as two processes of
torchrec_sharded_worker.py, each bounded in time; a rank that fails or hangs fails the test with
both ranks' output. Skipped when torchrec (and fbgemm_gpu) is not installed."""
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

try:  # any ImportError (a torchrec whose own imports fail too), not only a missing module
    import fbgemm_gpu  # noqa: F401
    import torchrec  # noqa: F401
except ImportError as e:
    pytest.skip("TorchRec sharding needs fbgemm-gpu-cpu 1.8.0 and torchrec 1.8.0 (pip install --no-deps torchrec): "
                "{}".format(e), allow_module_level=True)

WORKER = Path(__file__).with_name("torchrec_sharded_worker.py")
WORLD = 2
TIMEOUT_S = 150  # per check, both ranks together; a quiet run takes ~30 s


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(check, world=WORLD):
    """Runs the worker's `check` on `world` ranks; returns every rank's output, or fails with it."""
    env = dict(os.environ)
    package_dir = str(Path(__import__("shapejit").__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_dir, env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    port = _free_port()
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(world)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(rank), str(world), str(port), check],
                              stdout=logs[rank], stderr=subprocess.STDOUT, env=env, cwd=tempfile.gettempdir())
             for rank in range(world)]
    deadline = time.monotonic() + TIMEOUT_S
    failed = None
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            failed = failed or "rank {} did not finish within {} s".format(rank, TIMEOUT_S)
        if proc.returncode not in (0, None):
            failed = failed or "rank {} exited with code {}".format(rank, proc.returncode)
        if failed:
            break
    for proc in procs:  # a dead rank leaves the others waiting in a collective: end them
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    outputs = []
    for rank, log in enumerate(logs):
        log.seek(0)
        outputs.append(log.read())
        log.close()
    if failed is None and any(p.returncode != 0 for p in procs):
        failed = "exit codes {}".format([p.returncode for p in procs])
    if failed:
        pytest.fail("{} ({}); outputs:\n{}".format(failed, check, "\n".join(
            "---- rank {} ----\n{}".format(r, _tail(o)) for r, o in enumerate(outputs))))
    return outputs


def _tail(text, lines=60):
    return "\n".join(text.splitlines()[-lines:])


def _reports(outputs, word):
    return [line for o in outputs for line in o.splitlines() if line.startswith("[") and word in line]


def test_training_table_row_and_column_wise_matches_torchrec():
    """TorchRec's planner (ParameterConstraints: TW, RW, CW tables, a shared table, FUSED kernel,
    EXACT_SGD) and DistributedModelParallel; sum (weighted and not) and mean pooling: every forward
    bitwise TorchRec's own kernels' on the same shards and close to the unsharded collection, and
    after 3 steps every local shard bitwise TorchRec's."""
    outputs = run_ranks("train")
    done = _reports(outputs, "fused SGD steps: shards == TorchRec's (bitwise)")
    assert len(done) == 4 * WORLD, "\n".join(_tail(o) for o in outputs)
    assert all("[rank {}] ok".format(r) in o for r, o in enumerate(outputs))


def test_inference_sharding_of_quantized_collection_matches_torchrec():
    """TorchRec's inference sharding (shard_quant_model, one process holding both ranks' shards on
    CPU) of int8, int4 and int2 QuantEmbeddingBagCollections, table-, row- and column-wise, sum
    (weighted and not) and mean: shapejit's lookups bitwise TorchRec's on the same shards, and
    bitwise (or, for row-wise weighted sums, within 3e-8) the unsharded collection where TorchRec's
    own sharded output is the unsharded one (the worker says where it is not, and why)."""
    outputs = run_ranks("infer", world=1)
    done = _reports(outputs, "== TorchRec sharded (bitwise)")
    assert len(done) == 3 * 3 * 3, outputs[0][-3000:]
    assert "[infer] ok" in outputs[0]
    assert sum("vs unsharded: bitwise" in line for line in done) >= 12, "\n".join(done)
