"""A real ``hetflow tes serve`` in a process of its own, for the TES tests and the bench:
started, waited for until it answers, killed with SIGKILL (its whole session: HAProxy and
uvicorn's thread with it) or stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import tes
from demo.images import build_tiny_image

from tests.integration.hfkit import free_port
from tests.leftovers import recorded_runs

ENDED = {"COMPLETE", "EXECUTOR_ERROR", "SYSTEM_ERROR", "CANCELED", "PREEMPTED"}


def until(check: Callable[[], bool], what: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)


class Server:
    def __init__(
        self,
        home: Path,
        data: Path,
        *,
        config: Path | None = None,
        env: Mapping[str, str] | None = None,
        backend: str | None = None,
    ) -> None:
        self.home, self.data, self.config, self.backend = home, data, config, backend
        self.env = {**os.environ, **(env or {}), "HETFLOW_HOME": str(home)}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def hetflow(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``hetflow ARGS`` against this server's home."""
        argv = [sys.executable, "-m", "hetflow.cli.main", *args]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        argv = [sys.executable, "-m", "hetflow.cli.main", "tes", "serve", "--listen", f"127.0.0.1:{self.port}"]
        argv += ["--file-root", str(self.data)]
        if self.config is not None:
            argv += ["--config", str(self.config)]
        if self.backend is not None:
            argv += ["--backend", self.backend]
        # its own session: a SIGKILL of the group takes HAProxy and uvicorn's thread with it
        self.proc = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        until(self._up, "the server answers")

    def _up(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "the server exited"
        try:
            return httpx.get(f"{self.url}/ga4gh/tes/v1/service-info", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """Stop the server, then remove what its tasks' runs left (theirs only: other tests'
        containers run beside them)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        remove_runs(self.home, self.env)


def remove_runs(home: Path, env: Mapping[str, str]) -> None:
    """Remove the containers of the runs recorded under ``home`` (a stopped server's tasks
    still running, or ended before the server could remove them), and no one else's."""
    runs = recorded_runs(home)
    fmt = '{{.Names}} {{index .Labels "hetflow.run"}}'  # label filters AND in podman: list, then pick
    argv = ["podman", "ps", "-a", "--filter", "label=hetflow.run", "--format", fmt]
    listed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300).stdout.split("\n")
    theirs = [w[0] for w in (line.split() for line in listed) if len(w) == 2 and w[1] in runs]
    if theirs:
        subprocess.run(["podman", "rm", "-f", "--ignore", *theirs], env=env, capture_output=True, timeout=300)


@contextmanager
def serving(
    tmp_path: Path,
    *,
    config: str | None = None,
    env: Mapping[str, str] | None = None,
    backend: str | None = None,
    data: Path | None = None,
) -> Iterator[Server]:
    """A started server whose tasks' "alpine" is the local busybox stand-in, its file root
    ``data`` (``tmp_path/data`` by default), ``config`` (tes.yaml's text) when given; stopped,
    and its runs' containers removed, when the block ends."""
    build_tiny_image("localhost/alpine:latest")
    data = data if data is not None else tmp_path / "data"
    data.mkdir(exist_ok=True)
    path = None
    if config is not None:
        path = tmp_path / "tes.yaml"
        path.write_text(config)
    server = Server(tmp_path / "home", data, config=path, env=env, backend=backend)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_end(client: tes.HTTPClient, task_id: str) -> tes.Task:
    """The task, in the FULL view, once it has ended."""
    until(lambda: client.get_task(task_id, view="MINIMAL").state in ENDED, f"task {task_id} ends")
    return client.get_task(task_id, view="FULL")
