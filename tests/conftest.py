"""Shared test options: `pytest --bless` rewrites golden files instead of comparing with them."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--bless", action="store_true", help="regenerate golden .out files")


@pytest.fixture
def bless(request) -> bool:
    return request.config.getoption("--bless")
