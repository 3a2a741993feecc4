"""The proxy under abuse on loopback (issue 23): stalled readers, many idle clients, one
client hogging connections, huge bodies, a full disk.  Each test asserts that other
clients keep being served (each request within a generous 10 s) and that the proxy's
memory (RSS of its own process, ``hetflow.registry.fakes.fakeproxy``) stays under a bound.
Everything runs on 127.0.0.x, bounded in count, and stops by itself."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hetflow.registry import FakeRegistry, MachineTypeDecl, Settings, start_in_thread

MIB = 1024 * 1024
SERVED_WITHIN_S = 10.0  # generous: before issue 23 these requests timed out at 20 s


@dataclass
class Proxy:
    info: dict[str, Any]
    proc: subprocess.Popen[str]

    @property
    def url(self) -> str:
        return str(self.info["url"])

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def bearer(self) -> dict[str, str]:
        got = httpx.get(f"{self.url}/token", auth=(self.info["machine_type"], self.info["token"]), timeout=30)
        return {"Authorization": f"Bearer {got.json()['token']}"}

    def blob_path(self, name: str) -> str:
        return f"/v2/{self.info['repo']}/blobs/{self.info['blobs'][name]}"


@contextmanager
def fake_proxy(tmp_path: Path, *args: str) -> Iterator[Proxy]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetflow.registry.fakes.fakeproxy", str(tmp_path / "state"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the proxy process did not start"
        yield Proxy(json.loads(line), proc)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stalled(proxy: Proxy, path: str, headers: dict[str, str], n: int, source: str = "127.0.0.2") -> list[socket.socket]:
    """``n`` connections from ``source`` that ask for ``path`` and never read."""
    host, port = proxy.url.removeprefix("http://").split(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n"
    request += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((source, 0))
        s.connect((host, int(port)))
        s.sendall(request.encode())
        socks.append(s)
    return socks


def served_meanwhile(proxy: Proxy, headers: dict[str, str], n: int = 20) -> list[float]:
    """``n`` GETs of the small cached blob from 127.0.0.1: each must finish in time."""
    times = []
    with httpx.Client(base_url=proxy.url, timeout=SERVED_WITHIN_S) as client:
        for _ in range(n):
            start = time.monotonic()
            got = client.get(proxy.blob_path("small"), headers=headers)
            assert got.status_code == 200, got.text
            times.append(time.monotonic() - start)
    return times


def _wait_rss_settles(proxy: Proxy, timeout: float = 10.0) -> int:
    deadline, last = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        now = proxy.rss()
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    return last


@pytest.mark.parametrize(
    ("blob_mib", "clients", "rss_bound_mib"),
    [(30, 40, 120), (7.5, 100, 200)],
    ids=["40-stalled-readers-of-30MiB", "100-idle-clients-of-7.5MiB"],
)
def test_stalled_readers_do_not_starve_others_or_eat_memory(
    tmp_path: Path, blob_mib: float, clients: int, rss_bound_mib: int
) -> None:
    # Before issue 23: 40 such readers held the 32 blob threads (a 1 KB blob then timed
    # out after 20 s); 150 idle clients of a 7.5 MiB blob took the proxy to 1 GB.
    with fake_proxy(tmp_path, f"--blob=big={int(blob_mib * MIB)}", "--blob=small=1024", "--per-client=1000") as p:
        headers = p.bearer()
        before = p.rss()
        socks = stalled(p, p.blob_path("big"), headers, clients)
        try:
            served_meanwhile(p, headers)
            grown = _wait_rss_settles(p) - before
            assert grown < rss_bound_mib * MIB, f"RSS grew {grown / MIB:.0f} MiB"
        finally:
            for s in socks:
                s.close()


def test_one_client_cannot_hold_every_connection(tmp_path: Path) -> None:
    with fake_proxy(tmp_path, f"--blob=big={30 * MIB}", "--blob=small=1024", "--per-client=16") as p:
        headers = p.bearer()
        socks = stalled(p, p.blob_path("big"), headers, 16)
        try:
            extra = stalled(p, p.blob_path("small"), headers, 1)[0]
            extra.settimeout(SERVED_WITHIN_S)
            assert extra.recv(64).startswith(b"HTTP/1.1 429")
            extra.close()
            served_meanwhile(p, headers, n=5)  # from another address: served
        finally:
            for s in socks:
                s.close()


@pytest.mark.parametrize("path", ["/token", "/hetflow/v1/machine-types"], ids=["token", "registration"])
def test_a_huge_unauthenticated_body_is_refused_without_reading_it(tmp_path: Path, path: str) -> None:
    # Before issue 23: one 1.2 GiB POST /token took the proxy from 59 MB to 2.5 GB.
    with fake_proxy(tmp_path, "--blob=small=1024") as p:
        headers = p.bearer()
        before = p.rss()
        host, port = p.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=SERVED_WITHIN_S) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
            chunk = b"%x\r\n" % MIB + b"a" * MIB + b"\r\n"
            sent = 0
            try:
                while sent < 256 * MIB:  # bounded: the proxy answers long before
                    s.sendall(chunk)
                    sent += MIB
            except OSError:
                pass  # the proxy closed the connection: what we want
            answer = s.recv(64)
        assert answer.startswith(b"HTTP/1.1 413"), answer
        served_meanwhile(p, headers, n=5)
        assert p.rss() - before < 32 * MIB


@contextmanager
def small_tmpfs(where: Path, size: str = "8m") -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root")
def test_a_full_disk_is_a_507_leaves_nothing_and_others_are_served(tmp_path: Path) -> None:
    fake = FakeRegistry()
    fake.push_builds("lab/app", "v1", {"generic": []})
    big = fake.add_blob(os.urandom(12 * MIB))  # more than the 8 MiB disk holds
    small = fake.add_blob(b"small" * 200)
    with small_tmpfs(tmp_path / "disk") as disk:
        settings = Settings(
            upstream="http://upstream.test",
            state_dir=disk / "state",
            machine_types=(MachineTypeDecl(profile="x86-64-v2"),),
        )
        proxy = start_in_thread(settings, transport=fake.transport())
        try:
            token = (disk / "state" / "tokens" / "x86-64-v2").read_text().strip()
            with httpx.Client(base_url=proxy.url, timeout=SERVED_WITHIN_S) as client:
                bearer = client.get("/token", auth=("x86-64-v2", token)).json()["token"]
                headers = {"Authorization": f"Bearer {bearer}"}
                got = client.get(f"/v2/lab/app/blobs/{big}", headers=headers)
                assert got.status_code == 507, got.text
                assert not [p for p in (disk / "state" / "cache").rglob(".part-*")]
                assert client.get(f"/v2/lab/app/blobs/{small}", headers=headers).status_code == 200
                # The disk filled up by something else: registering is a 507, no temporary file.
                filler = disk / "filler"
                with filler.open("wb") as f, pytest.raises(OSError):
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                node = (disk / "state" / "machine-types.json").read_text()
                one = json.loads(node)["types"]["x86-64-v2"]["type"]["node"]
                one["cpu"]["microarchitecture"] = "other"
                one["name"] = "other"
                got = client.post("/hetflow/v1/machine-types", json=one)
                assert got.status_code == 507, got.text
                assert not list((disk / "state").glob("machine-types.json.tmp*"))
        finally:
            proxy.stop()


def test_past_the_connection_limit_new_clients_get_a_503_and_service_resumes(tmp_path: Path) -> None:
    args = (f"--blob=big={30 * MIB}", "--blob=small=1024", "--per-client=1000", "--max-connections=30")
    with fake_proxy(tmp_path, *args) as p:
        headers = p.bearer()
        socks = stalled(p, p.blob_path("big"), headers, 40)
        try:
            # which ones are refused depends on when uvicorn reads each request (a loaded
            # machine accepts several connections before it reads the first request, and those
            # past the limit at that moment get the 503): count, never pick the last one
            answers = []
            for s in socks:
                s.settimeout(SERVED_WITHIN_S)
                answers.append(s.recv(64)[:12])
            assert set(answers) <= {b"HTTP/1.1 200", b"HTTP/1.1 503"}, set(answers)
            assert answers.count(b"HTTP/1.1 200") <= 30 and answers.count(b"HTTP/1.1 503") >= 40 - 30
        finally:
            for s in socks:
                s.close()
        deadline = time.monotonic() + SERVED_WITHIN_S  # the stalled ones' handlers notice they left
        while True:
            try:
                served_meanwhile(p, headers, n=5)
                break
            except (AssertionError, httpx.HTTPError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
