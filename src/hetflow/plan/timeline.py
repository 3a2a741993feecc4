"""One machine's resources over time, for the list scheduler and the simulator of plans.

``MachineTimeline``: cores and memory in use are a step function, kept as sorted
breakpoints: ``times[i]`` starts a segment that lasts until ``times[i + 1]`` (the last one
lasts for ever and is always empty).  GPUs are counted per segment and also tracked per
index, each a sorted list of disjoint busy intervals, because counting free GPUs is not
enough: two tasks may each leave one GPU free for part of a window without any single GPU
being free for all of it.  "Insertion" (Topcuoglu et al. 2002, section 4.1) becomes: the
earliest start at or after the data-ready time at which the task fits for its whole run
time.  The one-task-per-machine model is the same structure with capacity 1 and demand 1.
Intervals are half-open: a task finishing at t and one starting at t do not overlap, and a
zero-length task uses nothing.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

_EPS = 1e-9  # fractional cores add up with rounding error; a hair over capacity still fits


class MachineTimeline:
    """Resources in use on one machine over time; ``earliest_start`` and ``reserve``."""

    __slots__ = ("cores", "cores_cap", "gpu_ends", "gpu_starts", "gpus", "gpus_cap", "memory", "memory_cap", "times")

    def __init__(self, cores: float, memory: int, gpus: int) -> None:
        self.cores_cap = float(cores) + _EPS
        self.memory_cap = memory
        self.times: list[float] = [0.0]
        self.cores: list[float] = [0.0]
        self.memory: list[int] = [0]
        # The GPU count in use, beside the per-index intervals: a quick test that rules out
        # most windows before the indices are looked at.
        self.gpus_cap = gpus
        self.gpus: list[int] = [0]
        self.gpu_starts: list[list[float]] = [[] for _ in range(gpus)]
        self.gpu_ends: list[list[float]] = [[] for _ in range(gpus)]

    @property
    def tail(self) -> float:
        """The time after which the machine is empty."""
        return self.times[-1]

    def earliest_start(
        self, ready: float, duration: float, cores: float, memory: int, gpus: int, limit: float = math.inf
    ) -> float:
        """The earliest ``t >= ready`` at which the demand fits during ``[t, t + duration)``.

        Returns ``inf`` as soon as the answer would finish after ``limit`` (the caller already
        has something at least as good)."""
        t = ready
        if duration <= 0.0:
            return t if t <= limit else math.inf
        times, used_cores, used_memory, used_gpus = self.times, self.cores, self.memory, self.gpus
        n = len(times)
        cap_cores = self.cores_cap - cores
        cap_memory = self.memory_cap - memory
        cap_gpus = self.gpus_cap - gpus
        i = bisect_right(times, t) - 1
        while True:
            end = t + duration
            if end > limit:
                return math.inf
            j = i
            while j < n and times[j] < end:
                if used_cores[j] > cap_cores or used_memory[j] > cap_memory or used_gpus[j] > cap_gpus:
                    break
                j += 1
            else:
                if gpus == 0:
                    return t
                later = self._gpu_retry(t, end, gpus)
                if later is None:
                    return t
                t = later
                i = bisect_right(times, t) - 1
                continue
            # Segment j is too full: nothing can start before it ends.
            i = j + 1
            t = times[i]

    def _free_gpus(self, start: float, end: float) -> tuple[list[int], float]:
        """GPU indices free during ``[start, end)``, and the earliest end of a blocking interval."""
        free: list[int] = []
        retry = math.inf
        for g, (starts, ends) in enumerate(zip(self.gpu_starts, self.gpu_ends, strict=True)):
            k = bisect_left(starts, end) - 1
            # Intervals on one GPU are disjoint and sorted, so only the last one starting
            # before ``end`` can reach past ``start``.
            if k >= 0 and ends[k] > start:
                # The window [t, t+d) keeps hitting busy intervals of this GPU until t passes
                # the end of the first one that blocks it.
                first = bisect_right(ends, start)
                retry = min(retry, ends[first])
            else:
                free.append(g)
        return free, retry

    def _gpu_retry(self, start: float, end: float, gpus: int) -> float | None:
        free, retry = self._free_gpus(start, end)
        return None if len(free) >= gpus else retry

    def reserve(self, start: float, finish: float, cores: float, memory: int, gpus: int) -> tuple[int, ...]:
        """Book the resources during ``[start, finish)``; return the GPU indices given (lowest free)."""
        if finish <= start:
            return tuple(range(gpus))
        a = self._split(start)
        b = self._split(finish)
        used_cores, used_memory, used_gpus = self.cores, self.memory, self.gpus
        for k in range(a, b):
            used_cores[k] += cores
            used_memory[k] += memory
            used_gpus[k] += gpus
        if gpus == 0:
            return ()
        free, _ = self._free_gpus(start, finish)
        if len(free) < gpus:
            raise ValueError("reserve: not enough free GPUs; call earliest_start first")
        chosen = tuple(free[:gpus])
        for g in chosen:
            starts, ends = self.gpu_starts[g], self.gpu_ends[g]
            k = bisect_left(starts, start)
            starts.insert(k, start)
            ends.insert(k, finish)
        return chosen

    def release(self, start: float, finish: float, cores: float, memory: int, gpu_ids: tuple[int, ...]) -> None:
        """Undo ``reserve`` (breakpoints stay; they are harmless)."""
        if finish <= start:
            return
        a = bisect_left(self.times, start)
        b = bisect_left(self.times, finish)
        for k in range(a, b):
            self.cores[k] -= cores
            self.memory[k] -= memory
            self.gpus[k] -= len(gpu_ids)
        for g in gpu_ids:
            starts, ends = self.gpu_starts[g], self.gpu_ends[g]
            k = bisect_left(starts, start)
            del starts[k]
            del ends[k]

    def _split(self, x: float) -> int:
        """Make ``x`` a breakpoint; return its segment's index."""
        times = self.times
        i = bisect_right(times, x) - 1
        if times[i] == x:
            return i
        times.insert(i + 1, x)
        self.cores.insert(i + 1, self.cores[i])
        self.memory.insert(i + 1, self.memory[i])
        self.gpus.insert(i + 1, self.gpus[i])
        return i + 1
