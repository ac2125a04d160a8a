"""Shared fixtures: the shapejit package and a replayable per-test seed (SHAPEJIT_TEST_SEED)."""
import zlib

import pytest

from helpers import BASE_SEED


def pytest_report_header(config):
    return "shapejit: SHAPEJIT_TEST_SEED={} replays this run".format(BASE_SEED)


@pytest.fixture
def seed(request):
    """A per-test seed derived from the run's base seed and the test's name."""
    return (BASE_SEED * 1000003 + zlib.crc32(request.node.name.encode())) % (1 << 31)


@pytest.fixture(scope="session")
def sj():
    import shapejit
    return shapejit
