"""The HTTP front (hetflow.front: HAProxy before the app on a private Unix socket) as the
services use it: ``hetflow registry serve`` started and stopped whole (a SIGKILL of hetflow
takes HAProxy with it), a taken port refused clearly, the app told the client's own address
and port (never what a client claims), and the front's refusals worded as the service's."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hetflow.front import Answers, FrontLimits, Served
from hetflow.registry import FakeRegistry, Limits, MachineTypeDecl, Settings, start_in_thread
from tests.integration.hfkit import free_port

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def _serve(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "hetflow.cli.main", "registry", "serve", "--upstream", "http://127.0.0.1:9"]
    argv += ["--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state")]
    env = {**os.environ, "HETFLOW_HOME": str(tmp_path / "home")}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 401
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_registry_serve_runs_behind_the_front_and_takes_it_along_when_it_ends(tmp_path: Path, how: int) -> None:
    port = free_port()
    proc = _serve(tmp_path, port)
    try:
        _until(lambda: _answers(f"http://127.0.0.1:{port}/v2/") or proc.poll() is not None, 60, "the proxy answering")
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        answer = httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=10)
        assert answer.headers["docker-distribution-api-version"] == "registry/2.0"
        fronts = [pid for pid in _children(proc.pid) if "haproxy" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert len(fronts) == 1, _children(proc.pid)
        os.kill(proc.pid, how)
        proc.wait(timeout=30)
        _until(lambda: not _alive(fronts[0]), 20, "haproxy ending with hetflow registry serve")
        if how == signal.SIGTERM:
            assert proc.returncode == 0, proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_taken_port_is_a_clear_error_and_nothing_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(tmp_path, port)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in out and "Traceback" not in out, out


@pytest.fixture
def echo(tmp_path: Path) -> Iterator[Served]:
    """A tiny app behind the front that answers with the scope's client, server and headers."""

    async def show(request: Request) -> JSONResponse:
        scope = request.scope
        return JSONResponse(
            {"client": list(scope["client"]), "server": list(scope["server"]), "headers": dict(request.headers)}
        )

    app = Starlette(routes=[Route("/", show)])
    listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listen.bind(("127.0.0.1", 0))
    listen.listen(128)
    served = Served(app, listen, limits=FrontLimits(), answers=Answers(), workdir=tmp_path)
    try:
        yield served
    finally:
        served.stop()


def test_the_app_sees_the_clients_own_address_and_port_never_a_claimed_one(echo: Served) -> None:
    with socket.socket() as client:
        client.bind(("127.0.0.2", 0))
        client.connect(("127.0.0.1", echo.port))
        client.sendall(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"X-Hetflow-Client: 6.6.6.6 1\r\nX-Hetflow-Server: 6.6.6.6 2\r\n\r\n"
        )
        raw = b""
        while chunk := client.recv(65536):
            raw += chunk
        mine = client.getsockname()
    seen = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    assert seen["client"] == ["127.0.0.2", mine[1]]
    assert seen["server"] == ["127.0.0.1", echo.port]
    assert not {"x-hetflow-client", "x-hetflow-server"} & set(seen["headers"])


def test_the_fronts_refusal_of_one_address_is_the_proxys_oci_error(tmp_path: Path) -> None:
    settings = Settings(
        upstream="http://upstream.test",
        state_dir=tmp_path / "state",
        machine_types=(MachineTypeDecl(profile="x86-64-v2"),),
        limits=Limits(max_requests_per_client=1),
    )
    proxy = start_in_thread(settings, transport=FakeRegistry().transport())
    try:
        with socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]))) as held:
            held.sendall(b"POST /token HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")  # its body never comes
            _until(lambda: httpx.get(f"{proxy.url}/v2/", timeout=5).status_code == 429, 30, "a second request refused")
            answer = httpx.get(f"{proxy.url}/v2/", timeout=5)
            assert answer.headers["docker-distribution-api-version"] == "registry/2.0"
            assert answer.headers["retry-after"] == "2"
            error = answer.json()["errors"][0]
            assert error["code"] == "TOOMANYREQUESTS" and "limits.max_requests_per_client" in error["message"]
        _until(lambda: httpx.get(f"{proxy.url}/v2/", timeout=5).status_code == 401, 30, "served again once it left")
    finally:
        proxy.stop()
