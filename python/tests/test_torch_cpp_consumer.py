"""tests/torch_cpp_consumer: a libtorch C++ program loads the shapejit extension with dlopen and
runs a TorchScript model that Python saved (scripted_model.py), with Python's results. Built
against the torch this interpreter runs; skipped where cmake or a C++ compiler is missing. One
C++ file, about a minute to build on a loaded 2-core host."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import scripted_model

PROJECT = Path(__file__).resolve().parents[2] / "tests" / "torch_cpp_consumer"


def _tools_missing():
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    return "needs {} on PATH".format(" and ".join(missing)) if missing else None


@pytest.mark.skipif(_tools_missing() is not None, reason=str(_tools_missing()))
def test_cpp_program_runs_the_scripted_model(sj, tmp_path):
    if not PROJECT.is_dir():
        pytest.skip("{} is not here (an installed package without the repository)".format(PROJECT))
    model = tmp_path / "model.pt"
    want = scripted_model.save(sj, model)
    build = tmp_path / "build"
    torch_dir = Path(torch.__file__).resolve().parent
    # The torch directory itself too, or CMake may find another libtorch's libraries (Debian's).
    prefix = "{};{}".format(torch.utils.cmake_prefix_path, torch_dir)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = subprocess.run(["cmake", "-S", str(PROJECT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                                "-DCMAKE_PREFIX_PATH=" + prefix] + generator, capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    built = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    run = subprocess.run([str(build / "run_scripted_model"), str(model), str(sj.library_path)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("before: refused: Unknown builtin op: shapejit::"), lines[0]
    outputs = [line for line in lines if line.startswith("out ")]
    assert len(outputs) == len(want)
    for k, (line, w) in enumerate(zip(outputs, want)):
        got = torch.tensor([float(v) for v in line.split(":", 1)[1].split()], dtype=torch.float64)
        # Printed with 9 significant digits, which read back to the same float32.
        assert torch.equal(got.float(), w.reshape(-1).float()), "output {}: {} against {}".format(k, got, w.reshape(-1))
