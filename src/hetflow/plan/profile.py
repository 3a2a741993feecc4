"""Measured run times, learned from the state store: they win over written estimates.

A profile maps (step, variant, node class) to seconds.  The median of the last few
successful attempts is used, so one slow outlier does not move the plan much."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, replace

from hetflow.plan.instance import MachineClass

Key = tuple[str, str, str]  # (step, variant, node class)
KEEP = 5  # recent attempts per key
PROFILE_KEEP = KEEP  # what ``learn`` keeps: ``Store.history(workflow, newest=PROFILE_KEEP)`` reads no more


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


# --- the time-slicing slowdown, learned ---------------------------------------------------


@dataclass(frozen=True)
class SharedSample:
    """One measured shared run: its time alone (a whole-GPU run of the same step, variant
    and node class, e.g. the profile's median), its time shared, and the load it met (the
    sum of the shares on its GPU while it ran, as the plan had them)."""

    solo: float
    shared: float
    load: float


def learn_slowdown(samples: Iterable[SharedSample]) -> float | None:
    """The time-slicing slowdown ``s`` that best explains measured shared runs.

    The model is ``shared = solo x (1 + s x (load - 1))``, so each run above load 1 gives a
    point ``x = load - 1``, ``y = shared / solo - 1``; ``s`` is the least-squares slope of
    ``y = s x`` through the origin, ``sum(x y) / sum(x^2)``, clamped to [0, 10] (what a
    cluster file accepts).  Runs at load <= 1 or without a solo time say nothing about
    ``s`` and are skipped; None when no run is left (keep the default, 0.966).  The seed's
    measurement is one such point: 28.7 s shared, 14.6 s alone, load 2 -> s = 0.966."""
    sxy = sxx = 0.0
    for sm in samples:
        x = sm.load - 1.0
        if x <= 1e-9 or sm.solo <= 0 or sm.shared <= 0:
            continue
        sxy += x * (sm.shared / sm.solo - 1.0)
        sxx += x * x
    if sxx == 0:
        return None
    return min(10.0, max(0.0, sxy / sxx))


def with_slowdown(classes: Iterable[MachineClass], slowdown: float) -> tuple[MachineClass, ...]:
    """``classes`` with a learned time-slicing slowdown where the cluster file set none
    (a slowdown written in the file wins over a learned one)."""
    out = []
    for c in classes:
        sharing = c.gpu_sharing
        if sharing.mode == "time-slicing" and sharing.slowdown is None:
            c = replace(c, gpu_sharing=sharing.model_copy(update={"slowdown": slowdown}))
        out.append(c)
    return tuple(out)
