"""GPU checkpoints inside a container checkpoint: what ``CriuPodman`` asks around a dump and a restore.

Only on a host with NVIDIA's control node (``/dev/nvidiactl``) and only for containers with
processes holding a ``/dev/nvidia*`` node is anything done: CPU steps, and every step on a
host without an NVIDIA driver, are dumped and restored exactly as before (the driver is
never loaded).  Around a dump: ``cudaprocs.CudaProcesses.around_dump`` (lock, checkpoint;
restore and unlock after a periodic dump).  Before a restore: the GPUs the image was dumped
with (``HETFLOW_GPU_UUIDS`` in its OCI spec) against the new attempt's, refused when their
models differ (``gpu_pairs``) and, for now, whenever they are other GPUs: the driver can remap
(``gpuPairs``, CUDA 13.0), the container's device nodes do not follow yet.
After it: each process the driver has checkpointed restored onto the new GPUs and unlocked
(CRIU's CUDA plugin likewise asks each restored process, ``cuda-checkpoint --get-restore-tid``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.checkpoint.cudadriver import DriverSupport, Pair, load_driver
from hetflow.execute.checkpoint.cudaprocs import (
    GPU_ENV,
    CudaProcesses,
    Suspended,
    cgroup_pids,
    cuda_pids,
    gpu_pairs,
)
from hetflow.execute.checkpoint.freeze import CGROUP_ROOT


def image_gpus(oci_spec: object) -> str:
    """``HETFLOW_GPU_UUIDS`` of a dumped container's OCI spec (``config.dump``'s ``spec``): the
    GPUs its processes were checkpointed on ("" for a CPU step)."""
    process = oci_spec.get("process") if isinstance(oci_spec, dict) else None
    env = process.get("env") if isinstance(process, dict) else None
    for item in env if isinstance(env, list) else ():
        if isinstance(item, str) and item.startswith(f"{GPU_ENV}="):
            return item.split("=", 1)[1]
    return ""


def _node_models() -> dict[str, str]:
    from hetflow.config import hetflow_home
    from hetflow.inventory import discover

    return {g.uuid: g.model for g in discover(hetflow_home()).gpus}


class CudaSteps:
    """The GPU half of a container checkpoint, with its seams: the driver's loader, the
    cgroup and /proc roots, the host's /dev and the GPU models by UUID (NVML)."""

    def __init__(
        self,
        load: Callable[[], DriverSupport] = load_driver,
        *,
        cgroups: Path = CGROUP_ROOT,
        proc: Path = Path("/proc"),
        dev: Path = Path("/dev"),
        models: Callable[[], Mapping[str, str]] = _node_models,
    ) -> None:
        self._load, self.cgroups, self.proc, self.dev, self._models = load, cgroups, proc, dev, models

    @property
    def on_host(self) -> bool:
        """Whether this host has an NVIDIA driver (its control node): else nothing is ever done."""
        return (self.dev / "nvidiactl").exists()

    def pids(self, cgroup: str) -> list[int]:
        """The container's CUDA processes (none without an NVIDIA driver on the host)."""
        if not cgroup or not self.on_host:
            return []
        return cuda_pids(cgroup, self.cgroups, self.proc)

    @functools.cached_property
    def processes(self) -> CudaProcesses:
        found = self._load()
        if found.driver is None:
            raise EngineError(f"GPU checkpoint: {found.reason}")
        return CudaProcesses(found.driver)

    @contextlib.contextmanager
    def around_dump(self, cgroup: str, *, leave_running: bool) -> Iterator[Suspended | None]:
        pids = self.pids(cgroup)
        if not pids:
            yield None
            return
        with self.processes.around_dump(pids, leave_running=leave_running) as done:
            yield done

    def plan_restore(self, oci_spec: object, env: Mapping[str, str]) -> list[Pair] | None:
        """The GPU remapping for restoring an image into a container with ``env`` (None: the
        image holds no GPU step); EngineError, before anything is restored, when it cannot be."""
        old, new = image_gpus(oci_spec), env.get(GPU_ENV, "")
        if not old:
            return None
        if not new:
            raise EngineError("GPU restore refused: the checkpoint holds CUDA state and the new attempt has no GPU")
        pairs = gpu_pairs(old, new, self._models().get)
        if any(p.old != p.new for p in pairs):
            # The driver could remap (``Pair``, from CUDA 13.0), but the container could not
            # follow: its OCI spec, its device cgroup and the /dev that CRIU restores hold the
            # old GPU's /dev/nvidiaN (a GPU keeps its host name inside: devices.gpu).
            raise EngineError(
                f"GPU restore refused: the checkpoint was taken on {old}, the new attempt has {new}; hetflow "
                "restores CUDA state only onto the GPU it was taken on (moving the container's /dev/nvidiaN "
                "to another GPU is not done yet)"
            )
        return pairs

    def after_restore(self, cgroup: str, pairs: list[Pair]) -> list[str]:
        """Each restored CUDA process back on its (new) GPU and running; the ones left alone.
        Every process of the container is asked (a checkpointed one holds no /dev/nvidia*
        node: the driver let go of them all); those the driver does not know are skipped."""
        pids = cgroup_pids(cgroup, self.cgroups)
        if not pids:
            raise EngineError(f"GPU restore: no process found in the restored container's cgroup {cgroup!r}")
        return self.processes.restored(pids, pairs)
