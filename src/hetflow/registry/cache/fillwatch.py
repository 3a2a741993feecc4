"""When a fill (one upstream blob into the proxy's cache) must end: pure rules, and the clock
they read (``Clock``; ``ManualClock`` is its fake, moved by hand in tests).

``judge(rules, progress, now, waiters)`` returns a ``Verdict`` or None (go on):

* **deadline**: ``rules.deadline_s`` after the first client asked (the wait for a fill slot
  included), whoever waits: every pull of an uncached blob ends by then;
* **abandoned**: nobody waits for it any more and it is slower than ``rules.min_rate`` over
  the last window (or its life, if shorter; a fill still waiting for a slot has no rate):
  a fast one goes on into the cache, where the next pull finds it;
* **slow**: once it has run a whole window, slower than ``rules.min_rate`` over it.

The rate is the bytes received over the window, from samples ``Progress.note`` takes at each
check (the fetcher checks about once a second, and when its last client leaves).  A minimum
of 0 turns the rate rules off: only the deadline is left.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol

from hetflow.registry.settings import Limits

__all__ = ["Clock", "FillRules", "LoopClock", "ManualClock", "Progress", "Verdict", "explain", "judge", "rate_text"]


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class LoopClock:
    """The event loop's monotonic clock."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when ``advance`` is called; sleepers wake when it passes
    their time (on the event loop that called ``sleep``)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + seconds, wake))
        await wake

    def advance(self, seconds: float) -> None:
        self._now += seconds
        due = [(t, f) for t, f in self._sleepers if t <= self._now]
        self._sleepers = [(t, f) for t, f in self._sleepers if t > self._now]
        for _, wake in due:
            if not wake.done():
                wake.set_result(None)


@dataclass(frozen=True)
class FillRules:
    deadline_s: float
    min_rate: float  # bytes per second; 0: none
    window_s: float

    @property
    def check_s(self) -> float:
        """How often a running fill is judged."""
        return min(1.0, self.window_s / 4)

    @classmethod
    def from_limits(cls, limits: Limits) -> FillRules:
        return cls(limits.upstream_total_timeout_s, limits.upstream_min_rate_bytes_per_s, limits.upstream_rate_window_s)


@dataclass
class Progress:
    """One fill's bytes over time: ``received`` is counted by the reader, samples by ``note``."""

    asked_at: float
    started_at: float | None = None  # when it got a fill slot
    received: int = 0
    samples: deque[tuple[float, int]] = field(default_factory=deque)

    def start(self, now: float) -> None:
        self.started_at = now
        self.samples.append((now, self.received))

    def note(self, now: float, window_s: float) -> None:
        """Take a sample; keep one at or before the window's start, none older."""
        self.samples.append((now, self.received))
        while len(self.samples) > 1 and self.samples[1][0] <= now - window_s:
            self.samples.popleft()

    def rate(self, now: float) -> float:
        """Bytes per second since the oldest sample kept (about one window ago)."""
        if not self.samples:
            return 0.0
        since, then = self.samples[0]
        return (self.received - then) / (now - since) if now > since else 0.0


@dataclass(frozen=True)
class Verdict:
    reason: Literal["deadline", "abandoned", "slow"]
    rate: float  # bytes per second over the last window
    received: int
    queued: bool  # it never got a fill slot


def judge(rules: FillRules, progress: Progress, now: float, waiters: int) -> Verdict | None:
    """Whether the fill must end now, and why (see the module's docstring)."""
    progress.note(now, rules.window_s)
    rate = progress.rate(now)
    queued = progress.started_at is None

    def verdict(reason: Literal["deadline", "abandoned", "slow"]) -> Verdict:
        return Verdict(reason, rate, progress.received, queued)

    if now - progress.asked_at >= rules.deadline_s:
        return verdict("deadline")
    if rules.min_rate <= 0:
        return None
    if waiters == 0 and rate < rules.min_rate:
        return verdict("abandoned")
    if progress.started_at is not None and now - progress.started_at >= rules.window_s and rate < rules.min_rate:
        return verdict("slow")
    return None


def rate_text(rate: float) -> str:
    """``0.05 B/s``, ``812 B/s``, ``31.9 KiB/s``, ``12.4 MiB/s``."""
    for unit, size in (("MiB/s", 1024 * 1024), ("KiB/s", 1024)):
        if rate >= size:
            return f"{rate / size:.1f} {unit}"
    return f"{rate:.3g} B/s"


def explain(verdict: Verdict, rules: FillRules, upstream: str, max_fills: int) -> str:
    """Why a fill ended, naming the upstream, the rate and the setting to change."""
    rate = rate_text(verdict.rate)
    if verdict.reason == "abandoned":
        return f"nobody waits for it and upstream {upstream} sends {rate}; fill cancelled"
    if verdict.queued:
        return (
            f"waited {rules.deadline_s:g} s (limits.upstream_total_timeout_s) for a slot to fetch it from upstream "
            f"{upstream}: all {max_fills} (limits.max_fills) are busy with other blobs"
        )
    if verdict.reason == "deadline":
        return (
            f"upstream {upstream} did not deliver it within {rules.deadline_s:g} s (limits.upstream_total_timeout_s): "
            f"{verdict.received} bytes came, {rate} over the last {rules.window_s:g} s"
        )
    return (
        f"upstream {upstream} sends it at {rate} over the last {rules.window_s:g} s, below the minimum "
        f"{rate_text(rules.min_rate)} (limits.upstream_min_rate_bytes_per_s); {verdict.received} bytes came"
    )
