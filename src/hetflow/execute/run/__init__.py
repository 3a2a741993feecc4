"""Running: the loop that takes a recorded run to its end, and what it does with attempts.

``executor.drive`` runs the one ``Runner``, which ``compose.compose_runner`` builds whole (the
composition root: its attempts, which own the run's mutable state, dispatch, launcher, cache
pass, moves) and hands its parts.  Each turn the runner polls the engine
(``attempts``: accept, retry with ``retries``' policy, fail), expands fan-outs, takes what the
cache has (``dispatching/cachepass``), and launches what is ready where ``dispatching/dispatch``
says (``launch/``); ``dispatching/`` also keeps a turn's decisions and grows elastic gangs;
``control/`` stops, reconciles and moves runs and steps; ``notify`` tells a URL.
"""
