"""Each attempt's GPU use, sampled from NVML while it runs: the mean and highest
utilisation of its GPUs and the most GPU memory it held.

A background thread reads every watched attempt's GPUs each ``HETFLOW_GPU_SAMPLE_INTERVAL``
seconds (0.5 by default; DCGM's default field interval is 1 s).  Memory is the attempt's
own where NVML lists compute processes with their memory: the processes whose cgroup is the
attempt's (podman runs each under ``/hetflow/<container>``, ``execute.cgroups``; a gang's
replicas under ``/hetflow/<container>-rN``), summed per sample.  Where NVML names no process
of the attempt (a driver that hides them, a step that never touched the GPU) it is the
devices' memory in use, which counts other tenants of a shared GPU too: ``memory_of`` says
which ("process" or "device").  Utilisation is always the devices' (NVML's own figure is
per device), so on a shared GPU it counts the other tenants' kernels too.

A step shorter than one interval may get no sample: its figures stay unknown (None).
Only this machine's attempts are sampled; cluster engines run theirs elsewhere.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from hetflow.execute.engine import CGROUP_PARENT as PARENT
from hetflow.inventory import DeviceSample
from hetflow.state import Store

SAMPLE_INTERVAL = 0.5


class UsageSource(Protocol):
    def sample(self, uuid: str) -> DeviceSample | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GpuUsage:
    util_mean: float | None  # percent
    util_max: float | None  # percent
    memory_peak: int | None  # bytes
    memory_of: str  # "process" (the attempt's own) or "device" (everything on its GPUs)
    samples: int

    def fields(self) -> dict[str, float | int | str | None]:
        """As ``Store.set_usage`` takes them."""
        return {
            "gpu_util_mean": self.util_mean,
            "gpu_util_max": self.util_max,
            "gpu_memory_peak": self.memory_peak,
            "gpu_memory_of": self.memory_of if self.memory_peak is not None else None,
        }


def in_attempt(cgroup_text: str, container: str) -> bool:
    """Whether a process whose ``/proc/PID/cgroup`` reads ``cgroup_text`` runs in the
    attempt ``container`` (or one of its gang replicas)."""
    parent = f"/{PARENT}/{container}"
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        i = path.find(parent)
        if i >= 0:
            rest = path[i + len(parent) :]
            if rest == "" or rest.startswith("/") or rest.startswith("-r"):
                return True
    return False


def read_cgroup(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return f.read()
    except OSError:  # gone, or another PID namespace's number
        return ""


@dataclass
class Tally:
    """One attempt's samples so far (pure: ``add`` takes what the devices said)."""

    uuids: tuple[str, ...]
    util_sum: float = 0.0
    util_max: float | None = None
    util_n: int = 0
    own_peak: int | None = None  # the attempt's processes' memory, when NVML named any
    device_peak: int | None = None
    samples: int = 0

    def add(self, samples: Sequence[DeviceSample], mine: Callable[[int], bool]) -> None:
        utils = [s.utilization for s in samples if s.utilization is not None]
        if utils:
            u = sum(utils) / len(utils)  # several GPUs: their mean, as nvidia-smi dmon's per-GPU rows averaged
            self.util_sum += u
            self.util_n += 1
            self.util_max = u if self.util_max is None else max(self.util_max, u)
        used = [s.memory_used for s in samples if s.memory_used is not None]
        if used:
            self.device_peak = max(self.device_peak or 0, sum(used))
        own = [b for s in samples for pid, b in s.processes if b is not None and mine(pid)]
        if own:
            self.own_peak = max(self.own_peak or 0, sum(own))
        self.samples += 1

    def result(self) -> GpuUsage:
        mean = self.util_sum / self.util_n if self.util_n else None
        if self.own_peak is not None:
            return GpuUsage(mean, self.util_max, self.own_peak, "process", self.samples)
        return GpuUsage(mean, self.util_max, self.device_peak, "device", self.samples)


