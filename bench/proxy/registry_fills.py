"""The proxy's cached blobs while upstream fills trickle (issue 38), for ``python -m bench.proxy.registry``
(``--trickling-fills N``, ``--only-trickling-fills``).

A proxy process (``hetflow.registry.fakes.fakeproxy --trickle N``) in front of a real loopback
upstream that sends N blobs one byte a second (``hetflow.registry.fakes.trickle``).  Measured in
one run: the latency (p50, p99) of a 1 KiB cached blob alone (the anchor), then while N
clients from other addresses each wait for a distinct trickling blob (N fills at once), and
how long after those clients hang up the upstream sees every fill's connection closed (an
abandoned fill below the minimum rate is cancelled), with the proxy's RSS at each step.
Before issue 38, 34 such fills took the 32 threads every blob read shared and the cached
blob timed out.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

__all__ = ["print_fills", "trickling_fills"]

MIB = 1024 * 1024


def _latencies(call: Callable[[], httpx.Response], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        response = call()
        out.append(time.perf_counter() - start)
        if response.status_code != 200:
            raise SystemExit(f"request failed: {response.status_code} {response.text[:200]}")
    return out


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50_ms": round(statistics.median(values) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _until(check: Callable[[], bool], timeout: float = 120.0) -> float:
    """Seconds until ``check()`` holds (polled every 20 ms); raises past ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"gave up waiting after {timeout:g} s")
        time.sleep(0.02)
    return round(time.monotonic() - start, 2)


def trickling_fills(fills: int, requests: int) -> dict[str, object]:
    """The small cached blob alone and beside ``fills`` trickling fills; see the docstring."""
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        argv = [sys.executable, "-m", "hetflow.registry.fakes.fakeproxy", f"{tmp}/state", "--blob=small=1024"]
        argv += [f"--trickle={fills}", "--trickle-every=1"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        socks: list[socket.socket] = []
        try:
            assert proc.stdout is not None
            info = json.loads(proc.stdout.readline())
            url, repo = info["url"], info["repo"]
            bearer = httpx.get(f"{url}/token", auth=(info["machine_type"], info["token"])).json()["token"]
            auth = f"Authorization: Bearer {bearer}"
            headers = {"Authorization": f"Bearer {bearer}"}
            path = f"{url}/v2/{repo}/blobs/{info['blobs']['small']}"

            def upstream_open() -> int:
                return int(httpx.get(f"{info['upstream']}/_trickle").json()["open"])

            with httpx.Client(timeout=60) as client:
                small = lambda: client.get(path, headers=headers)  # noqa: E731
                _latencies(small, 10)  # warm up: the connection, the page cache
                anchor = _latencies(small, requests)
                rss = {"alone": _rss_mib(proc.pid)}
                host, port = url.removeprefix("http://").split(":")
                for i, digest in enumerate(info["trickle"]):
                    s = socket.socket()
                    s.bind((f"127.0.0.{2 + i // 10}", 0))  # ten per address: no per-address limit measured
                    s.connect((host, int(port)))
                    s.sendall(f"GET /v2/{repo}/blobs/{digest} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n\r\n".encode())
                    socks.append(s)
                all_started_s = _until(lambda: upstream_open() >= fills)
                loaded = _latencies(small, requests)
                rss["during"] = _rss_mib(proc.pid)
                for s in socks:
                    s.close()
                socks = []
                cancelled_s = _until(lambda: upstream_open() == 0)
                after = _latencies(small, requests)
                rss["after"] = _rss_mib(proc.pid)
        finally:
            for s in socks:
                s.close()
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
    return {
        "fills": fills,
        "requests": requests,
        "anchor": _percentiles(anchor),
        "during_fills": _percentiles(loaded),
        "after_clients_left": _percentiles(after),
        "all_fills_started_s": all_started_s,
        "all_fills_cancelled_s": cancelled_s,
        "rss_mib": rss,
    }


def print_fills(result: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"trickling_fills": result}, indent=2))
        return
    anchor, loaded, after, rss = (result[k] for k in ("anchor", "during_fills", "after_clients_left", "rss_mib"))
    assert isinstance(anchor, dict) and isinstance(loaded, dict) and isinstance(after, dict) and isinstance(rss, dict)
    print(f"1 KiB cached blob, {result['requests']} requests, proxy process (fakeproxy) before a trickling upstream:")
    print("| case | p50 ms | p99 ms | proxy RSS MiB |")
    print("|---|---|---|---|")
    print(f"| alone (anchor) | {anchor['p50_ms']} | {anchor['p99_ms']} | {rss['alone']} |")
    print(
        f"| during {result['fills']} trickling fills (1 byte/s each; all reached the upstream in "
        f"{result['all_fills_started_s']} s) | {loaded['p50_ms']} | {loaded['p99_ms']} | {rss['during']} |"
    )
    print(
        f"| after their clients left (every fill cancelled {result['all_fills_cancelled_s']} s after) | "
        f"{after['p50_ms']} | {after['p99_ms']} | {rss['after']} |"
    )
