"""Every test session checks at its end that it left nothing running (``tests.leftovers``).

Hypothesis runs without its per-example deadline (200 ms by default): a wall-clock threshold
that a loaded machine crosses (test_spec_units' parse_memory took 858 ms on a 2-core machine at
load 19), where the tests wait on nothing.  The number of examples stays each test's own."""

from hypothesis import settings

from tests.leftovers import nothing_left_running, pytest_configure

settings.register_profile("hetflow", deadline=None)
settings.load_profile("hetflow")

__all__ = ["nothing_left_running", "pytest_configure"]  # a fixture and a hook, found here by pytest
