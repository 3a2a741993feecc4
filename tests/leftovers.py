"""The test session leaves nothing running (issue 37): at its end, each pytest process (the
whole session, or each xdist worker) checks what it started itself and fails, naming it, when
anything is left: a process (a detached executor, a ``podman run``, slurmd, slurmctld, an
orphan slurmstepd, Ray's, etcd, the Kubernetes control plane...), a hetflow container, or a
container monitor (conmon and the ``runc init`` or step under it).

What the session started is told apart from what a developer runs beside it (``make demo``'s
dashboard, another session's tests) by a mark, not by a name: ``pytest_configure`` puts a token
of its own in ``HFTEST_SESSION`` (not ``HETFLOW_``: the ``hf`` fixture drops those), which every
process started from then on inherits, daemons and their children included.  podman gives
conmon an environment of its own, so monitors and containers are the session's when they
belong to a run recorded in a store under the session's basetemp (by the ``hetflow.run``
label, the container's name ``hf-RUN-...``, or a log under the basetemp).  slurmd clears the
environment of the slurmstepd it starts, so a process whose working folder is the session's
is the session's too: under the basetemp, or a cluster's folder under /tmp made by
``session_folder`` (its name carries the token: slurmstepd works in its cluster's log folder).

Things end a moment after a test has ended them (a container's monitor after its removal,
Ray's workers after ``shutdown``): the check waits for that, ``HFTEST_SETTLE`` seconds at
most (60), returning as soon as nothing is left.  What it names is then ended, so a leak
does not pile up run after run; ``HFTEST_KEEP_LEFTOVERS=1`` keeps it to look at.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hetflow.execute.backends.local.orphans import Monitor, monitors, reap

TOKEN = "HFTEST_SESSION"
STORE_DEPTH = 4  # basetemp/<test>/home/state.db, and a level more for fixtures' folders


@dataclass(frozen=True)
class Left:
    """What the session left running: processes (PID -> command line), containers (name ->
    state), container monitors."""

    processes: dict[int, str] = field(default_factory=dict)
    containers: dict[str, str] = field(default_factory=dict)
    monitors: tuple[Monitor, ...] = ()
    where: dict[str, str] = field(default_factory=dict)  # run id -> the test folder whose store holds it

    def __bool__(self) -> bool:
        return bool(self.processes or self.containers or self.monitors)

    def lines(self) -> list[str]:
        out = [f"process {pid}: {args}" for pid, args in sorted(self.processes.items())]
        out += [f"container {name} ({state}){self._of(name)}" for name, state in sorted(self.containers.items())]
        for m in self.monitors:
            below = "; ".join(f"{pid}: {_cmdline(pid)}" for pid in m.below)
            said = f"conmon {m.pid} of {m.name}{self._of(m.name)}"
            out.append(f"{said}, with {len(m.below)} process(es) under it: {below}")
        return out

    def _of(self, name: str) -> str:
        """Which test recorded the run of container ``name`` (its folder under the basetemp)."""
        folder = self.where.get(_run_of(name))
        return f" (run recorded by {folder})" if folder else ""


def pytest_configure(config: pytest.Config) -> None:
    os.environ[TOKEN] = secrets.token_hex(8)  # this process's own: an xdist worker replaces its controller's


@pytest.fixture(scope="session", autouse=True)
def nothing_left_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Set up first and so torn down last, after every module's clusters and servers."""
    token = os.environ[TOKEN]
    yield
    base = tmp_path_factory.getbasetemp()
    deadline = time.monotonic() + float(os.environ.get("HFTEST_SETTLE", "60"))
    left = leftovers(token, base)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = leftovers(token, base)
    if not left:
        return
    keep = os.environ.get("HFTEST_KEEP_LEFTOVERS") == "1"
    if not keep:
        end(left)
    said = "\n  ".join(left.lines())
    pytest.fail(
        f"the test session left these running (a test must leave nothing behind):\n  {said}\n"
        + (
            "kept (HFTEST_KEEP_LEFTOVERS=1)"
            if keep
            else "they were ended once named; HFTEST_KEEP_LEFTOVERS=1 keeps them"
        ),
        pytrace=False,
    )


