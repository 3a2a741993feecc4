"""Where hetflow keeps its things, and how it talks to the container engine.

Everything here reads the environment once per call, so tests can point
``HETFLOW_HOME`` at a temporary directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from hetflow.errors import EngineError, UsageError

SHARE = Path(__file__).parent / "share"


def hetflow_home(env: Mapping[str, str] | None = None) -> Path:
    """The state directory: ``$HETFLOW_HOME``, else ``$XDG_DATA_HOME/hetflow``,
    else ``~/.local/share/hetflow`` (the XDG base-directory default)."""
    env = os.environ if env is None else env
    if env.get("HETFLOW_HOME"):
        return Path(env["HETFLOW_HOME"]).expanduser()
    data = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "hetflow"


def containers_conf(env: Mapping[str, str] | None = None) -> Path:
    """hetflow's own containers.conf (``HETFLOW_CONTAINERS_CONF`` overrides it)."""
    env = os.environ if env is None else env
    return Path(env.get("HETFLOW_CONTAINERS_CONF") or SHARE / "containers.conf")


DRIVEN_ENGINES = ("podman", "docker")
# Container runtimes a user may name that take neither podman's nor docker's command line
# (apptainer/singularity run SIF images; nerdctl is close to docker but not what hetflow tests):
# named, they are refused with what hetflow drives, rather than started with podman's arguments.
UNDRIVEN_ENGINES = frozenset(
    {"apptainer", "singularity", "nerdctl", "ctr", "crictl", "containerd", "enroot", "ch-run", "sarus", "shifter"}
    | {"runc", "crun", "lxc", "lxd", "udocker", "buildah", "charliecloud"}
)


def find_engine(env: Mapping[str, str] | None = None) -> str:
    """The container engine binary: ``$HETFLOW_ENGINE``, else podman, else docker.

    ``HETFLOW_ENGINE`` may name podman, docker, a path to either, or a wrapper command that
    takes their arguments (bench/local/overhead.py's recorder); a runtime hetflow does not drive
    (``UNDRIVEN_ENGINES``: apptainer, ...) is refused naming the variable."""
    env = os.environ if env is None else env
    wanted = env.get("HETFLOW_ENGINE")
    if wanted and Path(wanted).name in UNDRIVEN_ENGINES:
        raise EngineError(
            f"HETFLOW_ENGINE={wanted}: hetflow drives {' and '.join(DRIVEN_ENGINES)} only; "
            f"{Path(wanted).name} is not supported. Unset HETFLOW_ENGINE to use podman "
            "(apt-get install -y podman runc), or set HETFLOW_ENGINE=docker"
        )
    for name in [wanted] if wanted else DRIVEN_ENGINES:
        path = shutil.which(name, path=env.get("PATH"))
        if path:
            return path
    if wanted:
        raise EngineError(
            f"HETFLOW_ENGINE={wanted} is not on PATH; it names the container engine: "
            f"{' or '.join(DRIVEN_ENGINES)} (a path to either, or a command taking their arguments), "
            "or unset it to use whichever of them is installed"
        )
    raise EngineError(
        f"no container engine found (looked for {', '.join(DRIVEN_ENGINES)} on PATH); "
        "install podman: apt-get install -y podman runc"
    )


def engine_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for engine commands: the caller's, with ``CONTAINERS_CONF``
    pointing at hetflow's own file so a user's settings are not fought over."""
    base = dict(os.environ if env is None else env)
    base["CONTAINERS_CONF"] = str(containers_conf(base))
    return base


def submitter(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """The UID:GID containers run as: the caller's, or under sudo the invoking user's
    (SUDO_UID/SUDO_GID), so files on a shared work directory belong to the person who
    submitted, as Slurm does for its jobs."""
    env = os.environ if env is None else env
    if os.getuid() == 0 and env.get("SUDO_UID", "").isdigit():
        uid = int(env["SUDO_UID"])
        gid = int(env["SUDO_GID"]) if env.get("SUDO_GID", "").isdigit() else uid
        return uid, gid
    return os.getuid(), os.getgid()


# Numbers hetflow reads from the environment, and what each must be (see docs/reference/config.md).
_NUMERIC_ENV = {
    "HETFLOW_POLL_INTERVAL": (0.001, 3600.0),
    "HETFLOW_RETRY_BACKOFF": (0.0, 3600.0),
    "HETFLOW_GROW_EVERY": (0.0, 86400.0),  # an elastic gang's least time between growths
}


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Refuse, before any command starts, environment variables hetflow cannot use: a
    HETFLOW_HOME that is a file or cannot be written, a number that is not one.  Each is a
    UsageError (exit 2) that names the variable and what to change."""
    env = os.environ if env is None else env
    for name, (low, high) in _NUMERIC_ENV.items():
        raw = env.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:
            raise UsageError(f"{name}={raw!r}: give a number of seconds from {low:g} to {high:g}, or unset it")
    home = hetflow_home(env)
    source = "HETFLOW_HOME" if env.get("HETFLOW_HOME") else "the state directory"
    existing = home
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is" if existing == home else f"would be under {existing}, which is"
        raise UsageError(f"{source} {home} {where} a file, not a directory; point HETFLOW_HOME at a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(
            f"{source} {home} cannot be written (no permission on {existing}); point HETFLOW_HOME elsewhere"
        )
