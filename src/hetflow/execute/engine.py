"""The container engine seam (like httpx's Transport): one small protocol and the values
that cross it (``ContainerSpec``, ``ContainerState``, ``Usage``), the ``podman run``
arguments of a spec, and its env files.  The real podman/docker implementation is
``podman`` (``CliEngine``, ``make_engine``); the fake for unit tests is ``fakeengine``.

Containers are started detached (``run -d``) with deterministic names and hetflow
labels, and are not ``--rm``: an exit code must survive a crash of hetflow so that
``resume`` can collect it.  The runner removes a container once its result is stored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hetflow.errors import EngineError

CGROUP_PARENT = "hetflow"  # top cgroup of every attempt's parent cgroup (backends.local.cgroups)


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to start one step attempt; built by ``container.build_spec``."""

    name: str
    image: str
    command: tuple[str, ...]
    user: str  # "UID:GID"
    labels: Mapping[str, str]
    env: Mapping[str, str]
    mounts: tuple[Mount, ...] = ()
    devices: tuple[tuple[str, str], ...] = ()  # (host path, container path)
    cdi_devices: tuple[str, ...] = ()  # e.g. "nvidia.com/gpu=GPU-..."
    cpus: float | None = None
    memory: int | None = None
    network: bool = False
    network_name: str = ""  # a gang's private network (its replicas reach each other by name)
    log_path: str | None = None
    tmpfs_size: str = "256m"
    cgroup_parent: str | None = None  # set by the engine where it measures (cgroups.parent_path)
    cpuset: str = ""  # CPUs to pin to ("0-15"): the NUMA node of the container's GPUs
    cap_add: tuple[str, ...] = ()  # capabilities given back (only a root MPI gang's sshd: mpilaunch)
    tmpfs: tuple[str, ...] = ()  # more tmpfs mounts beside /tmp, "PATH:OPTIONS"
    group_add: tuple[str, ...] = ()  # supplementary GIDs: the host groups of its GPUs' DRM nodes (gpunodes)
    stop_grace: int | None = None  # seconds from SIGTERM to SIGKILL when stopped (step's stop_grace; None: default)
    entrypoint: tuple[str, ...] | None = None  # replaces the image's ENTRYPOINT (a batch's entry); None: the image's
    passwd: bool = True  # podman adds the UID to /etc/passwd; false for a step CRIU may restore (podman 4.3)
    # the step's secrets, NAME -> value (also in ``env``): files /run/secrets/NAME (podman --secret); never shown
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    workdir: str = ""  # the process's working folder (--workdir); "": the image's (a TES executor's workdir)


@dataclass(frozen=True)
class Usage:
    """What one finished attempt used, as far as the engine could tell; None is unknown."""

    peak_memory: int | None = None  # bytes, the attempt's cgroup peak
    cpu_seconds: float | None = None  # user + system
    image_id: str | None = None  # the image's digest (or, without one, its ID)
    started: float | None = None  # when the container's process started (epoch seconds)
    ended: float | None = None  # when it exited
    oom_killed: bool | None = None  # True: the engine says the OOM killer ended it (None: it does not say)


UNKNOWN = Usage()
Measured = Callable[[str, Usage], None]  # given what a removed container used


# The status of a container that was made but will never start: the ``podman run`` that was to
# start it was killed (``orphans``).  Not running, no exit code: no step's doing (issue 37).
NEVER_STARTED = "never started"


@dataclass(frozen=True)
class ContainerState:
    name: str
    running: bool
    exit_code: int | None
    status: str  # engine's word: created, running, exited, ...; or NEVER_STARTED
    labels: Mapping[str, str] = field(default_factory=dict)  # where the engine lists them (podman, fake)
    reason: str = ""  # why it ended, when the engine said more than an exit code (a refused start)


