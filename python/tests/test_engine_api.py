"""The engine as Python sees it: shapejit.__version__ (one version in version.h, setup.py and the
extension), isa() (the engine's choice, as jitdump reports it), kernel_cache_stats(), the thread
rule (follow torch.set_num_threads unless shapejit.set_num_threads(n > 0)), and which files an
installed package loads (SHAPEJIT_EXPECT_PACKAGE_UNDER, set by tools/check_python_install.sh)."""
import os
import re
import runpy
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
KNOWN_ISAS = {"avx512", "avx2", "neon", "scalar"}
STAT_FIELDS = {"hits", "misses", "compilations", "failed_compilations", "compile_time_ns", "code_bytes", "kernels",
               "generic_fallbacks", "code_limit_bytes", "reference_linear_groups"}


def header_version():
    text = (ROOT / "include" / "shapejit" / "version.h").read_text()
    parts = [re.search(r"^#define SHAPEJIT_VERSION_{} (\d+)$".format(p), text, re.M).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    string = re.search(r'^#define SHAPEJIT_VERSION_STRING "([^"]+)"$', text, re.M).group(1)
    assert string == ".".join(parts), "version.h: SHAPEJIT_VERSION_STRING {} disagrees with {}".format(
        string, ".".join(parts))
    return string


def test_version_is_the_header_and_setup_version(sj):
    expected = header_version()
    assert sj.__version__ == expected
    assert torch.ops.shapejit.version() == expected
    setup_version = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_for_tests")["read_version"]()
    assert setup_version == expected, "setup.py reads {}, version.h says {}".format(setup_version, expected)


def test_a_wheel_requires_the_torch_minor_release_it_was_built_against():
    # setup.py's torch_requirement goes into the wheel's Requires-Dist (tools/check_wheel.sh
    # reads it there): the extension links torch's C++ ABI, which holds within X.Y only.
    requirement = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_for_tests")["torch_requirement"]()
    major, minor = re.match(r"(\d+)\.(\d+)", torch.__version__).groups()
    assert requirement == "torch=={}.{}.*".format(major, minor)


def jitdump_path():
    """SHAPEJIT_JITDUMP, else jitdump on PATH, else the repository's build/ (None when none is)."""
    candidates = (os.environ.get("SHAPEJIT_JITDUMP"), shutil.which("jitdump"), ROOT / "build" / "tools" / "jitdump")
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def test_isa_is_the_engines_choice(sj):
    isa = sj.isa()
    assert isa in KNOWN_ISAS
    assert isa == torch.ops.shapejit.isa()
    jitdump = jitdump_path()
    if jitdump is None:
        pytest.skip("no jitdump to compare with (set SHAPEJIT_JITDUMP or build build/tools/jitdump); isa() = " + isa)
    listing = subprocess.run([str(jitdump), "list-isas"], check=True, capture_output=True, text=True).stdout
    match = re.search(r"^engine\s+isa (\S+)", listing, re.M)
    assert match, "{} list-isas printed no 'engine isa' line:\n{}".format(jitdump, listing)
    assert isa == match.group(1), "shapejit.isa() = {}, {} selects {}".format(isa, jitdump, match.group(1))


def test_kernel_cache_stats_count_a_new_shape(sj):
    before = sj.kernel_cache_stats()
    assert set(before) == STAT_FIELDS
    assert all(isinstance(v, int) and v >= 0 for v in before.values()), before
    # A width and mode no other test uses, so this call compiles a kernel of its own.
    weight = torch.randn(50, 173)
    indices = torch.tensor([3, 7, 7, 49], dtype=torch.int32)
    offsets = torch.tensor([0, 1], dtype=torch.int32)
    out = sj.embedding_bag(weight, indices, offsets, mode=2)[0]
    assert torch.equal(out, torch.nn.functional.embedding_bag(indices, weight, offsets, mode="max"))
    after = sj.kernel_cache_stats()
    assert after["misses"] == before["misses"] + 1, (before, after)
    assert after["compilations"] == before["compilations"] + 1, (before, after)
    assert after["kernels"] == before["kernels"] + 1, (before, after)
    assert after["code_bytes"] > before["code_bytes"], (before, after)
    sj.embedding_bag(weight, indices, offsets, mode=2)
    again = sj.kernel_cache_stats()
    assert again["hits"] == after["hits"] + 1 and again["misses"] == after["misses"], (after, again)


@pytest.fixture
def torch_threads():
    """Restores torch's thread count and shapejit's following rule after the test."""
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)
    torch.ops.shapejit.set_num_threads(0)


