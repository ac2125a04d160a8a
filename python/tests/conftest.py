"""Shared fixtures: the shapejit package and a replayable per-test seed (SHAPEJIT_TEST_SEED); the
header prints the oracle families' seed too (SHAPEJIT_ORACLE_SEED)."""
import zlib

import pytest

from helpers import BASE_SEED
from oracle import FAMILY_CASES, FAMILY_COUNTS, ORACLE_SEED


def pytest_report_header(config):
    return ["shapejit: SHAPEJIT_TEST_SEED={} replays this run".format(BASE_SEED),
            "shapejit: oracle families: SHAPEJIT_ORACLE_SEED={}, {} cases each".format(ORACLE_SEED, FAMILY_CASES)]


def pytest_terminal_summary(terminalreporter):
    """The oracle seed and case counts, printed even under -q (ctest's run)."""
    if FAMILY_COUNTS:
        terminalreporter.write_line("shapejit oracle families (SHAPEJIT_ORACLE_SEED={}):".format(ORACLE_SEED))
        for family, (run, accepted) in sorted(FAMILY_COUNTS.items()):
            terminalreporter.write_line("  {:<28} {:>6} cases, {:>6} accepted by torch".format(family, run, accepted))


@pytest.fixture
def seed(request):
    """A per-test seed derived from the run's base seed and the test's name."""
    return (BASE_SEED * 1000003 + zlib.crc32(request.node.name.encode())) % (1 << 31)


@pytest.fixture(scope="session")
def sj():
    import shapejit
    return shapejit