class GpuSampler:
    """Samples the GPUs of watched attempts on a daemon thread until ``close``."""

    def __init__(
        self,
        source: UsageSource,
        interval: float | None = None,
        cgroup_of: Callable[[int], str] = read_cgroup,
    ) -> None:
        self.source = source
        self.interval = interval if interval is not None else _interval()
        self._cgroup_of = cgroup_of
        self._tallies: dict[str, Tally] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hetflow-gpu-sampler", daemon=True)
        self._thread.start()

    def watch(self, container: str, uuids: Sequence[str]) -> None:
        if uuids:
            with self._lock:
                self._tallies.setdefault(container, Tally(tuple(uuids)))
        self.sample_once()  # a first sample now: a short step gets at least one

    def stop(self, container: str) -> GpuUsage | None:
        """The attempt's figures, and no more sampling of it; None when it was not watched."""
        with self._lock:
            tally = self._tallies.pop(container, None)
        return tally.result() if tally is not None else None

    def sample_once(self) -> None:
        with self._lock:
            watched = list(self._tallies.items())
        by_uuid: dict[str, DeviceSample | None] = {}
        for _, tally in watched:
            for u in tally.uuids:
                if u not in by_uuid:
                    by_uuid[u] = self.source.sample(u)
        cgroups: dict[int, str] = {}

        def cgroup(pid: int) -> str:
            if pid not in cgroups:
                cgroups[pid] = self._cgroup_of(pid)
            return cgroups[pid]

        def owned_by(container: str) -> Callable[[int], bool]:
            return lambda pid: in_attempt(cgroup(pid), container)

        for container, tally in watched:
            got = [s for u in tally.uuids if (s := by_uuid.get(u)) is not None]
            if got:
                with self._lock:
                    if self._tallies.get(container) is tally:
                        tally.add(got, owned_by(container))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample_once()
            except Exception:  # a sampling error must never end the run: the figures stay unknown
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.source.close()


def _interval() -> float:
    try:
        value = float(os.environ.get("HETFLOW_GPU_SAMPLE_INTERVAL", SAMPLE_INTERVAL))
    except ValueError:
        return SAMPLE_INTERVAL
    return value if value > 0 else SAMPLE_INTERVAL


def nvml_sampler() -> GpuSampler | None:
    """A sampler on the real NVML, or None where there is none (no driver, no pynvml)."""
    from hetflow.inventory import NvmlUsage

    try:
        return GpuSampler(NvmlUsage())
    except Exception:  # OSError (no pynvml) or pynvml.NVMLError (no driver): nothing to sample
        return None


class AttemptGpus:
    """The runner's sampling of its attempts' GPUs (``Attempts``): the sampler is made when the
    first GPU attempt starts, None where NVML is absent; stored as each attempt ends.  Only where
    the attempts run on this machine (``here``): a cluster engine runs them elsewhere, where NVML
    here knows nothing of them."""

    def __init__(self, store: Store, run_id: str, *, here: bool) -> None:
        self.store, self.run_id, self.here = store, run_id, here
        self._sampler: GpuSampler | bool | None = False  # False: not made yet

    def watch(self, container: str, uuids: Sequence[str]) -> None:
        """Sample ``uuids`` for ``container`` (started, or adopted) until ``record``."""
        if not uuids or not self.here:
            return
        if self._sampler is False:
            self._sampler = nvml_sampler()
        if isinstance(self._sampler, GpuSampler):
            self._sampler.watch(container, uuids)

    def record(self, step: str, attempt: int, container: str) -> None:
        """Stop sampling ``container`` and store what it used, if it was sampled."""
        if isinstance(self._sampler, GpuSampler):
            used = self._sampler.stop(container)
            if used is not None and used.samples:
                self.store.set_usage(self.run_id, step, attempt, **used.fields())

    def close(self) -> None:
        if isinstance(self._sampler, GpuSampler):
            self._sampler.close()
        self._sampler = False
