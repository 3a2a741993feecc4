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

Slices of a GPU (a ``GpuSlot``): a *shared* tenant (time-slicing or MPS) is kept per GPU
with its share and the load it was planned with; it may overlap other tenants as long as,
at every instant, the tenants on the GPU number at most ``replicas``, their shares sum to
at most the new tenant's planned load, and to at most the planned load of every tenant
already there (so a new tenant never slows one placed before it beyond what that one was
planned with).  Whole-GPU placements and shared tenants never overlap on one GPU.  A MIG
instance is a device of its own (disjoint intervals, like a whole GPU); the GPUs in MIG
mode are never given out whole.

The rules are the capacity predicate's (``model.fit``), asked without a call per segment: a
demand's ``room`` (the use it leaves room for, the comparison ``fits`` makes) is computed
once per demand and keys its runs of segments too full (``blocked``); which GPUs may be
given whole or shared is ``gpu_refusals`` of each idle GPU, asked once; a tenant's count and
load per segment is ``sharing_refusal`` (``GpuLoad.blocked``).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from hetflow.plan.model.fit import LOAD, Claim, GpuState, gpu_refusals, room, sharing_refusal
from hetflow.plan.sharing.gpuload import GpuLoad


@dataclass(frozen=True)
class GpuSlot:
    """What of a GPU one step takes, beyond whole devices: ``share`` of one GPU planned at
    ``level`` (the most load, the sum of the tenants' shares, it may meet; time-slicing
    slows it by that load, MPS plans every tenant at 1), at most ``replicas`` tenants per
    GPU; or one MIG instance of profile ``mig``.  ``only``: the GPU indices it may be given
    (a machine whose GPUs are of several vendors); None: any."""

    share: float = 0.0
    level: float = 1.0
    replicas: int = 1
    mig: str = ""
    only: tuple[int, ...] | None = None

    @property
    def sliced(self) -> bool:
        return self.share > 0 or bool(self.mig)


