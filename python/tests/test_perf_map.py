"""SHAPEJIT_PERF_MAP=1 end to end: a Python process using the operators gets a
/tmp/perf-<pid>.map naming each compiled kernel at an executable address."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import ctypes, json, os, torch, shapejit
    w = torch.randn(100, 77)
    for mode in (0, 1, 2):
        shapejit.embedding_bag(w, torch.randint(0, 100, (40,)), torch.tensor([0, 7, 30]), mode=mode)
    group = shapejit.linear_group([torch.randn(48, 32)], torch.randn(48), rows=[16, 16, 16])
    x = torch.randn(5, 32)
    group.run([x, x, x])
    execs = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            addr, perms = line.split()[:2]
            if perms[2] == "x":
                execs.append([int(a, 16) for a in addr.split("-")])
    # The embedding-bag cache's compilations, read through the C ABI of the loaded libshapejit.
    stats = (ctypes.c_int64 * 9)()
    assert ctypes.CDLL("libshapejit.so.0").shapejit_get_kernel_cache_stats(stats) == 0
    print(json.dumps({"pid": os.getpid(), "exec": execs, "compilations": stats[2]}))
""")

LINE = re.compile(r"^([0-9a-f]+) ([0-9a-f]+) (\S+)$")


def run_child(enabled):
    env = dict(os.environ, SHAPEJIT_PERF_MAP="1" if enabled else "0")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True, text=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    path = "/tmp/perf-{}.map".format(info["pid"])
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = None
    finally:
        if os.path.exists(path):
            os.remove(path)
    return info, lines


def entries(info, lines):
    """Parses every line strictly; each must lie inside one executable mapping of the child."""
    parsed = []
    for line in lines:
        m = LINE.match(line)
        assert m, "malformed perf map line: {!r}".format(line)
        start, size, name = int(m.group(1), 16), int(m.group(2), 16), m.group(3)
        assert 0 < size < (1 << 20), line
        assert any(lo <= start and start + size <= hi for lo, hi in info["exec"]), \
            "{} is not inside an executable mapping".format(line)
        parsed.append((start, size, name))
    return parsed


def test_embedding_bag_kernels_are_named():
    info, lines = run_child(True)
    if info["compilations"] == 0:
        pytest.skip("no kernel was compiled (SHAPEJIT_ISA=scalar or a host without a JIT ISA)")
    assert lines is not None, "SHAPEJIT_PERF_MAP=1 wrote no map"
    names = [name for _, _, name in entries(info, lines)]
    embag = [n for n in names if n.startswith("embag.")]
    assert len(embag) == info["compilations"], names
    # One kernel per mode, named canonically: embag.<isa>.f32.d77.<mode>.i64.o64
    assert sorted(n.split(".")[4] for n in embag) == ["max", "mean", "sum"], names
    for n in embag:
        assert re.fullmatch(r"embag\.(avx512|avx2|neon)\.f32\.d77\.(sum|mean|max)\.i64\.o64", n), n
    assert len(set(names)) == len(names), "a kernel was mapped twice: {}".format(names)


def test_linear_group_kernels_are_named():
    info, lines = run_child(True)
    assert lines is not None
    gemm = [name for _, _, name in entries(info, lines) if name.startswith("gemm.")]
    assert gemm, "no gemm.* kernel in the map"
    for n in gemm:
        assert re.fullmatch(r"gemm\.(avx512|avx2|neon)\.\d+x\d+\.k\d+\S*", n), n


def test_disabled_writes_nothing():
    _, lines = run_child(False)
    assert lines is None
