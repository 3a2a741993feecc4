"""How an executor paces itself: its poll interval and retry backoff, from the environment
(``HETFLOW_POLL_INTERVAL``, ``HETFLOW_RETRY_BACKOFF``, ``HETFLOW_GROW_EVERY``; checked before any
command starts)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RunnerConfig:
    poll_interval: float = 0.25
    retry_backoff: float = 2.0  # seconds before the first retry; doubles each time
    max_backoff: float = 300.0
    grow_every: float = 30.0  # seconds an elastic gang runs before it may grow (``execute.elastic``)

    @classmethod
    def from_env(cls) -> RunnerConfig:
        return cls(
            poll_interval=float(os.environ.get("HETFLOW_POLL_INTERVAL", "0.25")),
            retry_backoff=float(os.environ.get("HETFLOW_RETRY_BACKOFF", "2")),
            grow_every=float(os.environ.get("HETFLOW_GROW_EVERY", "30")),
        )