def small_call(sj):
    sj.embedding_bag(torch.ones(4, 8), torch.tensor([0, 1, 2]), torch.tensor([0, 2]), mode=0)


def test_threads_follow_torch_unless_set(sj, torch_threads):
    cap = sj.max_num_threads()  # torch may run more threads than the engine can: followed as cap
    sj.set_num_threads(0)
    assert sj.get_num_threads() == min(torch.get_num_threads(), cap)  # set_num_threads(0) follows at once
    for k in (3, 1, 2, cap + 1):
        torch.set_num_threads(k)
        small_call(sj)  # every op picks up torch's count before it runs
        assert sj.get_num_threads() == min(k, cap), "torch.set_num_threads({}) did not reach the engine".format(k)
    sj.set_num_threads(cap)  # explicit: torch no longer matters
    assert sj.get_num_threads() == cap
    torch.set_num_threads(cap + 1)
    small_call(sj)
    assert sj.get_num_threads() == cap
    torch.set_num_threads(1)
    small_call(sj)
    assert sj.get_num_threads() == cap
    sj.set_num_threads(0)  # back to following, at once and at every call
    assert sj.get_num_threads() == 1
    torch.set_num_threads(2)
    small_call(sj)
    assert sj.get_num_threads() == min(2, cap)


def test_linear_group_follows_torch_threads(sj, torch_threads):
    sj.set_num_threads(0)
    group = sj.linear_group([torch.randn(4, 3)])
    for k in (3, 1):
        torch.set_num_threads(k)
        sj.linear_group_run(group, [torch.randn(2, 3)])
        assert sj.get_num_threads() == min(k, sj.max_num_threads()), \
            "linear_group_run did not follow torch.set_num_threads({})".format(k)


def test_max_num_threads_is_the_cpus_oneTBB_runs_on(sj):
    # oneTBB counts the CPUs of the process's affinity mask, as os.sched_getaffinity does.
    assert sj.max_num_threads() == min(len(os.sched_getaffinity(0)), 1024)


def test_set_num_threads_rejects_a_negative_count(sj):
    with pytest.raises(RuntimeError, match=r"set_num_threads: n = -1 is negative"):
        sj.set_num_threads(-1)


@pytest.mark.parametrize("over", [1, 1000])
def test_set_num_threads_rejects_more_threads_than_the_engine_runs(sj, torch_threads, over):
    sj.set_num_threads(1)
    cap = sj.max_num_threads()
    n = cap + over
    with pytest.raises(RuntimeError, match=r"set_num_threads: n = {} exceeds the {} threads the engine can run at "
                                           r"once".format(n, cap)):
        sj.set_num_threads(n)
    assert sj.get_num_threads() == 1  # a refused count changes nothing


def test_a_large_thread_count_runs_without_a_oneTBB_warning(sj, torch_threads, capfd):
    # torch.set_num_threads above the CPUs: the engine's arena stays at max_num_threads(), so
    # oneTBB has no request for workers it cannot give (its warning is printed on stderr).
    sj.set_num_threads(0)
    torch.set_num_threads(sj.max_num_threads() + 7)
    weight, indices = torch.randn(1000, 64), torch.randint(0, 1000, (20000,))
    out = sj.embedding_bag(weight, indices, torch.arange(0, 20000, 10), mode=0)[0]
    assert out.shape == (2000, 64)
    assert "TBB Warning" not in capfd.readouterr().err


def test_installed_package_loads_its_own_files(sj):
    where = os.environ.get("SHAPEJIT_EXPECT_PACKAGE_UNDER")
    if not where:
        pytest.skip("SHAPEJIT_EXPECT_PACKAGE_UNDER is not set (set by tools/check_python_install.sh)")
    root = Path(where).resolve()
    package = Path(sj.__file__).resolve().parent
    assert root in package.parents, "imported {} instead of the package under {}".format(sj.__file__, root)
    assert Path(sj.library_path).resolve() == package / "libshapejit_torch_ops.so"
    assert ROOT not in package.parents, "the package was imported from the source tree"
    # Every module of the source tree was installed (setup.py lists subpackages one by one).
    source = ROOT / "python" / "shapejit"
    missing = [str(f.relative_to(source)) for f in sorted(source.rglob("*.py"))
               if not (package / f.relative_to(source)).is_file()]
    assert not missing, "the installed package lacks {}".format(missing)
