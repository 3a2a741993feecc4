"""The HTTP front under slow clients, and its cached-blob throughput (issue 38), for
``python -m bench.proxy.registry`` (``--slow-clients``, ``--only-slow-clients``).

Both services, each served two ways in one run, each in a process of its own: through the
front as shipped (HAProxy before uvicorn: ``hetflow.registry.fakes.fakeproxy``, ``hetflow ui``) and
with uvicorn alone as it was configured before issue 38 (``limit_concurrency`` 1,024 for the
proxy, nothing for the dashboard; ``python -m bench.proxy.registry_server bare-proxy|bare-ui``).
For each, the latency (p50, p99) of another client's requests (127.0.0.2, a new connection
each: the proxy's 1 KiB cached blob, the dashboard's run list) with no attack (the anchor)
and while Debian's slowhttptest holds about a thousand slow connections from 127.0.0.1
(slow headers, slow body, slow read), and how many of those the server still held when
the attack had opened them all.  Then ``wrk`` (Debian) against the proxy's cached blobs
(1 KiB, 1 MiB), front and bare, for throughput.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from tests.integration.slowhttp import Attack, held, held_steadily, probe, slow_attack, wait_for

__all__ = ["print_slow_clients", "slow_clients"]

MIB = 1024 * 1024
ATTACKS = (Attack("headers", 1100, 60), Attack("body", 1000, 60), Attack("read", 1000, 60))
SERVERS = ("front", "bare")


@contextmanager
def _proxy(work: Path, server: str, command: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """The proxy process (front or bare) with a 1 KiB and a 1 MiB cached blob; its info.
    ``command``: another ``python -m`` module and its arguments, before the state folder
    (``bench.proxy.registry_candidates``' other servers), printing the same JSON line."""
    module = "hetflow.registry.fakes.fakeproxy" if server == "front" else "bench.proxy.registry_server"
    command = command or (module, *(["bare-proxy"] if server == "bare" else []))
    argv = [sys.executable, "-m", *command, str(work / server)]
    argv += ["--blob=small=1024", f"--blob=big={MIB}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        token = httpx.get(f"{info['url']}/token", auth=(info["machine_type"], info["token"]), timeout=30)
        info["headers"] = {"Authorization": f"Bearer {token.json()['token']}"}
        blobs = f"/v2/{info['repo']}/blobs"
        info["path"] = f"{blobs}/{info['blobs']['small']}"
        info["big_path"] = f"{blobs}/{info['blobs']['big']}"
        info["urls"] = {"headers": "/v2/", "body": "/token", "read": info["big_path"]}
        info["body_bytes"] = 8192
        yield info
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)


@contextmanager
def _dashboard(work: Path, server: str) -> Iterator[dict[str, Any]]:
    """``hetflow ui`` (front) or the dashboard on uvicorn alone (bare) over 30 runs."""
    from tests.integration.hfkit import free_port
    from tests.integration.uikit import synthetic_run

    from hetflow.state import Store

    home = work / f"ui-{server}"
    home.mkdir(parents=True)
    store = Store(home / "state.db")
    for i in range(30):
        synthetic_run(store, home, f"run{i:05d}", steps=["a", "b"])
    store.close()
    port = free_port()
    env = {**os.environ, "HETFLOW_HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
    if server == "front":
        argv = [sys.executable, "-m", "hetflow.cli.main", "ui", "--port", str(port)]
    else:
        argv = [sys.executable, "-m", "bench.proxy.registry_server", "bare-ui", str(home), str(port)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{base}/api/config"), 60, "the dashboard answering")
        urls = {"headers": "/api/runs", "body": "/api/runs", "read": "/static/vendor/chart.umd.min.js"}
        yield {"url": base, "headers": {}, "path": "/api/runs", "urls": urls, "body_bytes": 4096}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _under_attack(info: dict[str, Any], attack: Attack) -> dict[str, Any]:
    base, port = info["url"], int(info["url"].rsplit(":", 1)[1])
    attack = replace(attack, headers=info["headers"], body_bytes=info["body_bytes"])
    with slow_attack(attack, base + info["urls"][attack.mode]) as running:
        on = lambda: held(port) >= 50 or not running.running()  # noqa: E731  # as the tests wait
        wait_for(on, 60, "slowhttptest's connections reaching the server")
        at_full = held_steadily(port)
        during = probe(base, info["path"], info["headers"])
    wait_for(lambda: held(port) == 0, 60, "the attack's connections gone")
    return {**during.summary(), "held": at_full}


def _service_rows(start: Any, work: Path, server: str) -> dict[str, Any]:
    with start(work, server) as info:
        rows: dict[str, Any] = {"anchor": probe(info["url"], info["path"], info["headers"], n=100).summary()}
        for attack in ATTACKS:
            rows[attack.mode] = _under_attack(info, attack)
        if "big_path" in info:
            rows["wrk"] = {
                "1 KiB": _wrk(info["url"] + info["path"], info["headers"]),
                "1 MiB": _wrk(info["url"] + info["big_path"], info["headers"]),
            }
    return rows


def _wrk(url: str, headers: dict[str, str], seconds: int = 10) -> dict[str, float]:
    """``wrk`` (2 threads, 32 connections) against one cached blob: requests/s, MiB/s, p99 ms."""
    argv = ["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    moved = re.search(r"Transfer/sec:\s+([\d.]+)([KMG]?B)", out)
    scale = {"B": 1 / MIB, "KB": 1 / 1024, "MB": 1, "GB": 1024}
    mib = float(moved.group(1)) * scale[moved.group(2)] if moved else 0.0
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)] if p99 else -1
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "requests_s": rate,
        "mib_s": round(mib, 1),
        "p99_ms": round(p99_ms, 2),
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


def slow_clients() -> dict[str, Any]:
    """Every row: service -> server -> anchor, each attack (and wrk for the proxy)."""
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        work = Path(tmp)
        return {
            "proxy": {server: _service_rows(_proxy, work, server) for server in SERVERS},
            "dashboard": {server: _service_rows(_dashboard, work, server) for server in SERVERS},
        }


def print_slow_clients(figures: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"slow_clients": figures}, indent=2))
        return
    label = {"front": "front (HAProxy + uvicorn)", "bare": "uvicorn alone (before)"}
    print("another client (127.0.0.2, new connection each) while slowhttptest holds slow connections from 127.0.0.1:")
    print("| service | server | attack | p50 ms | p99 ms | failed | attack connections held |")
    print("|---|---|---|---|---|---|---|")
    for service, servers in figures.items():
        for server, rows in servers.items():
            for mode in ("anchor", *(a.mode for a in ATTACKS)):
                r = rows[mode]
                what = "none (anchor)" if mode == "anchor" else f"slow {mode}, {_count(mode)} connections"
                print(
                    f"| {service} | {label[server]} | {what} | {r['p50_ms']} | {r['p99_ms']} | {r['failed']}"
                    f" of {r['answered'] + r['failed']} | {r.get('held', '')} |"
                )
    print("\nwrk -t2 -c32 -d10s against a cached blob of the proxy:")
    print("| server | blob | requests/s | MiB/s | p99 ms |")
    print("|---|---|---|---|---|")
    for server, rows in figures["proxy"].items():
        for blob, w in rows["wrk"].items():
            print(f"| {label[server]} | {blob} | {w['requests_s']:.0f} | {w['mib_s']} | {w['p99_ms']} |")


