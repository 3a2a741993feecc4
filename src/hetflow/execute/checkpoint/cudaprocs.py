"""A container's CUDA processes around a CRIU dump and restore (``cudadriver`` does the calls).

The CUDA processes of a container are the processes of its cgroup that hold a ``/dev/nvidia*``
node open.  A dump: each is locked (waiting at most ``LOCK_TIMEOUT`` for its running CUDA work)
and checkpointed (its GPU memory moved into host memory), CRIU dumps the container, then a
periodic dump restores and unlocks each (it runs on), a stopping one leaves them (CRIU has
ended them).  A restore: CRIU restores the container, each process is restored onto the GPU
the new attempt was given (``Pair``: old UUID -> new UUID) and unlocked.  A process the driver
says holds no CUDA context (``cuCheckpointProcessGetState`` fails) is left alone, not an error.
A failure half-way puts back what was done (restore, unlock) and says which call failed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.checkpoint.cudadriver import (
    CHECKPOINTED,
    CUDA_ERROR_TIMEOUT,
    LOCKED,
    RUNNING,
    STATE_NAMES,
    CudaDriver,
    CudaError,
    Pair,
)
from hetflow.execute.checkpoint.freeze import CGROUP_ROOT

LOCK_TIMEOUT = 30.0  # seconds a lock waits for the process's CUDA calls in flight to finish
GPU_ENV = "HETFLOW_GPU_UUIDS"  # the GPUs a container was given (execute.devices.gpu)


def cgroup_pids(cgroup_path: str, root: Path = CGROUP_ROOT) -> list[int]:
    """Every process of the cgroup podman names (``.State.CgroupPath``) and of its children."""
    rel = cgroup_path.strip().lstrip("/")
    if not rel:
        return []
    base = root / rel if (root / "cgroup.controllers").is_file() else root / "pids" / rel
    pids: set[int] = set()
    for procs in base.rglob("cgroup.procs") if base.is_dir() else ():
        with contextlib.suppress(OSError):
            pids.update(int(x) for x in procs.read_text().split())
    return sorted(pids)


def holds_gpu(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` has a /dev/nvidia* node open (its GPU, nvidiactl, nvidia-uvm)."""
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith("/dev/nvidia"):
                return True
    return False


def cuda_pids(cgroup_path: str, root: Path = CGROUP_ROOT, proc: Path = Path("/proc")) -> list[int]:
    return [p for p in cgroup_pids(cgroup_path, root) if holds_gpu(p, proc)]


@dataclass
class Suspended:
    """What a dump did to the CUDA processes: those checkpointed, those skipped (and why)."""

    pids: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0  # lock + checkpoint


class CudaProcesses:
    """The dump and restore sequences on one driver (``CudaDriver`` or a fake at its seam)."""

    def __init__(self, driver: CudaDriver, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.driver, self.lock_timeout = driver, lock_timeout

    def _context(self, pid: int, want: int, why: list[str]) -> bool:
        """Whether ``pid`` holds a CUDA context in state ``want``; else a line in ``why``."""
        try:
            state = self.driver.state(pid)
        except CudaError as exc:
            why.append(f"pid {pid}: no CUDA context ({exc.words})")
            return False
        if state != want:
            why.append(f"pid {pid}: CUDA state {STATE_NAMES.get(state, state)}, not {STATE_NAMES[want]}")
            return False
        return True

    def suspend(self, pids: Sequence[int]) -> Suspended:
        """Lock and checkpoint each running CUDA process; EngineError (and every one put back
        as it was) when one cannot be."""
        done, start = Suspended(), time.monotonic()
        for pid in pids:
            if not self._context(pid, RUNNING, done.skipped):
                continue
            try:
                self.driver.lock(pid, int(self.lock_timeout * 1000))
            except CudaError as exc:
                self.resume(done)
                raise EngineError(self._lock_failed(exc)) from None
            try:
                self.driver.checkpoint(pid)
            except CudaError as exc:
                self._put_back(pid, LOCKED)
                self.resume(done)
                raise EngineError(f"GPU checkpoint failed: {exc}; the step runs on, not checkpointed") from None
            done.pids.append(pid)
        done.seconds = time.monotonic() - start
        return done

    def _lock_failed(self, exc: CudaError) -> str:
        if exc.code == CUDA_ERROR_TIMEOUT:
            return (
                f"GPU checkpoint: pid {exc.pid}'s CUDA work did not let the driver lock it within "
                f"{self.lock_timeout:g}s ({exc.words}); the step runs on, not checkpointed"
            )
        return f"GPU checkpoint: {exc}; the step runs on, not checkpointed"

    def _put_back(self, pid: int, state: int) -> None:
        """Best effort, on a failure's path: bring one process back to running."""
        with contextlib.suppress(CudaError):
            if state == CHECKPOINTED:
                self.driver.restore(pid)
            self.driver.unlock(pid)

    def resume(self, done: Suspended) -> None:
        """After a periodic dump (or a failed one): each checkpointed process back on its GPU, running."""
        for pid in done.pids:
            self._put_back(pid, CHECKPOINTED)

    def restored(self, pids: Sequence[int], pairs: Sequence[Pair] = ()) -> list[str]:
        """After CRIU restored a container: each checkpointed CUDA process onto the attempt's
        GPUs (``pairs``) and unlocked; returns the processes left alone and why.  EngineError
        when a restore fails (the attempt cannot run: the caller removes it)."""
        skipped: list[str] = []
        for pid in pids:
            if not self._context(pid, CHECKPOINTED, skipped):
                continue
            try:
                self.driver.restore(pid, pairs)
                self.driver.unlock(pid)
            except CudaError as exc:
                raise EngineError(f"GPU restore failed: {exc}") from None
        return skipped

    @contextlib.contextmanager
    def around_dump(self, pids: Sequence[int], *, leave_running: bool) -> Iterator[Suspended]:
        """Suspended for the dump in the ``with`` body; back to running after it when the
        dump leaves the container running or failed (a stopping dump's processes are gone)."""
        done = self.suspend(pids)
        ok = False
        try:
            yield done
            ok = True
        finally:
            if leave_running or not ok:
                self.resume(done)


def gpu_pairs(old: str, new: str, models: Callable[[str], str | None]) -> list[Pair]:
    """The remapping from the GPUs a checkpoint was taken on (``old``, comma-separated NVML
    UUIDs as in HETFLOW_GPU_UUIDS) to the new attempt's (``new``); EngineError, before
    anything is restored, when their number or models differ (CUDA state restores only
    onto the same model: its code was built and its memory laid out for that GPU)."""
    was, now = [u for u in old.split(",") if u], [u for u in new.split(",") if u]
    if len(was) != len(now):
        raise EngineError(
            f"GPU restore refused: the checkpoint was taken on {len(was)} GPU(s), the new attempt has {len(now)}"
        )
    for a, b in zip(was, now, strict=True):
        ma, mb = models(a), models(b)
        if a != b and (ma is None or ma != mb):
            raise EngineError(
                f"GPU restore refused: the checkpoint was taken on a {ma or 'GPU of unknown model'} ({a}), "
                f"the new attempt has a {mb or 'GPU of unknown model'} ({b}): CUDA state restores only onto "
                "the same GPU model"
            )
    return [Pair(a, b) for a, b in zip(was, now, strict=True)]
