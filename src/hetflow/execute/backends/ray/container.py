"""Inside the step task, on the node Ray chose: the container in the foreground
(``podman run --rm``), stopped when Ray cancels the task; and the node probe.

What the container used is measured here as local podman's is (``execute.cgroups``): a
parent cgroup of its own, ``/hetflow/NAME``, whose counters outlive the container, read once
``podman run`` returns and then removed.  The task returns it (``Usage``: peak memory, CPU
time, and the node's clock around ``podman run``) with the exit code; where the task may not
make the cgroup (rootless podman, a read-only cgroup file system) the figures stay unknown.
A job restored from a checkpoint (``Job.restore``) is ``podman container restore``d instead
(``restore``) and waited for with ``podman wait``; measured, cancelled and removed the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray

from hetflow.config import SHARE, engine_env
from hetflow.execute.backends.local import cgroups
from hetflow.execute.backends.ray.restore import note_in_log, remove, restore_container
from hetflow.execute.backends.ray.translate import MIG_ENV, node_name, with_gpus, with_mig
from hetflow.execute.checkpoint.images import Restore
from hetflow.execute.devices.migtable import MigInstance
from hetflow.execute.engine import ContainerSpec, Usage, drop_env_file, run_args, write_env_file

CANCELLED_CODE = 137  # what `podman stop` gives a container that ignores SIGTERM


def foreground_argv(spec: ContainerSpec, env_file: Path | None = None) -> list[str]:
    """``podman run --rm`` in the foreground: the hardened ``run -d`` arguments without
    ``-d``; the exit code of ``podman run`` is the container's.  ``env_file``: the step's
    environment is read from it (``engine.write_env_file``), never given on the command line."""
    args = run_args(spec, engine="podman", env_file=env_file)
    args.remove("-d")
    return ["podman", "--hooks-dir", str(SHARE / "hooks.d"), args[0], "--rm", *args[1:]]


def run_container(
    spec: ContainerSpec, stop_timeout: int, restore: Restore | None = None
) -> tuple[int, str, str, Usage]:
    """Run to the end; (exit code, status, reason, what it used).  A Ray cancel arrives as
    KeyboardInterrupt (ray.cancel, force=False): the container is stopped, and stopped
    again until ``podman run`` returns, since it may not have existed at the first stop.
    ``restore``: start it from that checkpoint instead (``restore``), or from zero when that
    fails, the reason the first line of its log."""
    binary = shutil.which("podman")
    if binary is None:
        return 127, "EXITED", f"podman not found on node {_here()}: apt-get install -y podman runc", Usage()
    layout = cgroups.detect()
    if layout is not None and cgroups.prepare(layout, spec.name):
        spec = replace(spec, cgroup_parent=cgroups.parent_path(spec.name))
    env = engine_env()
    started = time.time()
    ran: tuple[int, str, str] | None = None
    if restore is not None:
        ran = _restored(binary, spec, restore, stop_timeout, env)
    if ran is None:
        ran = _foreground(binary, spec, stop_timeout, env)
    used = Usage(started=started, ended=time.time())
    if spec.cgroup_parent and layout is not None:
        measured = cgroups.read_usage(layout, spec.name)
        cgroups.remove(layout, spec.name)
        oom = True if measured.oom_kills else None
        used = replace(used, peak_memory=measured.peak_memory, cpu_seconds=measured.cpu_seconds, oom_killed=oom)
    return (*ran, used)


def _foreground(binary: str, spec: ContainerSpec, stop_timeout: int, env: Mapping[str, str]) -> tuple[int, str, str]:
    """``podman run`` in the foreground: (exit code, status, reason)."""
    env_file = write_env_file(spec.env) if spec.env else None  # 0600 in a private folder on this node
    argv = [binary, *foreground_argv(spec, env_file)[1:]]
    with tempfile.TemporaryFile() as err, _dropped(env_file):
        with cancels_held() as cancelled:  # a cancel inside Popen would leave its podman run unowned
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            if cancelled:
                raise KeyboardInterrupt
            code, status = _wait(proc), "EXITED"
        except KeyboardInterrupt:
            with cancels_held():  # a cancel sent again (Ray retries it) must not cut the stop short
                code, status = _stop(binary, spec.name, proc, stop_timeout, env), "CANCELLED"
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return code, status, lines[-1] if lines and code in (125, 126, 127) else ""


def _restored(
    binary: str, spec: ContainerSpec, r: Restore, stop_timeout: int, env: Mapping[str, str]
) -> tuple[int, str, str] | None:
    """The container restored from ``r`` and waited for (``podman wait``, which gives its exit
    code); None when it could not be restored (the reason is noted in the attempt's log)."""
    try:
        why = restore_container(binary, spec, r, env)
    except KeyboardInterrupt:  # cancelled while restoring: whatever was restored goes
        with cancels_held():
            remove(binary, spec.name, env)
        return CANCELLED_CODE, "CANCELLED", "cancelled while it was being restored"
    if why:
        note_in_log(spec.log_path, f"hetflow: {why}; this attempt starts from zero")
        return None
    status = "EXITED"
    with tempfile.TemporaryFile() as out:
        with cancels_held() as cancelled:
            proc = subprocess.Popen([binary, "wait", spec.name], stdin=subprocess.DEVNULL, stdout=out, env=env)
        try:
            if cancelled:
                raise KeyboardInterrupt
            _wait(proc)
        except KeyboardInterrupt:
            with cancels_held():
                _stop(binary, spec.name, proc, stop_timeout, env)
            status = "CANCELLED"
        out.seek(0)
        said = out.read().decode(errors="replace").split()
    with cancels_held():
        remove(binary, spec.name, env)  # restored with autoremove off (``KEEP_EXITED``): its code was read
    if said and said[-1].lstrip("-").isdigit():
        return int(said[-1]), status, ""
    if status == "CANCELLED":
        return CANCELLED_CODE, status, ""
    return 125, status, f"podman wait {spec.name} gave no exit code after its restore"


@contextlib.contextmanager
def _dropped(env_file: Path | None) -> Iterator[None]:
    try:
        yield
    finally:
        drop_env_file(env_file)


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``podman run``, waking every 0.5 s: Ray's cancel is a simulated SIGINT
    (``_thread.interrupt_main``) that a blocking waitpid would not see.  A pidfd
    (Linux 5.3) makes the wait end the moment the process does."""
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = None
    try:
        while True:
            if pidfd is not None:
                select.select([pidfd], [], [], 0.5)
            try:
                return proc.wait(timeout=0 if pidfd is not None else 0.5)
            except subprocess.TimeoutExpired:
                continue
    finally:
        if pidfd is not None:
            os.close(pidfd)


@contextlib.contextmanager
def cancels_held() -> Iterator[list[bool]]:
    """Ray's cancel held back while the block runs: noted in the list it yields, not raised.
    The cancel is a simulated SIGINT (``_thread.interrupt_main``) that raises KeyboardInterrupt
    at any line of the task's main thread: inside ``Popen`` it left the ``podman run`` it had
    started unowned (the container ran on, never stopped), and a second one (Ray sends the
    cancel again when its first reply comes late, as on a loaded machine) inside the stop cut
    ``podman stop`` short and ended the task while its container ran on (a step that saves on
    SIGTERM was reported stopped before it had saved).  Off the main thread nothing is held
    (no cancel is delivered there)."""
    came: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda *_: came.append(True))
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, before if before is not None else signal.default_int_handler)


def _stop(binary: str, name: str, proc: subprocess.Popen[bytes], timeout: int, env: Mapping[str, str]) -> int:
    """Stop the container until its ``podman run`` (or ``podman wait``) returns: it may not have
    existed at the first stop.  Run with cancels held (``cancels_held``)."""
    stop = [binary, "stop", "--ignore", "-t", str(timeout), name]
    while proc.poll() is None:
        subprocess.run(stop, env=env, capture_output=True, check=False)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            continue
    return proc.returncode  # the container's own code: 137 or 143 when stopped, 0 if it had just finished


def ray_nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


def _here() -> str:
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    for n in ray_nodes():
        if n["NodeID"] == node_id:
            return node_name(n.get("Labels") or {}, n.get("Resources") or {}, node_id)
    return node_id


@ray.remote(max_retries=0)
def step_task(
    spec: ContainerSpec,
    device_dir: str,
    stop_timeout: int,
    keeper: Any,
    migs: Mapping[str, tuple[MigInstance, ...]] | None = None,
    restore: Restore | None = None,
) -> tuple[int, str, str, Usage]:
    """One step attempt on the node Ray chose.  Never retried by Ray: hetflow decides.
    It tells the keeper when Ray started it (the node's clock), the step's start.
    ``migs``: the cluster's MIG instances by node (``ray.mig_devices``), for a MIG step;
    ``restore``: the checkpoint it starts from (``Job.restore``)."""
    try:
        began = time.time()
        gpu_ids = [int(i) for i in ray.get_gpu_ids()]
        keeper.started.remote(spec.name, ray.get_runtime_context().get_node_id(), tuple(gpu_ids), began)
        profile = spec.env.get(MIG_ENV)
        if "{node}" in device_dir and (gpu_ids or profile):
            device_dir = device_dir.replace("{node}", _here())
        if profile:
            node = _here()
            with held_mig(node, profile, (migs or {}).get(node, ())) as mig:
                if mig is None:
                    listed = len((migs or {}).get(node, ()))
                    return (
                        125,
                        "EXITED",
                        (
                            f"node {node} gave a mig-{profile} but ray.mig_devices lists no free {profile} instance "
                            f"of it ({listed} instance(s) listed for {node}); list the node's instances there"
                        ),
                        Usage(),
                    )
                return run_container(with_mig(spec, mig, device_dir), stop_timeout, restore)
        return run_container(with_gpus(spec, gpu_ids, device_dir), stop_timeout, restore)
    except KeyboardInterrupt:
        return CANCELLED_CODE, "CANCELLED", "cancelled before its container started", Usage()


@contextlib.contextmanager
def held_mig(node: str, profile: str, instances: Sequence[MigInstance]) -> Iterator[MigInstance | None]:
    """One of the node's ``profile`` instances no other task holds, held (an flock on a file
    named by its UUID in the node's temporary folder) while the container runs: Ray counts
    ``mig-<profile>`` but does not say which instance, as hetflow's GPU leases do locally.
    None when every listed one is held (the table lists fewer than the node declares)."""
    folder = Path(tempfile.gettempdir()) / "hetflow-mig"
    if not folder.is_dir():
        folder.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            folder.chmod(0o1777)  # shared by every user's tasks on the node, as /tmp is
    for mig in (m for m in instances if m.profile == profile):
        try:  # read-only is enough for flock, so another user's lock file opens too
            fd = os.open(folder / f"{mig.uuid}.lock", os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            yield mig
        finally:
            os.close(fd)  # closing drops the lock
        return
    yield None


@ray.remote(num_cpus=0, max_retries=0)
def probe_node(image: str | None) -> tuple[str, bool, bool]:
    """(node, podman found, image present) on the node it runs on."""
    binary = shutil.which("podman")
    present = False
    if binary and image:
        proc = subprocess.run([binary, "image", "exists", image], env=engine_env(), capture_output=True, check=False)
        present = proc.returncode == 0
    return _here(), binary is not None, present
