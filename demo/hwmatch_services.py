"""The servers the hwmatch demo starts on loopback: Debian's docker-registry, and the
readiness and stopping of any server process it starts (the proxy too)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx


class DemoError(Exception):
    """A step of the demo failed; the message says which and what to do."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class Service:
    """A server process started by the demo: ``url`` is http://HOST:PORT."""

    name: str
    host: str
    process: subprocess.Popen[bytes] = field(repr=False)
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def wait_ready(service: Service, ok: Sequence[int], timeout: float) -> bool:
    """Poll ``/v2/`` until it answers one of ``ok``; False when the process exits or
    the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and service.process.poll() is None:
        try:
            if httpx.get(f"{service.url}/v2/", timeout=1).status_code in ok:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return False


def _registry_config(root: Path, port: int) -> str:
    return (
        "version: 0.1\n"
        "log:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )


def start_registry(root: Path, port: int = 0, timeout: float = 20) -> Service:
    """``docker-registry serve CONFIG`` on 127.0.0.1:PORT (a free port when 0), with
    its storage under ``root``; returns once ``/v2/`` answers."""
    if shutil.which("docker-registry") is None:
        raise DemoError("Debian's docker-registry is not installed: `apt-get install -y docker-registry`")
    if port and port_taken(port):
        raise DemoError(f"127.0.0.1:{port} is taken; pick another --registry-port, or 0 for a free one")
    root.mkdir(parents=True, exist_ok=True)
    last = ""
    for _attempt in range(1 if port else 3):  # a free port may be taken before the registry binds it
        chosen = port or free_port()
        config = root / "config.yml"
        config.write_text(_registry_config(root, chosen))
        log = root / "registry.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["docker-registry", "serve", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        service = Service("registry", f"127.0.0.1:{chosen}", process, log)
        if wait_ready(service, (200,), timeout):
            return service
        service.stop()
        last = service.log_tail()
    raise DemoError(f"docker-registry did not start on loopback; its log ends:\n{last}")
