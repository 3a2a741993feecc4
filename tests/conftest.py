"""Every test session checks at its end that it left nothing running (``tests.leftovers``)."""

from tests.leftovers import nothing_left_running, pytest_configure

__all__ = ["nothing_left_running", "pytest_configure"]  # a fixture and a hook, found here by pytest
