"""A TorchScript model with shapejit modules, saved to disk, loaded by a fresh interpreter: torch
refuses it until the extension is loaded (torch's unknown-op error), and runs it after
`import shapejit` or after torch.ops.load_library(<libshapejit_torch_ops.so>) alone, with the
saving process's results."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import scripted_model

HERE = Path(__file__).resolve().parent

# Run in a fresh interpreter: loads argv[1], runs it on scripted_model.inputs() and saves the
# outputs to argv[2]. PRELUDE is what the process does first.
RUNNER = """
import sys
import torch
sys.path.insert(0, {tests!r})
{prelude}
import scripted_model
assert {check_no_package} or "shapejit" not in sys.modules, "the shapejit package was imported"
model = torch.jit.load(sys.argv[1])
with torch.no_grad():
    torch.save(tuple(model(*scripted_model.inputs())), sys.argv[2])
"""


def run_fresh(prelude, model_path, out_path):
    code = RUNNER.format(tests=str(HERE), prelude=prelude, check_no_package=prelude.startswith("import shapejit"))
    return subprocess.run([sys.executable, "-c", code, str(model_path), str(out_path)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


@pytest.fixture(scope="module")
def saved(sj, tmp_path_factory):
    path = tmp_path_factory.mktemp("scripted") / "model.pt"
    return path, scripted_model.save(sj, path)


def assert_same_outputs(got, want):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if k < 4:  # embedding bags: a fixed order of operations, the same bits in any process
            assert torch.equal(g, w), "output {} differs".format(k)
        else:  # attention: the same engine on the same host; a bound would hide nothing here
            torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_loading_without_shapejit_fails_with_torchs_unknown_op_error(saved, tmp_path):
    r = run_fresh("", saved[0], tmp_path / "out.pt")
    assert r.returncode != 0, "the model loaded without the extension"
    assert "Unknown builtin op: shapejit::" in r.stderr, r.stderr[-2000:]


def test_loading_after_import_shapejit_runs_the_model(saved, tmp_path):
    r = run_fresh("import shapejit", saved[0], tmp_path / "out.pt")
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_outputs(torch.load(tmp_path / "out.pt"), saved[1])


def test_loading_after_load_library_alone_runs_the_model(sj, saved, tmp_path):
    # What a serving process that never imports the shapejit package does.
    r = run_fresh("torch.ops.load_library({!r})".format(str(sj.library_path)), saved[0], tmp_path / "out.pt")
    assert r.returncode == 0, r.stderr[-2000:]
    assert_same_outputs(torch.load(tmp_path / "out.pt"), saved[1])
