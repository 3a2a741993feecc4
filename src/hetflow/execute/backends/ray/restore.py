"""CRIU checkpoints on Ray (issue 27), done on the node where a step's task runs.

A dump is a small task pinned to that node (``dump_task``, NodeAffinity with the node id the
run's keeper recorded when the step task started): ``podman container checkpoint --export
DEST --compress none [--leave-running] NAME`` with hetflow's CRIU first on PATH, DEST in the
run's shared workdir.  A restore (``Job.restore``) is done by the step task itself instead of
``podman run`` (``restore_container``): the outputs kept with the checkpoint copied into the
attempt's ``/out``, the image given the attempt's identity (``checkpoint.archive.retarget``:
name, labels, ID, staging folder, cgroup parent; podman's autoremove off, so a container that
ends at once keeps its exit code for ``podman wait``), ``podman container restore --import``, and
podman's own log file hard-linked as the attempt's log (``CriuPodman`` does the same locally;
it is not reused here because it needs a ``CliEngine``, whose OCI-runtime probe and
``--runtime`` flag the task's ``podman run`` does not use).  The task then waits for the
restored container as for a started one.  A restore that fails says why, and the task runs
the step from zero with that reason as the first line of the attempt's log.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import ray

from hetflow.config import engine_env
from hetflow.errors import HetflowError
from hetflow.execute.checkpoint.archive import KEEP_EXITED, empty_out, link_log, ready_for
from hetflow.execute.checkpoint.criu import criu_support, last_line
from hetflow.execute.checkpoint.freeze import frozen_dump
from hetflow.execute.checkpoint.images import Restore
from hetflow.execute.engine import ContainerSpec

DUMP_TIMEOUT = 1800.0  # seconds: a dump of tens of GiB to a slow shared disk


def criu_env(env: Mapping[str, str]) -> dict[str, str] | str:
    """``env`` with this node's working CRIU first on PATH, or why there is none."""
    support = criu_support()
    if not support.ok:
        return support.reason
    return support.on_path(env)


@ray.remote(num_cpus=0, max_retries=0)
def dump_task(name: str, dest: str, leave_running: bool, outputs: tuple[str, str] | None) -> tuple[bool, float, str]:
    """Dump container ``name`` to ``dest`` on this node, with ``outputs`` (its /out, where to
    copy it) copied while it is frozen for the dump: (done, seconds, why not)."""
    binary = shutil.which("podman")
    if binary is None:
        return False, 0.0, "podman not found on this node"
    with_criu = criu_env(engine_env())
    if isinstance(with_criu, str):
        return False, 0.0, f"cannot checkpoint on this node: {with_criu}"
    args = [binary, "container", "checkpoint", "--export", dest, "--compress", "none"]
    args += ["--leave-running"] if leave_running else []
    start = time.monotonic()

    def podman(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*more, name], env=with_criu, capture_output=True, text=True, timeout=DUMP_TIMEOUT, check=False
        )

    try:
        copy = (Path(outputs[0]), Path(outputs[1])) if outputs else None
        cgroup = podman(binary, "inspect", "--format", "{{.State.CgroupPath}}").stdout.strip() if copy else ""
        proc = frozen_dump(cgroup, copy, lambda: podman(*args))
        said = last_line(proc.stderr or proc.stdout) if proc.returncode != 0 else ""
    except OSError as exc:
        said = f"cannot copy {name}'s outputs: {exc}"
    except subprocess.TimeoutExpired:
        said = f"podman container checkpoint took more than {DUMP_TIMEOUT:.0f}s"
    took = time.monotonic() - start
    if said or not Path(dest).is_file():
        Path(dest).unlink(missing_ok=True)
        return False, took, said or f"podman wrote no {dest}"
    return True, took, ""


def restore_container(binary: str, spec: ContainerSpec, r: Restore, env: Mapping[str, str]) -> str:
    """Start ``spec``'s container (a new attempt) from checkpoint ``r``, detached; "" when
    it runs, else why not (then nothing of it is left: its /out is empty again)."""
    with_criu = criu_env(env)
    if isinstance(with_criu, str):
        return f"cannot restore on this node: {with_criu}"
    staging = next((m.source for m in spec.mounts if m.target == "/out"), None)
    try:
        if staging:
            shutil.copytree(r.outputs, staging, symlinks=True, dirs_exist_ok=True)
        ready_for(
            r,
            name=spec.name,
            labels=spec.labels,
            staging=staging,
            cgroup_parent=spec.cgroup_parent,
            replace=KEEP_EXITED,  # one that ends at once keeps its exit code for ``podman wait``
        )
        proc = subprocess.run(
            [binary, "container", "restore", "--import", r.image],
            env=with_criu,
            capture_output=True,
            text=True,
            timeout=DUMP_TIMEOUT,
            check=False,
        )
        why = last_line(proc.stderr or proc.stdout) if proc.returncode != 0 else ""
    except (OSError, HetflowError, subprocess.TimeoutExpired) as exc:
        why = str(exc)
    if why:
        remove(binary, spec.name, env)
        if staging:
            empty_out(Path(staging))
        return f"restore from {r.image} failed: {why}"
    if spec.log_path:
        _link_log(binary, spec.name, Path(spec.log_path), env)
    return ""


def remove(binary: str, name: str, env: Mapping[str, str]) -> None:
    subprocess.run([binary, "rm", "-f", "--ignore", name], env=env, capture_output=True, check=False)


def note_in_log(log_path: str | None, text: str) -> None:
    """One line in the attempt's log (k8s-file, as podman writes it) before its container's."""
    if not log_path:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000+00:00", time.gmtime())
    with contextlib.suppress(OSError):
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"{stamp} stderr F {text}\n")


def _link_log(binary: str, name: str, log: Path, env: Mapping[str, str]) -> None:
    """podman logs a restored container to its own file: make it the attempt's log too."""
    proc = subprocess.run(
        [binary, "inspect", "--format", "{{.HostConfig.LogConfig.Path}}", name],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode == 0:
        link_log(proc.stdout.strip(), log)