def session_folder(prefix: str) -> Path:
    """A new folder under /tmp (short: daemons' sockets live under it) whose name says it is
    this session's: what works in it is counted as the session's (``marked``)."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{_mark(os.environ.get(TOKEN, ''))}", dir="/tmp"))


def leftovers(token: str, base: Path) -> Left:
    """What is running now that this session started: processes carrying ``token`` or working
    in its folders, and the containers and monitors of the runs recorded under ``base``."""
    runs = recorded_runs(base)
    watched = tuple(m for m in monitors() if _run_of(m.name) in runs or _under(m.log, base))
    theirs = {pid for m in watched for pid in (m.pid, *m.below)}
    processes = {pid: args for pid, args in marked(token, base).items() if pid not in theirs}
    return Left(processes, _containers(set(runs)), watched, runs)


def marked(token: str, base: Path | None = None, proc: Path = Path("/proc")) -> dict[int, str]:
    """PID -> command line of every live process (not a zombie) but this one whose environment
    holds ``HFTEST_SESSION=token``, or whose working folder is under ``base`` or a
    ``session_folder``."""
    mark = f"{TOKEN}={token}".encode()
    found: dict[int, str] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0") and not _ours(entry, token, base):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue  # gone meanwhile
        found[int(entry.name)] = args[:200]
    return found


def _ours(entry: Path, token: str, base: Path | None) -> bool:
    """Its working folder (removed since, or not) is under ``base`` or a ``session_folder``."""
    cwd = Path(os.readlink(entry / "cwd").removesuffix(" (deleted)"))
    top = cwd.parts[2] if len(cwd.parts) > 2 and cwd.parts[1] == "tmp" else ""
    return (base is not None and cwd.is_relative_to(base)) or _mark(token) in top


def _mark(token: str) -> str:
    return f"-{token[:6]}-"


def recorded_runs(base: Path) -> dict[str, str]:
    """The ids of the runs recorded in the stores (``state.db``) under ``base``, each with the
    folder (relative to ``base``: the test's) of the store that holds it."""
    runs: dict[str, str] = {}
    for root, dirs, files in os.walk(base):
        depth = len(Path(root).relative_to(base).parts)
        dirs[:] = [d for d in dirs if depth < STORE_DEPTH and d not in ("runs", "cache", "logs")]
        if "state.db" in files:
            with contextlib.suppress(sqlite3.Error):  # a test's damaged store
                db = sqlite3.connect(f"file:{Path(root) / 'state.db'}?mode=ro", uri=True, timeout=5)
                try:
                    folder = str(Path(root).relative_to(base))
                    runs |= {str(r[0]): folder for r in db.execute("SELECT id FROM runs")}
                finally:
                    db.close()
    return runs


def _containers(runs: set[str]) -> dict[str, str]:
    """Name -> state of the containers of ``runs`` (their ``hetflow.run`` label or name)."""
    if not runs:
        return {}
    from hetflow.config import engine_env

    try:
        proc = subprocess.run(
            ["podman", "ps", "-a", "--format", "json"], capture_output=True, text=True, env=engine_env(), timeout=120
        )
        listed = json.loads(proc.stdout or "[]") or []
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}  # no podman here: a unit session
    found = {}
    for c in listed:
        names = c.get("Names") or [""]
        name = str(names[0] if isinstance(names, list) else names)
        labels = c.get("Labels") or {}
        if (labels.get("hetflow.run") if isinstance(labels, dict) else None) in runs or _run_of(name) in runs:
            found[name] = str(c.get("State", "")).lower()
    return found


def end(left: Left) -> None:
    """End what was named: the processes, the monitors (and what runs under them), the containers."""
    for pid in left.processes:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for m in left.monitors:
        reap(m)
    if left.containers:
        from hetflow.config import engine_env

        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                ["podman", "rm", "-f", "--ignore", *left.containers], capture_output=True, env=engine_env(), timeout=300
            )


def _run_of(name: str) -> str:
    """``hf-RUN-STEP-ATTEMPT`` -> RUN; "" for another name."""
    return name.split("-", 2)[1] if name.startswith("hf-") and name.count("-") >= 2 else ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "(gone)"


def _under(path: str, base: Path) -> bool:
    return bool(path) and Path(path).is_relative_to(base)
