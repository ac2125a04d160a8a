"""README.md's Python samples, run as they are written (tools/readme_samples.py finds them and
checks that every block is marked; ctest readme.samples runs the C and C++ ones)."""
import importlib.util
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(ROOT, "README.md")


def _extractor():
    spec = importlib.util.spec_from_file_location("readme_samples", os.path.join(ROOT, "tools", "readme_samples.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLES = [s for s in _extractor().samples(README) if s.lang == "python"]


def test_readme_has_python_samples():
    assert SAMPLES, "README.md has no <!-- sample: NAME --> python block: nothing would be checked"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_readme_sample_runs(sample):
    # The TorchRec samples need the optional torchrec (README, "TorchRec"), which a venv may lack.
    if re.search(r"^(import|from) torchrec\b", sample.code, re.M):
        pytest.importorskip("torchrec", reason="sample {} needs torchrec, which is not importable".format(sample.name),
                            exc_type=ImportError)
    # Padding with blank lines makes a traceback's line number the README's.
    code = compile("\n" * (sample.line - 1) + sample.code, README, "exec")
    exec(code, {"__name__": "readme_sample_" + sample.name.replace("-", "_")})