class MachineTimeline:
    """Resources in use on one machine over time; ``earliest_start`` and ``reserve``."""

    __slots__ = (
        "cores",
        "cores_cap",
        "given",
        "gpu_ends",
        "gpu_starts",
        "gpus",
        "gpus_cap",
        "memory",
        "memory_cap",
        "mig_dev",
        "mig_ends",
        "mig_starts",
        "runs",
        "tenants",
        "times",
    )  # fmt: skip

    # Demands asked again between two bookings of a machine, about: see ``_grow_runs``.
    ASKED_AGAIN: ClassVar[int] = 4

    def __init__(self, cores: float, memory: int, gpus: int, mig: Sequence[tuple[str, ...]] = ()) -> None:
        self.cores_cap = float(cores)
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
        self.tenants = [GpuLoad() for _ in range(gpus)]  # per GPU, its shared tenants
        # MIG: GPU g's layout mig[g]; every instance is a device (gpu, index, profile)
        in_mig = [bool(mig[g]) if g < len(mig) else False for g in range(gpus)]
        self.mig_dev = [(g, i, p) for g in range(min(gpus, len(mig))) for i, p in enumerate(mig[g])]
        # The GPUs that may be given whole or shared (those out of MIG mode).
        self.given = [not gpu_refusals(GpuState(mig_mode=m), Claim(g), 1) for g, m in enumerate(in_mig)]
        self.mig_starts: list[list[float]] = [[] for _ in self.mig_dev]
        self.mig_ends: list[list[float]] = [[] for _ in self.mig_dev]
        # Per demand (what may stay in use of cores, memory, GPU count), the maximal runs of
        # segments too full for it, as (starts, ends): ``earliest_start`` jumps a whole run at a
        # time instead of walking its segments.  Built when first asked, dropped on any booking.
        self.runs: dict[tuple[float, int, int], tuple[list[float], list[float]]] = {}

    @property
    def tail(self) -> float:
        """The time after which the machine is empty."""
        return self.times[-1]

    def earliest_start(
        self,
        ready: float,
        duration: float,
        cores: float,
        memory: int,
        gpus: int,
        limit: float = math.inf,
        slot: GpuSlot | None = None,
    ) -> float:
        """The earliest ``t >= ready`` at which the demand fits during ``[t, t + duration)``.

        Returns ``inf`` as soon as the answer would finish after ``limit`` (the caller already
        has something at least as good)."""
        t = ready
        if duration <= 0.0:
            return t if t <= limit else math.inf
        key = self.room(cores, memory, 0 if slot is not None and slot.sliced else gpus)
        found = self.runs.get(key)
        starts, ends = found if found is not None else self.blocked(key)
        count = len(starts)
        k = bisect_right(ends, t)  # the first run that ends after t
        while True:
            end = t + duration
            if end > limit:
                return math.inf
            if k < count and starts[k] < end:
                # Run k is too full and overlaps the window: nothing can start before it ends.
                t = ends[k]
                k += 1
                continue
            if gpus == 0:
                return t
            later = self.gpu_retry(t, end, gpus, slot)
            if later is None:
                return t
            if later == math.inf:  # no GPU of the kind asked for on this machine
                return math.inf
            t = later
            k = bisect_right(ends, t)

    def room(self, cores: float, memory: int, gpus: int) -> tuple[float, int, int]:
        """The use of cores, memory and whole GPUs (counted) that leaves room for a demand of
        ``cores``, ``memory`` and ``gpus``: ``model.room``, the key of its ``blocked`` runs."""
        return room(self.cores_cap, self.memory_cap, self.gpus_cap, cores, memory, gpus)

    def blocked(self, key: tuple[float, int, int]) -> tuple[list[float], list[float]]:
        """The maximal runs of segments whose use exceeds ``key`` (cores, memory, GPU count
        that may be in use), as sorted (starts, ends); cached in ``runs`` until the next booking.
        The last segment is always empty, so a run ends; a demand over the machine's capacity
        (which ``Compiled`` filters out) gets a run that lasts for ever."""
        cap_cores, cap_memory, cap_gpus = key
        used_cores, used_memory, used_gpus = self.cores, self.memory, self.gpus
        starts: list[float] = []
        ends: list[float] = []
        inside = False
        for j, x in enumerate(self.times):
            full = used_cores[j] > cap_cores or used_memory[j] > cap_memory or used_gpus[j] > cap_gpus
            if full and not inside:
                starts.append(x)
                inside = True
            elif inside and not full:
                ends.append(x)
                inside = False
        if inside:
            ends.append(math.inf)
        self.runs[key] = (starts, ends)
        return starts, ends

    def _free_gpus(
        self, start: float, end: float, only: tuple[int, ...] | None = None, tenants: bool = True
    ) -> tuple[list[int], float]:
        """GPU indices free during ``[start, end)``, and the earliest end of a blocking interval.
        ``tenants`` False: shared tenants do not count (the caller checks them)."""
        free: list[int] = []
        retry = math.inf
        for g, (starts, ends) in enumerate(zip(self.gpu_starts, self.gpu_ends, strict=True)):
            if not self.given[g] or (only is not None and g not in only):
                continue
            if tenants and self.tenants[g]:
                busy = self.tenants[g].busy_until(start, end)
                if busy is not None:
                    retry = min(retry, busy)
                    continue
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

    def gpu_retry(self, start: float, end: float, gpus: int, slot: GpuSlot | None = None) -> float | None:
        if slot is not None and slot.mig:
            dev, retry = self._free_mig(start, end, slot)
            return None if dev is not None else retry
        if slot is not None and slot.share > 0:
            g, retry = self._shared_gpu(start, end, slot)
            return None if g is not None else retry
        free, retry = self._free_gpus(start, end, None if slot is None else slot.only)
        return None if len(free) >= gpus else retry

    def _free_mig(self, start: float, end: float, slot: GpuSlot) -> tuple[int | None, float]:
        """The first MIG device of ``slot.mig`` free during ``[start, end)`` (None), and when to retry."""
        retry = math.inf
        for d, (g, _, profile) in enumerate(self.mig_dev):
            if profile != slot.mig or (slot.only is not None and g not in slot.only):
                continue
            starts, ends = self.mig_starts[d], self.mig_ends[d]
            k = bisect_left(starts, end) - 1
            if k >= 0 and ends[k] > start:
                retry = min(retry, ends[bisect_right(ends, start)])
            else:
                return d, retry
        return None, retry

    def _shared_gpu(self, start: float, end: float, slot: GpuSlot) -> tuple[int | None, float]:
        """The first GPU on which a tenant of ``slot`` fits during ``[start, end)``, and when to
        retry: no whole-GPU interval overlaps, and at every instant of the window the tenants
        number at most ``replicas`` and their shares sum to at most the new tenant's level and
        every overlapping tenant's planned level (``GpuLoad.blocked``).  The retry is the
        earliest start at which some GPU fits, each GPU searched on its own (so the machine's
        cores are checked again only there).  A share above its planned level never fits."""
        if sharing_refusal(1, slot.share, slot.level, slot.replicas) == LOAD:
            return None, math.inf
        retry = math.inf
        duration = end - start
        for g in range(self.gpus_cap):
            if not self.given[g] or (slot.only is not None and g not in slot.only):
                continue
            t = start
            while t < retry:
                blocked = self.tenants[g].blocked(t, t + duration, slot.share, slot.level, slot.replicas)
                whole = self._whole_busy(g, t, t + duration)
                if blocked is None and whole is None:
                    break
                t = max(blocked or t, whole or t)
            if t == start:
                return g, retry
            retry = min(retry, t)
        return None, retry

    def _whole_busy(self, g: int, start: float, end: float) -> float | None:
        """None when no whole-GPU interval of GPU ``g`` overlaps ``[start, end)``, else the end
        of the first that does."""
        starts, ends = self.gpu_starts[g], self.gpu_ends[g]
        k = bisect_left(starts, end) - 1
        if k >= 0 and ends[k] > start:
            return ends[bisect_right(ends, start)]
        return None

    def reserve_slot(
        self, start: float, finish: float, cores: float, memory: int, slot: GpuSlot
    ) -> tuple[tuple[int, ...], int | None]:
        """Book a shared tenant or a MIG instance; return (its GPU index, MIG device index on that GPU)."""
        self._book(start, finish, cores, memory, 0)
        if finish <= start:
            return (slot.only[0] if slot.only else 0,), None
        if slot.mig:
            d, _ = self._free_mig(start, finish, slot)
            if d is None:
                raise ValueError("reserve_slot: no free MIG instance; call earliest_start first")
            k = bisect_left(self.mig_starts[d], start)
            self.mig_starts[d].insert(k, start)
            self.mig_ends[d].insert(k, finish)
            g, inst, _ = self.mig_dev[d]
            return (g,), inst
        shared, _ = self._shared_gpu(start, finish, slot)
        if shared is None:
            raise ValueError("reserve_slot: the share does not fit; call earliest_start first")
        self.tenants[shared].add((start, finish, slot.share, slot.level))
        return (shared,), None

    def release_slot(
        self, start: float, finish: float, cores: float, memory: int, gpu: int, slot: GpuSlot, mig: int | None
    ) -> None:
        """Undo ``reserve_slot``."""
        self._unbook(start, finish, cores, memory, 0)
        if finish <= start:
            return
        if slot.mig:
            d = next(d for d, (gg, i, _) in enumerate(self.mig_dev) if gg == gpu and i == mig)
            k = bisect_left(self.mig_starts[d], start)
            del self.mig_starts[d][k]
            del self.mig_ends[d][k]
            return
        self.tenants[gpu].remove((start, finish, slot.share, slot.level))

    def hold(
        self,
        start: float,
        finish: float,
        cores: float,
        memory: int,
        gpus: tuple[int, ...],
        slot: GpuSlot | None = None,
        mig: int | None = None,
    ) -> None:
        """Book exactly what a planned placement holds (its GPU indices, its tenant or MIG
        instance), to ask afterwards what else would fit (``plan.search.sharewhy``)."""
        if finish <= start:
            return
        if slot is not None and slot.mig and mig is not None:
            self._book(start, finish, cores, memory, 0)
            d = next(d for d, (g, i, _) in enumerate(self.mig_dev) if g == gpus[0] and i == mig)
            k = bisect_left(self.mig_starts[d], start)
            self.mig_starts[d].insert(k, start)
            self.mig_ends[d].insert(k, finish)
        elif slot is not None and slot.share > 0:
            self._book(start, finish, cores, memory, 0)
            self.tenants[gpus[0]].add((start, finish, slot.share, slot.level))
        else:
            self._book(start, finish, cores, memory, len(gpus))
            for g in gpus:
                k = bisect_left(self.gpu_starts[g], start)
                self.gpu_starts[g].insert(k, start)
                self.gpu_ends[g].insert(k, finish)

    def _book(self, start: float, finish: float, cores: float, memory: int, gpus: int) -> None:
        """Add the use during ``[start, finish)``: both ends made breakpoints (``split_at``,
        inline: a 10,000-step plan books 80,000 times), then the segments between."""
        if finish <= start:
            return
        times, used_cores, used_memory, used_gpus = self.times, self.cores, self.memory, self.gpus
        a = bisect_right(times, start) - 1
        if times[a] != start:
            a += 1
            times.insert(a, start)
            used_cores.insert(a, used_cores[a - 1])
            used_memory.insert(a, used_memory[a - 1])
            used_gpus.insert(a, used_gpus[a - 1])
        b = bisect_right(times, finish, a) - 1  # ``finish`` is past ``start``: at or after segment a
        if times[b] != finish:
            b += 1
            times.insert(b, finish)
            used_cores.insert(b, used_cores[b - 1])
            used_memory.insert(b, used_memory[b - 1])
            used_gpus.insert(b, used_gpus[b - 1])
        for k in range(a, b):
            used_cores[k] += cores
            used_memory[k] += memory
            used_gpus[k] += gpus
        if self.runs:
            self._grow_runs(a, b)

    def _grow_runs(self, a: int, b: int) -> None:
        """After segments ``a`` to ``b - 1`` got fuller: add those now too full to each kept
        run list, merging with the runs they touch (a booking only ever adds blocked time).

        When many demands' runs are kept on a short timeline they are dropped instead: growing
        them costs a walk of the booked segments per demand (tens of demands on a trace's GPU
        nodes), while ``blocked`` rebuilds only those asked again before the next booking
        (about ``ASKED_AGAIN``), each a walk of the whole timeline (blast's plan 2.3 times
        faster; a 10,000-step workflow's long timelines and the few demands of most traces
        keep growing).  Either way the runs are the same: they are a cache of ``blocked``."""
        if len(self.runs) * (b - a + 4) > self.ASKED_AGAIN * len(self.times):
            self.runs.clear()
            return
        times, used_cores, used_memory, used_gpus = self.times, self.cores, self.memory, self.gpus
        for (cap_cores, cap_memory, cap_gpus), (starts, ends) in self.runs.items():
            pieces: list[tuple[float, float]] = []
            for j in range(a, b):
                if used_cores[j] > cap_cores or used_memory[j] > cap_memory or used_gpus[j] > cap_gpus:
                    if pieces and pieces[-1][1] == times[j]:
                        pieces[-1] = (pieces[-1][0], times[j + 1])
                    else:
                        pieces.append((times[j], times[j + 1]))
            if not pieces:
                continue
            lo = bisect_left(ends, times[a])  # runs that end before the booking stay as they are
            hi = bisect_right(starts, times[b])  # and so do those that start after it
            merged_starts: list[float] = []
            merged_ends: list[float] = []
            for x, y in sorted([*zip(starts[lo:hi], ends[lo:hi], strict=True), *pieces]):
                if merged_ends and x <= merged_ends[-1]:
                    merged_ends[-1] = max(merged_ends[-1], y)
                else:
                    merged_starts.append(x)
                    merged_ends.append(y)
            starts[lo:hi] = merged_starts
            ends[lo:hi] = merged_ends

    def _unbook(self, start: float, finish: float, cores: float, memory: int, gpus: int) -> None:
        if finish <= start:
            return
        self.runs.clear()
        a = bisect_left(self.times, start)
        b = bisect_left(self.times, finish)
        for k in range(a, b):
            self.cores[k] -= cores
            self.memory[k] -= memory
            self.gpus[k] -= gpus

    def reserve(
        self, start: float, finish: float, cores: float, memory: int, gpus: int, only: tuple[int, ...] | None = None
    ) -> tuple[int, ...]:
        """Book the resources during ``[start, finish)``; return the GPU indices given (lowest
        free, among ``only`` when given)."""
        if finish <= start:
            return tuple(only[:gpus]) if only is not None else tuple(range(gpus))
        self._book(start, finish, cores, memory, gpus)
        if gpus == 0:
            return ()
        free, _ = self._free_gpus(start, finish, only)
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
        self._unbook(start, finish, cores, memory, len(gpu_ids))
        for g in gpu_ids:
            starts, ends = self.gpu_starts[g], self.gpu_ends[g]
            k = bisect_left(starts, start)
            del starts[k]
            del ends[k]