class ContainerEngine(Protocol):
    name: str

    def image_exists(self, image: str) -> bool: ...

    def start(self, spec: ContainerSpec) -> None:
        """Create and start the container; EngineError when the engine refuses."""

    def states(self, run_id: str) -> dict[str, ContainerState]:
        """Every container of the run, running or not, by name."""

    def stop(self, names: Iterable[str], timeout: int = 10) -> None: ...

    def remove(self, names: Iterable[str]) -> None: ...

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``wake`` whenever a container of the run exits; returns a stopper, or None
        when the engine cannot watch (the runner then polls)."""


@runtime_checkable
class Networks(Protocol):
    """An engine that makes private networks (a gang's replicas reach each other on one)."""

    def create_network(self, name: str, *, internal: bool, labels: Mapping[str, str]) -> None:
        """Create it (an existing one of that name is kept: resume); EngineError if refused."""

    def remove_network(self, name: str) -> None: ...

    def run_networks(self) -> dict[str, str]:
        """Every network hetflow made, with the run it belongs to (its ``LABEL_RUN``)."""


ENV_FILE_WAIT = 120.0  # seconds an attached run's env file waits for its container to be created
ENV_FILE_MAX = 60_000  # bytes of one NAME=value line podman's --env-file reads (a 64 KiB line buffer)


def write_env_file(env: Mapping[str, str]) -> Path:
    """The step's environment as an ``--env-file`` (mode 0600, in a new private directory),
    so no value is on a command line that every local user can read in ``ps``.  podman takes
    each line's value verbatim up to its end: a value with a line break (or one too long for
    its line buffer) cannot be carried and is refused, naming the variable."""
    directory = Path(tempfile.mkdtemp(prefix="hetflow-env-"))  # mode 0700: this user only
    try:
        return write_env_file_at(directory / "env", env)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def write_env_file_at(path: Path, env: Mapping[str, str]) -> Path:
    """``env`` as an ``--env-file`` at ``path`` (created mode 0600, replacing an older one):
    what a cluster job reads on its node (Slurm: beside its job script)."""
    for k, v in env.items():
        if any(c in v for c in "\n\r\0") or len(k) + len(v) + 1 > ENV_FILE_MAX:
            raise EngineError(
                f"env {k}: a value with a line break or over {ENV_FILE_MAX} bytes cannot be passed to the "
                "container without showing it on a command line; put it in a file under the step's data instead"
            )
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(f"{k}={v}\n" for k, v in sorted(env.items()))
    return path


def secret_name(container: str, name: str) -> str:
    """The podman secret holding one container's secret NAME while the container is created."""
    return f"{container}-{name}"


def drop_env_file(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


def _tmp(size: str) -> str:
    return f"/tmp:rw,nosuid,nodev,size={size},mode=1777"


def run_args(
    spec: ContainerSpec, *, engine: str = "podman", attached: bool = False, env_file: Path | None = None
) -> list[str]:
    """The ``run -d`` arguments: the hardening that trusted runtimes apply (all
    capabilities dropped, no-new-privileges, read-only root, tmpfs /tmp, no network
    unless asked), the submitter's UID:GID, and only the devices given.  ``attached``: ``run``
    stays until the container exits and exits with its code (``exits.ExitWatch``), without
    passing signals on (``--sig-proxy=false``: ``hetflow stop`` stops containers itself).
    ``env_file``: the environment is read from it (``write_env_file``), not given as ``--env``."""
    args = [
        "run",
        *(["--sig-proxy=false"] if attached else ["-d"]),
        "--name",
        spec.name,
        "--user",
        spec.user,
        "--cap-drop=all",
        "--security-opt",
        "no-new-privileges",
        "--read-only",
        # a bind at /tmp itself (a TES task's workdir /tmp) is its /tmp: podman refuses two at one place
        *([] if any(m.target.rstrip("/") == "/tmp" for m in spec.mounts) else ["--tmpfs", _tmp(spec.tmpfs_size)]),
        *(a for t in spec.tmpfs for a in ("--tmpfs", t)),
        *(f"--cap-add={c}" for c in spec.cap_add),
        "--network",
        spec.network_name or ("bridge" if spec.network else "none"),
        "--pull",
        "never",
    ]
    if spec.network_name and spec.network_name != "host":
        args += ["--hostname", spec.name]
    for k, v in sorted(spec.labels.items()):
        args += ["--label", f"{k}={v}"]
    if spec.cpus:
        args += ["--cpus", f"{spec.cpus:g}"]
    if spec.memory:
        args += ["--memory", str(spec.memory)]
    if spec.cpuset:
        args += ["--cpuset-cpus", spec.cpuset]
    if spec.cgroup_parent and engine == "podman":
        # The monitor (conmon) stays out of the parent, so the parent counts the step only.
        args += ["--cgroups=no-conmon", "--cgroup-parent", spec.cgroup_parent]
    if not spec.passwd and engine == "podman":
        # a restored container would look for the passwd file podman made for the old one
        args.append("--passwd=false")
    if spec.log_path and engine == "podman":
        # podman writes the log where hetflow keeps it (CRI format); docker keeps its own
        # json-file log, copied out by DockerEngine.remove before the container goes.
        args += ["--log-driver", "k8s-file", "--log-opt", f"path={spec.log_path}"]
    for m in spec.mounts:
        if ":" in m.source or ":" in m.target:  # -v splits on colons (a CWL input named A:Gln2Cys)
            args += ["--mount", f"type=bind,source={m.source},target={m.target}{',ro' if m.read_only else ''}"]
        else:
            args += ["-v", f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
    for host, inside in spec.devices:
        args += ["--device", f"{host}:{inside}"]
    for cdi in spec.cdi_devices:
        args += ["--device", cdi]
    for gid in spec.group_add:
        args += ["--group-add", gid]
    if spec.secrets:
        # podman-run(1) --secret: type=mount copies the secret into the container's storage when
        # the container is created, as NAME under /run/secrets (a tmpfs here: the root is read-only)
        uid, _, gid = spec.user.partition(":")
        args += ["--tmpfs", "/run/secrets:rw,nosuid,nodev,noexec,size=1m,mode=0755"]
        for name in sorted(spec.secrets):
            args += [
                "--secret",
                f"{secret_name(spec.name, name)},type=mount,target={name},uid={uid},gid={gid},mode=0400",
            ]
    if env_file is not None:
        args += ["--env-file", str(env_file)]
    else:
        for k, v in sorted(spec.env.items()):
            args += ["--env", f"{k}={v}"]
    if spec.entrypoint is not None:
        args += ["--entrypoint", json.dumps(list(spec.entrypoint))]
    if spec.workdir:
        args += ["--workdir", spec.workdir]
    return [*args, spec.image, *spec.command]


def usage_from_inspect(info: Mapping[str, Any]) -> Usage:
    """Image and run times from one ``inspect --format json`` entry (podman or docker)."""
    state = info.get("State") or {}
    image = info.get("ImageDigest") or info.get("Image") or None
    return Usage(
        image_id=str(image) if image else None,
        started=parse_engine_time(state.get("StartedAt")),
        ended=parse_engine_time(state.get("FinishedAt")),
        # podman and docker inspect's State.OOMKilled; false is no evidence either way (runc
        # on cgroup v1 leaves it false for a container the OOM killer ended: nextattempt.py)
        oom_killed=True if state.get("OOMKilled") else None,
    )


_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def parse_engine_time(value: object) -> float | None:
    """RFC 3339 with nanoseconds (``2026-11-25T01:50:00.123456789Z``) as epoch seconds;
    None for the zero time an engine writes for "never" (year 1)."""
    if not isinstance(value, str) or not value:
        return None
    text = _FRACTION.sub(r"\1", value.strip().replace("Z", "+00:00"), count=1)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return None if t.year < 1970 or t.tzinfo is None else t.timestamp()


def cri_lines(text: str, stream: str) -> str:
    """``docker logs --timestamps`` output as CRI (k8s-file) records."""
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        out.append(f"{stamp} {stream} F {rest}\n")
    return "".join(out)
