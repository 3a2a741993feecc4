"""Every test session checks at its end that it left nothing running (``tests.leftovers``), and
runs the longest test files first (``tests.ordering``: the busiest xdist worker sets the wall time)."""

from __future__ import annotations

import pytest

from tests import leftovers, ordering
from tests.leftovers import nothing_left_running

__all__ = ["nothing_left_running", "pytest_collection_modifyitems", "pytest_configure"]  # found here by pytest


def pytest_configure(config: pytest.Config) -> None:
    leftovers.pytest_configure(config)
    ordering.configure(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ordering.modify(config, items)
