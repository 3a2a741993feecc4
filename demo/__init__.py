"""Demos, example-image builders and local test clusters, used by ``make demo``,
``make images`` and the tests; not part of the hetflow library."""
