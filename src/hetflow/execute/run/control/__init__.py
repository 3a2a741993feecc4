"""Control of a running run: stopping it (``stopping``, ``lifecycle.stop_run``), adopting what
a dead executor left (``lifecycle.reconcile``), and moving steps (``moves``: migrate, drain)."""
