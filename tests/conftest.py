"""Shared test options: `pytest --bless` rewrites golden files instead of comparing with them."""

import pytest

from processes import orphan_guard


def pytest_addoption(parser):
    parser.addoption("--bless", action="store_true", help="regenerate golden .out files")


@pytest.fixture
def bless(request) -> bool:
    return request.config.getoption("--bless")


@pytest.fixture
def no_orphans():
    """A token for subprocess environments (`processes.TOKEN_VAR`); afterwards nothing started may run."""
    yield from orphan_guard()
