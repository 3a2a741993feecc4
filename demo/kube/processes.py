"""The local Kubernetes test cluster's processes (demo/kube/cluster.py): its binaries (built by
tools/kube/build), each component started in its own session with its log and pid file, and
the waits for their health that name the log of the one that failed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from hetflow.errors import EngineError

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "kube" / "build"
PROGRAMS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def kube_bin(*, kubelet: bool = False) -> Path:
    """The folder of the control plane's binaries; built first (tools/kube/build, once and
    cached) where its stamp is missing (``kubelet``: the kubelet too, demo/kube/kubelet.py)."""
    out = subprocess.run([str(BUILD), "--print-dir"], capture_output=True, text=True, check=False)
    folder = Path(out.stdout.strip())
    if out.returncode != 0 or not folder.name:
        raise EngineError(f"{BUILD} --print-dir failed: {out.stderr.strip()}")
    stamps = [".built-*-kwok-*"] + [".built-kubelet-*"] * kubelet
    programs = PROGRAMS + ("kubelet",) * kubelet
    if not all(any(folder.glob(s)) for s in stamps) or not all((folder / p).exists() for p in programs):
        print(f"building the Kubernetes test control plane ({BUILD}; ~15 min the first time)", file=sys.stderr)
        env = {**os.environ, "KUBE_KUBELET": "1"} if kubelet else None
        if subprocess.run([str(BUILD)], env=env, check=False).returncode != 0:
            raise EngineError(f"{BUILD} failed; its log: {folder.parent / 'build.log'}")
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(base: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    """``name`` in its own session (it outlives a demo's Python), output to BASE/log/NAME.log.
    HOME is BASE/kwok: kwok would read a user's ~/.kwok/kwok.yaml (kwokctl's) before ours."""
    env = {**os.environ, "HOME": str(base / "kwok")}
    with (base / "log" / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=base,
            env=env,
        )
    (base / "run" / f"{name}.pid").write_text(str(proc.pid))
    return proc


def running_pid(path: Path, program: str) -> int | None:
    """The pid in a pid file, if that process is alive (not a zombie) and is ``program``."""
    try:
        pid = int(path.read_text().split()[0])
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return pid if Path(cmd.decode(errors="replace")).name == program and state != "Z" else None


def _tail(path: Path, n: int = 8) -> str:
    try:
        return "\n  ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return "(no log)"


def wait_for(
    what: str,
    ready: Callable[[], bool],
    procs: Mapping[str, subprocess.Popen[bytes]],
    base: Path,
    component: str,
    timeout: float,
) -> None:
    """Poll ``ready`` until it holds; fail at once if a process in ``procs`` exits, or after
    ``timeout`` s, with the tail of the log of the component that failed (or was awaited)."""
    deadline = time.monotonic() + timeout
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise EngineError(
                    f"{name} exited ({proc.returncode}) while waiting for {what}; "
                    f"{base / 'log' / name}.log:\n  {_tail(base / 'log' / f'{name}.log')}"
                )
        try:
            if ready():
                return
        except (httpx.HTTPError, OSError, EngineError):
            pass
        if time.monotonic() > deadline:
            log = base / "log" / f"{component}.log"
            raise EngineError(f"{what}: not ready after {timeout:.0f} s; {log}:\n  {_tail(log)}")
        time.sleep(0.2)


def healthy(url: str) -> Callable[[], bool]:
    """A component's own health endpoint answers ok (self-signed serving certificates)."""
    return lambda: httpx.get(url, verify=False, timeout=5).text.strip() in ("ok", '{"health":"true","reason":""}')
