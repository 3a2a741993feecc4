"""Helpers for the integration tests: real podman containers, real device nodes (fake GPUs made with
mknod: these tests prove isolation, not GPU computation), the real CLI in subprocesses."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.integration.forkcall import Servers

BUSYBOX = "localhost/hetflow-test/busybox:latest"
HOSTILE = "localhost/hetflow-test/hostile:latest"
# The commands' fork servers (tests.integration.forkserver): HFTEST_FORKSERVER=0 runs each command
# as a real subprocess; the integration conftest ends them with the session.
SERVERS = Servers()


def podman(*args: str) -> list[str]:
    """``podman ARGS`` with hetflow's containers.conf; its output, split into words."""
    from hetflow.config import engine_env

    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, env=engine_env(), check=True
    ).stdout.split()


def run_containers(run_id: str, *, running: bool = False) -> list[str]:
    """The names of the run's containers (only those running, with ``running``), sorted."""
    return sorted(
        podman("ps", *([] if running else ["-a"]), "--filter", f"label=hetflow.run={run_id}", "--format", "{{.Names}}")
    )


@dataclass
class Hetflow:
    """The real `hetflow` command against a private HETFLOW_HOME."""

    home: Path
    env: dict[str, str]

    def __call__(
        self, *args: str, check: bool = True, extra_env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **(extra_env or {})}
        proc = SERVERS.run(list(args), env, timeout) or subprocess.run(
            [sys.executable, "-m", "hetflow.cli.main", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"hetflow {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def popen(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "hetflow.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**self.env, **(extra_env or {})},
        )

    def show(self, run_id: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self("show", run_id, "--json").stdout)
        return data

    def step_states(self, run_id: str) -> dict[str, str]:
        """Each step's state, as ``hetflow show --json`` gives it."""
        return {s["step"]: s["state"] for s in self.show(run_id)["steps"]}

    def last_run(self) -> str:
        runs = json.loads(self("ps", "--all", "--json").stdout)
        return str(runs[0]["id"])

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError("condition not met in time")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses now (for a server a test starts), below the
    kernel's ephemeral range: a port the kernel handed out for binding to 0 is one it hands to
    outgoing connections too, and with a thousand of those open (the slow-client tests) one
    took an sshd's port between this pick and the sshd's bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(1000):
        port = random.randrange(10000, max(10001, low))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between 10000 and {low}")


def write(tmp_path: Path, text: str, name: str = "wf.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# A run's folder never moves: asked of `hetflow show` once per run (test_chaos looked up 30 steps'
# outputs with 30 `hetflow show` commands of one run).
_WORKDIRS: dict[tuple[Path, str], Path] = {}


def step_out(hf: Hetflow, run_id: str, step: str) -> Path:
    if (workdir := _WORKDIRS.get((hf.home, run_id))) is None:
        workdir = _WORKDIRS[hf.home, run_id] = Path(hf.show(run_id)["workdir"])
    return workdir / "steps" / step / "out"


def counter_workflow(
    ticks: int, checkpoint: str, *, cpus: float = 0.5, memory: str = "64Mi", hold: bool = False
) -> str:
    """The checkpoint tests' workload: one step ``count`` that counts to ``ticks``, a tick every
    0.5 s, each printed (``tick N``) and written to /out/n, with ``checkpoint: CHECKPOINT``;
    ``hold``: after its last tick it runs on until /out/go exists (``release``), so a test that
    moves it finds it running however loaded the machine."""
    loop = f"i=0; while [ $i -lt {ticks} ]; do i=$((i+1)); echo tick $i; echo $i > /out/n; sleep 0.5; done"
    if hold:
        loop += "; until [ -e /out/go ]; do sleep 0.1; done"
    return f"""apiVersion: hetflow/v1
name: counter
steps:
  count:
    image: {BUSYBOX}
    command: [sh, -c, "{loop}"]
    outputs: [n]
    resources: {{cpus: {cpus:g}, memory: {memory}}}
    checkpoint: {checkpoint}
"""


def release(container: str) -> None:
    """Let a held counter (``counter_workflow(hold=True)``) running as ``container`` end: /out/go
    in the folder its /out is mounted from."""
    source = podman(
        "container",
        "inspect",
        "--format",
        '{{range .Mounts}}{{if eq .Destination "/out"}}{{.Source}}{{end}}{{end}}',
        container,
    )
    assert source, f"{container} has no /out mount"
    (Path(source[0]) / "go").touch()


def remove_lost(*names: str, timeout: float = 90) -> None:
    """Remove the containers ``names`` of attempts lost with their node, once nothing can still
    create them: the lost attempt's ``podman run`` (or its Slurm job script) outlives its worker
    on this one machine and, on a loaded one, may create its container after a first
    ``podman rm``, leaving it running past the test (CI saw it). Waits until no process names
    one of them and no such container exists."""
    from hetflow.config import engine_env

    said = [re.compile(rf"(^|[/=]){re.escape(n)}($|[./])") for n in names]
    deadline = time.monotonic() + timeout
    while True:
        subprocess.run(["podman", "rm", "-f", "--ignore", *names], env=engine_env(), capture_output=True)
        busy = [
            " ".join(argv)[:160] for _, argv in processes().values() if any(p.search(w) for w in argv for p in said)
        ]
        there = podman("ps", "-a", "--format", "{{.Names}}")
        if not busy and not set(names) & set(there):
            return
        assert time.monotonic() < deadline, f"the lost attempts {names} are still there: {busy}"
        time.sleep(0.5)


def processes() -> dict[int, tuple[int, list[str]]]:
    """Every process now: PID -> (its parent's PID, its command line)."""
    from hetflow.execute.backends.local.orphans import processes as read

    return read()


def monitor_trees(prefix: str) -> list[str]:
    """The conmon processes of containers whose names start with ``prefix`` and what runs
    under them (``runc init``...), as 'PID ARGS' lines: empty once nothing of them is left."""
    procs = processes()
    tops = [
        pid
        for pid, (_, argv) in procs.items()
        if argv and Path(argv[0]).name == "conmon" and any(n.startswith(prefix) for n in _after(argv, "-n"))
    ]
    found, todo = [], list(tops)
    while todo:
        pid = todo.pop()
        found.append(f"{pid} {' '.join(procs[pid][1])[:120]}")
        todo += [p for p, (ppid, _) in procs.items() if ppid == pid]
    return sorted(found)


def _after(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
