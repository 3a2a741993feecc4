"""Measured run times, learned from the state store: they win over written estimates.

A profile maps (step, variant, node class) to seconds.  The median of the last few
successful attempts is used, so one slow outlier does not move the plan much."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

Key = tuple[str, str, str]  # (step, variant, node class)
KEEP = 5  # recent attempts per key


@dataclass(frozen=True)
class ProfileEntry:
    workflow: str
    step: str
    variant: str
    node_class: str
    seconds: float  # median of the recent attempts
    samples: int


def learn(history: Iterable[tuple[str, str, str, str, float]]) -> list[ProfileEntry]:
    """From (workflow, step, variant, node, seconds) rows, newest first."""
    recent: dict[tuple[str, str, str, str], list[float]] = {}
    for wf, step, variant, node, seconds in history:
        times = recent.setdefault((wf, step, variant, node), [])
        if len(times) < KEEP:
            times.append(max(0.0, seconds))
    return [
        ProfileEntry(wf, step, variant, node, statistics.median(ts), len(ts))
        for (wf, step, variant, node), ts in sorted(recent.items())
    ]


def profile_for(entries: Iterable[ProfileEntry], workflow: str) -> dict[Key, float]:
    return {(e.step, e.variant, e.node_class): e.seconds for e in entries if e.workflow == workflow}
