"""Shared test options: `pytest --bless` rewrites golden files instead of comparing with them; Gloo launches
run one at a time under pytest-xdist."""

import pytest

from processes import orphan_guard


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n`, on by default in pyproject's addopts) the tests that launch Gloo process groups
    all run on one worker, one after another, while the rest spread over the other workers: several multi-rank
    launches at once on a small machine make Gloo's connect in `init_process_group` stall (processes.py)."""
    for item in items:
        if item.get_closest_marker("gloo"):
            item.add_marker(pytest.mark.xdist_group("gloo"))


def pytest_addoption(parser):
    parser.addoption("--bless", action="store_true", help="regenerate golden .out files")


@pytest.fixture
def bless(request) -> bool:
    return request.config.getoption("--bless")


@pytest.fixture
def no_orphans():
    """A token for subprocess environments (`processes.TOKEN_VAR`); afterwards nothing started may run."""
    yield from orphan_guard()