def _count(mode: str) -> int:
    return next(a.connections for a in ATTACKS if a.mode == mode)


def _bare_proxy(state: Path, blob_specs: list[str]) -> None:
    """The proxy on uvicorn alone, as ``serve`` ran it before issue 38 (limit_concurrency)."""
    import uvicorn
    from tests.integration.hfkit import free_port

    from hetflow.registry import FakeRegistry, Limits, MachineTypeDecl, Settings, create_app
    from hetflow.registry.fakes.fakeproxy import MACHINE_TYPE, REPO

    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    blobs = {}
    for spec in blob_specs:
        name, _, size = spec.removeprefix("--blob=").partition("=")
        blobs[name] = fake.add_blob(os.urandom(int(size)))
    settings = Settings(
        upstream="http://upstream.test", state_dir=state, machine_types=(MachineTypeDecl(profile=MACHINE_TYPE),)
    )
    port = free_port()
    app = create_app(settings, transport=fake.transport())
    most = Limits().max_connections
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="error", access_log=False, limit_concurrency=most
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: server.started, 30, "uvicorn starting")
    token = (state / "tokens" / MACHINE_TYPE).read_text().strip()
    bearer = httpx.get(f"{url}/token", auth=(MACHINE_TYPE, token)).json()["token"]
    for digest in blobs.values():
        httpx.get(f"{url}/v2/{REPO}/blobs/{digest}", headers={"Authorization": f"Bearer {bearer}"}).raise_for_status()
    info = {"url": url, "pid": os.getpid(), "machine_type": MACHINE_TYPE, "token": token, "repo": REPO, "blobs": blobs}
    print(json.dumps(info), flush=True)
    sys.stdin.read()
    server.should_exit = True
    time.sleep(1)


def _bare_ui(home: Path, port: int) -> None:
    """The dashboard on uvicorn alone, as ``hetflow ui`` ran it before issue 38."""
    import uvicorn

    from hetflow.ui import UiConfig, create_app

    config = UiConfig(store_path=home / "state.db", port=port)
    uvicorn.run(create_app(config), host="127.0.0.1", port=port, log_level="error", access_log=False)


if __name__ == "__main__":
    if sys.argv[1] == "bare-proxy":
        _bare_proxy(Path(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1] == "bare-ui":
        _bare_ui(Path(sys.argv[2]), int(sys.argv[3]))
