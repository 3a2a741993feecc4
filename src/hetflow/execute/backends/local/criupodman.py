"""Checkpoint and restore step containers through podman, with the CRIU ``criu`` found.

A dump is ``podman container checkpoint --export IMAGE --compress none`` (uncompressed: the
fastest to write, and ``archive.retarget`` appends to it), with ``--leave-running`` for a
periodic one.  A restore readies the image for the new attempt (``archive``), copies the
outputs kept with it into the attempt's ``/out``, and ``podman container restore --import``s
it; podman then logs to its own file, which is hard-linked as the attempt's log (same file
system) or linked to by a symlink, and the container is watched as a started one is.

A GPU step's CUDA processes are checkpointed through the driver around the dump and restored
onto the new attempt's GPU after the restore (``checkpoint.cudasteps``); on a host without an
NVIDIA driver that part does nothing.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.local.podman import CliEngine
from hetflow.execute.checkpoint.archive import config_value, empty_out, link_log, ready_for
from hetflow.execute.checkpoint.criu import CriuSupport, criu_support, last_line
from hetflow.execute.checkpoint.cudadriver import Pair
from hetflow.execute.checkpoint.cudasteps import CudaSteps
from hetflow.execute.checkpoint.freeze import frozen_dump
from hetflow.execute.checkpoint.images import Restore
from hetflow.execute.engine import ContainerSpec

DUMP_TIMEOUT = 1800.0  # seconds: a dump of tens of GiB to a slow disk


class CriuPodman:
    def __init__(self, engine: CliEngine, support: CriuSupport | None = None, cuda: CudaSteps | None = None) -> None:
        self.engine = engine
        self.support = support or criu_support(engine=engine.name)
        self.cuda = cuda or CudaSteps()

    def _env(self) -> dict[str, str]:
        if not self.support.ok:
            raise EngineError(f"cannot checkpoint here: {self.support.reason}")
        return {"PATH": self.support.on_path(os.environ)["PATH"]}

    def dump(self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None) -> float:
        """Dump container ``name`` to ``dest``, with ``outputs`` (its /out, where to copy it)
        copied while it is frozen for the dump; returns the seconds it took (the container is
        paused that long).  EngineError with podman's (CRIU's) words when it fails.  A GPU
        step's CUDA state is checkpointed first and, for a periodic dump, restored after it
        (the cgroup is frozen only in between: a frozen process cannot be locked)."""
        env = self._env()
        args = ["container", "checkpoint", "--export", str(dest), "--compress", "none"]
        args += ["--leave-running"] if leave_running else []
        start = time.monotonic()
        cgroup = self._cgroup(name) if outputs is not None or self.cuda.on_host else ""
        with self.cuda.around_dump(cgroup, leave_running=leave_running):
            proc = frozen_dump(
                cgroup, outputs, lambda: self.engine.command([*args, name], timeout=DUMP_TIMEOUT, env=env)
            )
        took = time.monotonic() - start
        if proc.returncode != 0 or not dest.is_file():
            dest.unlink(missing_ok=True)
            raise EngineError(f"checkpoint of {name} failed: {last_line(proc.stderr or proc.stdout)}")
        return took

    def restore(self, r: Restore, spec: ContainerSpec) -> None:
        """Start ``spec``'s container (a new attempt) from checkpoint ``r``.  One that fails
        leaves the attempt's ``/out`` empty again, for the start from zero that follows: the
        checkpoint's copy of it was the restored process's, not a new one's (a counter started
        afresh appended 1..60 after the copy's 1..11: issue 37)."""
        env = self._env()
        pairs = self._gpu_plan(r, spec)  # a GPU image onto another GPU model: refused before anything
        staging = next((m.source for m in spec.mounts if m.target == "/out"), None)
        try:
            if staging:
                shutil.copytree(r.outputs, staging, symlinks=True, dirs_exist_ok=True)
            parent = self.engine.prepare_cgroup(spec.name)
            ready_for(r, name=spec.name, labels=spec.labels, staging=staging, cgroup_parent=parent)
            proc = self.engine.command(["container", "restore", "--import", r.image], timeout=DUMP_TIMEOUT, env=env)
            if proc.returncode != 0:
                self.engine.command(["rm", "-f", spec.name], timeout=60, env={})
                why = last_line(proc.stderr or proc.stdout)
                raise EngineError(f"restore of {spec.name} from {r.image} failed: {why}")
            if pairs is not None:
                self._gpu_restore(spec.name, pairs)
        except BaseException:
            if staging:
                empty_out(Path(staging))
            raise
        if spec.log_path:
            self._link_log(spec.name, Path(spec.log_path))
        self.engine.follow(spec.name, spec.labels)

    def _gpu_plan(self, r: Restore, spec: ContainerSpec) -> list[Pair] | None:
        if not self.cuda.on_host:
            return None
        return self.cuda.plan_restore(config_value(Path(r.image), "spec"), spec.env)

    def _gpu_restore(self, name: str, pairs: list[Pair]) -> None:
        """The restored container's CUDA processes onto its GPUs; the container removed if not."""
        try:
            self.cuda.after_restore(self._cgroup(name), pairs)
        except EngineError:
            self.engine.command(["rm", "-f", name], timeout=60, env={})
            raise

    def _cgroup(self, name: str) -> str:
        proc = self.engine.command(["inspect", "--format", "{{.State.CgroupPath}}", name], timeout=60, env={})
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def _link_log(self, name: str, log: Path) -> None:
        proc = self.engine.command(["inspect", "--format", "{{.HostConfig.LogConfig.Path}}", name], timeout=60, env={})
        if proc.returncode == 0:
            link_log(proc.stdout.strip(), log)
