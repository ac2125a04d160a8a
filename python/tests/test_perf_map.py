"""SHAPEJIT_PERF_MAP=1 end to end: a Python process using the operators gets a
/tmp/perf-<pid>.map naming each compiled kernel at an executable address. SHAPEJIT_PERF_JITDUMP=1:
the same kernels, under the same names, in <dir>/jit-<pid>.dump (perf's jitdump, docs/profiling.md)."""
import json
import os
import re
import struct
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import json, os, torch, shapejit
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
    # The kernel caches' compilations (embedding bags' and the group's GEMM kernels together).
    compilations = shapejit.kernel_cache_stats()["compilations"]
    print(json.dumps({"pid": os.getpid(), "exec": execs, "compilations": compilations}))
""")

LINE = re.compile(r"^([0-9a-f]+) ([0-9a-f]+) (\S+)$")


def run_child(enabled, **extra_env):
    env = dict(os.environ, SHAPEJIT_PERF_MAP="1" if enabled else "0", **extra_env)
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
    gemm = [n for n in names if n.startswith("gemm.")]
    # Every compiled kernel is named once, the GEMM kernels counted in the same statistics.
    assert len(embag) + len(gemm) == info["compilations"], names
    # One kernel per mode, named canonically: embag.<isa>.f32.d77.<mode>.i64.o64, then what the
    # prefetch policy chose (runtime/embag/prefetch_policy.hpp): .pf0 when the table stays cached, else
    # a distance other than 16 as .pfN and .head for head-of-row prefetch (AVX-512 max here)
    assert sorted(n.split(".")[4] for n in embag) == ["max", "mean", "sum"], names
    for n in embag:
        assert re.fullmatch(r"embag\.(avx512|avx2|neon)\.f32\.d77\.(sum|mean|max)\.i64\.o64(\.pf\d+)?(\.head)?", n), n
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


def read_jitdump(path):
    """Parses a jitdump strictly (perf's jitdump-specification.txt): the header, then records;
    returns the header fields and the JIT_CODE_LOAD records as (addr, size, name, code)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, total, elf_mach, pad, pid, _, flags = struct.unpack_from("=IIIIIIQQ", data, 0)
    header = dict(magic=magic, version=version, total=total, elf_mach=elf_mach, pad=pad, pid=pid, flags=flags)
    loads, at = [], total
    while at < len(data):
        rid, size, _ = struct.unpack_from("=IIQ", data, at)
        assert size >= 16 and at + size <= len(data), "record at {} overruns the file".format(at)
        if rid == 0:
            _, _, vma, code_addr, code_size, _ = struct.unpack_from("=IIQQQQ", data, at + 16)
            name_end = data.index(b"\0", at + 56)
            code = data[name_end + 1:at + size]
            assert len(code) == code_size and code_addr == vma
            loads.append((vma, code_size, data[at + 56:name_end].decode(), code))
        at += size
    return header, loads


def test_jitdump_names_the_same_kernels_as_the_map(tmp_path):
    info, lines = run_child(True, SHAPEJIT_PERF_JITDUMP="1", SHAPEJIT_PERF_JITDUMP_DIR=str(tmp_path))
    if info["compilations"] == 0:
        pytest.skip("no kernel was compiled (SHAPEJIT_ISA=scalar or a host without a JIT ISA)")
    path = tmp_path / "jit-{}.dump".format(info["pid"])
    assert path.exists(), "SHAPEJIT_PERF_JITDUMP=1 wrote no {}".format(path)
    header, loads = read_jitdump(str(path))
    assert header["magic"] == 0x4A695444 and header["version"] == 1 and header["total"] == 40
    assert header["pid"] == info["pid"] and header["flags"] == 0
    assert header["elf_mach"] in (62, 183)  # EM_X86_64, EM_AARCH64
    # The map and the dump describe the same kernels at the same addresses, in the same order.
    assert [(a, s, n) for a, s, n, _ in loads] == entries(info, lines)
    assert any(n.startswith("embag.") for _, _, n, _ in loads)
    assert any(n.startswith("gemm.") for _, _, n, _ in loads)
