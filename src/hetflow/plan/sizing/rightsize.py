"""Right-sizing: steps that ask for far more memory or CPUs than they used, learned from
the recorded use of their last successful attempts.

A suggestion is a note for the person who writes the workflow; nothing here changes what
a run requests.  A step is flagged when it asked for at least ``OVER_ASK`` times what it
used at most (memory: the cgroup peak; CPUs: CPU time over run time) in its recent
successful attempts, and the suggestion keeps headroom above that maximum.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

OVER_ASK = 4.0  # asked / used at which a request is flagged (the run report uses it too)
HEADROOM = 1.5  # suggest this much above the most ever used
SIZING_KEEP = 5  # recent successful attempts per (workflow, step, variant) (Store.usage_history(newest=...))
_MI, _GI = 1 << 20, 1 << 30


@dataclass(frozen=True)
class UsageSample:
    """One successful attempt: what it asked for and what it used (None: unknown)."""

    workflow: str
    step: str
    variant: str
    cpus: float | None
    memory: int | None  # bytes
    peak_memory: int | None  # bytes
    cpu_seconds: float | None
    seconds: float | None  # how long it ran


@dataclass(frozen=True)
class Suggestion:
    workflow: str
    step: str
    variant: str
    resource: str  # "memory" or "cpus"
    asked: str  # as a workflow file writes it: "4Gi", "8"
    used: str  # the most used in the samples
    suggest: str
    samples: int

    @property
    def message(self) -> str:
        runs = "run" if self.samples == 1 else f"{self.samples} runs"
        return (
            f"step '{self.step}' ({self.variant}) asks {self.resource}: {self.asked}, used at most {self.used} "
            f"in the last {runs}: consider {self.resource}: {self.suggest}"
        )


def quantity(n: int) -> str:
    """Bytes as a Kubernetes quantity a workflow file accepts: ``512Mi``, ``2Gi``."""
    if n >= _GI and n % _GI == 0:
        return f"{n // _GI}Gi"
    return f"{max(1, math.ceil(n / _MI))}Mi"


def round_memory(n: float) -> int:
    """Up to a size people write: powers of two from 64Mi to 1Gi, then whole half-Gi."""
    size = 64 * _MI
    while size < n and size < _GI:
        size *= 2
    if size >= n:
        return size
    return math.ceil(n / (_GI // 2)) * (_GI // 2)


def round_cpus(n: float) -> float:
    """Up to a half core, at least half a core."""
    return max(0.5, math.ceil(n * 2) / 2)


def suggest_sizes(samples: Iterable[UsageSample], *, factor: float = OVER_ASK) -> list[Suggestion]:
    """Suggestions per (workflow, step, variant) from samples given newest first; the
    request compared is the newest attempt's (the workflow as it is now)."""
    recent: dict[tuple[str, str, str], list[UsageSample]] = {}
    for s in samples:
        kept = recent.setdefault((s.workflow, s.step, s.variant), [])
        if len(kept) < SIZING_KEEP:
            kept.append(s)
    out: list[Suggestion] = []
    for (wf, step, variant), kept in sorted(recent.items()):
        newest = kept[0]
        peaks = [s.peak_memory for s in kept if s.peak_memory is not None]
        most = max(peaks, default=0)
        better_memory = round_memory(most * HEADROOM)
        if newest.memory and peaks and newest.memory >= factor * max(most, 1) and better_memory < newest.memory:
            out.append(
                Suggestion(
                    wf,
                    step,
                    variant,
                    "memory",
                    quantity(newest.memory),
                    quantity(most),
                    quantity(better_memory),
                    len(peaks),
                )
            )
        cores = [s.cpu_seconds / s.seconds for s in kept if s.cpu_seconds is not None and s.seconds]
        if newest.cpus and cores and newest.cpus >= factor * max(max(cores), 0.01):
            most_cores = max(cores)
            better = round_cpus(most_cores * HEADROOM)
            if better < newest.cpus:
                out.append(
                    Suggestion(
                        wf, step, variant, "cpus", f"{newest.cpus:g}", f"{most_cores:.2f}", f"{better:g}", len(cores)
                    )
                )
    return out
