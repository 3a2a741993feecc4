"""Measure the proxy: ``python -m bench.proxy.registry [--rounds N] [--layer-mib M]``.

Starts Debian's docker-registry on loopback, pushes three builds of one image
(busybox plus ``--layer-mib`` MiB of random bytes each, so the pull moves real data)
and their index, starts the proxy, and measures

* ``podman pull`` of the image straight from the registry against the same pull
  through the proxy (as machine type haswell-cpu, which gets the v3 build, as large as
  the generic build a direct pull gets), with the proxy's blob cache cold and warm;
  the time ratio proxy / direct of the medians;
* the proxy's latency for a filtered index request (``GET /v2/<name>/manifests/<tag>``
  with a bearer, httpx, one keep-alive connection, ``--requests`` of them), against
  the same request straight to the registry.

Needs root, podman, docker-registry (``apt-get install -y podman docker-registry``).
Pulls go into a private storage under a temporary folder, removed at the end.

Then, with ``--slow-readers N`` (default 100; ``--only-slow-readers`` skips the pulls),
a proxy process in front of the fake upstream (``hetflow.registry.fakes.fakeproxy``): the
latency (p50, p99) of a 1 KiB cached blob alone (the anchor) and while N connections
from another address ask for a 30 MiB cached blob and never read it, and the proxy
process's RSS before, while and after they hold on.  Issue 23: before, 40 such readers
held every blob thread and the small blob timed out.

With ``--trickling-fills N`` (default 50; ``--only-trickling-fills`` runs that alone), the
same cached blob alone and during N fills from an upstream sending a byte a second, and
after their clients leave (``bench.proxy.registry_fills``; issue 38).

First of all (``--no-slow-clients`` skips it, ``--only-slow-clients`` runs it alone): both
services through the HTTP front and on uvicorn alone as before, another client's p50/p99
alone (the anchor) and under slowhttptest's slow headers, slow body and slow read, and wrk's
cached-blob throughput of each (``bench.proxy.registry_server``; issue 38).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.proxy.registry_fills import print_fills, trickling_fills
from bench.proxy.registry_indexes import big_indexes, print_indexes
from bench.proxy.registry_server import print_slow_clients, slow_clients
from hetflow.config import engine_env, find_engine
from hetflow.images.distribution.client import RegistryClient
from hetflow.images.distribution.index_build import build_index
from hetflow.images.matching.match import parse_requirements
from hetflow.images.oci import ACCEPT_ANY_MANIFEST
from hetflow.registry import start_in_thread
from hetflow.registry.settings import MachineTypeDecl, Settings

REPO = "bench/app"
BUILDS = {"generic": "", "v3": "x86-64-v3", "gpu": "x86-64-v3,gpu:sm_80"}
MACHINE_TYPE = "haswell-cpu"  # gets the v3 build


def _run(argv: list[str], *, input: str | None = None) -> None:
    done = subprocess.run(argv, env=engine_env(), capture_output=True, text=True, input=input, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")


@contextmanager
def upstream_registry(root: Path) -> Iterator[str]:
    """docker-registry on a free loopback port; yields HOST:PORT."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = root / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    process = subprocess.Popen(
        ["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("docker-registry did not start (apt-get install -y docker-registry)")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def push_image_builds(host: str, work: Path, layer_mib: int) -> str:
    """One image per build (busybox + random bytes), pushed, and their index; its digest."""
    podman = find_engine()
    for build in BUILDS:
        rootfs = work / f"rootfs-{build}"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copyfile(shutil.which("busybox") or "/bin/busybox", rootfs / "bin" / "busybox")
        (rootfs / "bin" / "busybox").chmod(0o755)
        for applet in ("sh", "echo", "env"):
            (rootfs / "bin" / applet).symlink_to("busybox")
        (rootfs / "data.bin").write_bytes(os.urandom(layer_mib * 1024 * 1024))
        image = f"{host}/{REPO}:{build}"
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            [podman, "import", "--change", f"ENV=BUILD={build}", "-", image],
            stdin=tar.stdout, env=engine_env(), capture_output=True, check=True,
        )  # fmt: skip
        tar.wait()
        _run([podman, "push", "--tls-verify=false", "--quiet", image])
        _run([podman, "rmi", image])
    entries = [(build, parse_requirements(spec)) for build, spec in BUILDS.items()]
    with RegistryClient(f"http://{host}") as client:
        return build_index(client, REPO, entries, tag="latest").digest


class PrivatePodman:
    """podman with its own storage, emptied between pulls."""

    def __init__(self, work: Path) -> None:
        self.root = work / "storage"
        self.runroot = Path(tempfile.mkdtemp(prefix="hf-bench-", dir="/tmp"))
        self.base = [find_engine(), "--root", str(self.root), "--runroot", str(self.runroot)]

    def pull(self, ref: str, authfile: Path | None = None) -> float:
        auth = ["--authfile", str(authfile)] if authfile else []
        start = time.perf_counter()
        _run([*self.base, "pull", "--quiet", "--tls-verify=false", *auth, ref])
        elapsed = time.perf_counter() - start
        _run([*self.base, "rmi", "--all", "--force"])
        return elapsed

    def build_of(self, ref: str, authfile: Path) -> str:
        _run([*self.base, "pull", "--quiet", "--tls-verify=false", "--authfile", str(authfile), ref])
        done = subprocess.run(
            [*self.base, "run", "--rm", "--network", "none", ref, "sh", "-c", "echo $BUILD"],
            env=engine_env(), capture_output=True, text=True, check=True,
        )  # fmt: skip
        _run([*self.base, "rmi", "--all", "--force"])
        return done.stdout.strip()

    def close(self) -> None:
        subprocess.run([*self.base, "system", "reset", "--force"], env=engine_env(), capture_output=True, check=False)
        shutil.rmtree(self.runroot, ignore_errors=True)


def _latencies(call: Callable[[], httpx.Response], n: int) -> list[float]:
    for _ in range(10):  # warm up: connections, caches
        call()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        response = call()
        out.append(time.perf_counter() - start)
        if response.status_code != 200:
            raise SystemExit(f"request failed: {response.status_code} {response.text[:200]}")
    return out


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(values) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def _paired(proxied: list[float], direct: list[float]) -> float:
    return round(statistics.median(p / d for p, d in zip(proxied, direct, strict=True)), 3)


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50_ms": round(statistics.median(values) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def slow_readers(readers: int, requests: int) -> dict[str, object]:
    """The small cached blob alone and beside ``readers`` stalled readers of a large one."""
    import sys

    mib = 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        argv = [sys.executable, "-m", "hetflow.registry.fakes.fakeproxy", f"{tmp}/state"]
        argv += [f"--blob=big={30 * mib}", "--blob=small=1024", f"--per-client={readers + 10}"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        socks: list[socket.socket] = []
        try:
            assert proc.stdout is not None
            info = json.loads(proc.stdout.readline())
            url, repo = info["url"], info["repo"]
            bearer = httpx.get(f"{url}/token", auth=(info["machine_type"], info["token"])).json()["token"]
            headers = {"Authorization": f"Bearer {bearer}"}
            with httpx.Client(timeout=60) as client:
                small = lambda: client.get(f"{url}/v2/{repo}/blobs/{info['blobs']['small']}", headers=headers)  # noqa: E731
                anchor = _latencies(small, requests)
                rss_before = _rss(proc.pid)
                host, port = url.removeprefix("http://").split(":")
                raw = f"GET /v2/{repo}/blobs/{info['blobs']['big']} HTTP/1.1\r\nHost: {host}\r\n"
                raw += f"Authorization: Bearer {bearer}\r\n\r\n"
                for _ in range(readers):
                    s = socket.socket()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.bind(("127.0.0.2", 0))  # another client: the per-client limit is not what is measured
                    s.connect((host, int(port)))
                    s.sendall(raw.encode())
                    socks.append(s)
                time.sleep(1.0)  # let the proxy fill what the stalled sockets take
                loaded = _latencies(small, requests)
                rss_during = _rss(proc.pid)
                for s in socks:
                    s.close()
                socks = []
                time.sleep(1.0)
                rss_after = _rss(proc.pid)
        finally:
            for s in socks:
                s.close()
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
    return {
        "readers": readers,
        "requests": requests,
        "anchor": _percentiles(anchor),
        "with_slow_readers": _percentiles(loaded),
        "rss_mib": {
            k: round(v / mib, 1) for k, v in (("before", rss_before), ("during", rss_during), ("after", rss_after))
        },
    }


def pulls(
    args: argparse.Namespace,
) -> tuple[dict[str, str], dict[str, list[float]], list[float], list[float]]:
    """Against a loopback registry holding the image's builds and the proxy in front of it:
    ``--rounds`` podman pulls of each kind (direct, through the proxy cold and warm) and
    ``--requests`` filtered index requests through the proxy and straight to the registry.
    Returns (the build each way pulled, pull seconds by kind, request seconds via the proxy,
    straight)."""
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp, upstream_registry(Path(tmp)) as host:
        work = Path(tmp)
        push_image_builds(host, work, args.layer_mib)
        state = work / "state"
        settings = Settings(
            upstream=f"http://{host}", state_dir=state, machine_types=(MachineTypeDecl(profile=MACHINE_TYPE),)
        )
        proxy = start_in_thread(settings)
        podman = PrivatePodman(work)
        try:
            token = (state / "tokens" / MACHINE_TYPE).read_text().strip()
            authfile = work / "auth.json"
            _run(
                [find_engine(), "login", "--tls-verify=false", "--authfile", str(authfile), "-u", MACHINE_TYPE,
                 "--password-stdin", proxy.host], input=token,
            )  # fmt: skip
            direct_ref, proxy_ref = f"{host}/{REPO}:latest", f"{proxy.host}/{REPO}:latest"
            builds = {"direct": podman.build_of(direct_ref, authfile), "proxy": podman.build_of(proxy_ref, authfile)}
            times: dict[str, list[float]] = {"direct": [], "proxy-cold": [], "proxy-warm": []}
            for _ in range(args.rounds):
                times["direct"].append(podman.pull(direct_ref))
                shutil.rmtree(state / "cache", ignore_errors=True)
                times["proxy-cold"].append(podman.pull(proxy_ref, authfile))
                times["proxy-warm"].append(podman.pull(proxy_ref, authfile))
            bearer = httpx.get(f"{proxy.url}/token", auth=(MACHINE_TYPE, token)).json()["token"]
            with httpx.Client() as client:
                headers = {"Accept": ACCEPT_ANY_MANIFEST}
                via = _latencies(
                    lambda: client.get(
                        f"{proxy.url}/v2/{REPO}/manifests/latest",
                        headers={**headers, "Authorization": f"Bearer {bearer}"},
                    ),
                    args.requests,
                )
                straight = _latencies(
                    lambda: client.get(f"http://{host}/v2/{REPO}/manifests/latest", headers=headers), args.requests
                )
        finally:
            podman.close()
            proxy.stop()
    return builds, times, via, straight


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.registry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="pulls of each kind (default 11)")
    parser.add_argument("--layer-mib", type=int, default=8, help="random MiB in each build's layer (default 8)")
    parser.add_argument("--requests", type=int, default=200, help="filtered index requests (default 200)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--slow-readers", type=int, default=100, help="stalled readers (default 100; 0: skip)")
    parser.add_argument("--only-slow-readers", action="store_true", help="skip the podman pulls")
    parser.add_argument("--trickling-fills", type=int, default=50, help="fills beside the cached blob (0: skip)")
    parser.add_argument(
        "--only-trickling-fills", action="store_true", help="that row alone (bench.proxy.registry_fills)"
    )
    parser.add_argument("--big-indexes", type=int, default=50, help="4 MB indexes that fit nothing (0: skip)")
    parser.add_argument("--only-big-indexes", action="store_true", help="that row alone (bench.proxy.registry_indexes)")
    parser.add_argument("--no-slow-clients", action="store_true", help="skip slowhttptest and wrk (registry_server)")
    parser.add_argument(
        "--only-slow-clients", action="store_true", help="those rows alone (bench.proxy.registry_server)"
    )
    args = parser.parse_args(argv)
    if args.only_slow_clients or not args.no_slow_clients:  # their own rows (bench.proxy.registry_server)
        print_slow_clients(slow_clients(), args.json)
        if args.only_slow_clients:
            return 0
    if args.big_indexes:  # its own row, measured and printed first (bench.proxy.registry_indexes)
        print_indexes(big_indexes(args.big_indexes), args.json)
        if args.only_big_indexes:
            return 0
    fills = trickling_fills(args.trickling_fills, args.requests) if args.trickling_fills else None
    if args.only_trickling_fills:
        if fills is not None:
            print_fills(fills, args.json)
        return 0
    slow = slow_readers(args.slow_readers, args.requests) if args.slow_readers else None
    if args.only_slow_readers:
        if slow is not None:
            _print_slow(slow, args.json)
        if fills is not None:
            print_fills(fills, args.json)
        return 0

    builds, times, via, straight = pulls(args)

    medians = {k: statistics.median(v) for k, v in times.items()}
    figures = {
        "layer_mib": args.layer_mib,
        "rounds": args.rounds,
        "builds_pulled": builds,
        "pull_median_s": {k: round(v, 3) for k, v in medians.items()},
        "ratio_cold": round(medians["proxy-cold"] / medians["direct"], 3),
        "ratio_warm": round(medians["proxy-warm"] / medians["direct"], 3),
        # Each round's proxy pull over the same round's direct pull: steadier when
        # other work on the machine comes and goes between rounds.
        "paired_ratio_cold": _paired(times["proxy-cold"], times["direct"]),
        "paired_ratio_warm": _paired(times["proxy-warm"], times["direct"]),
        "index_request_median_ms": round(statistics.median(via) * 1000, 3),
        "upstream_request_median_ms": round(statistics.median(straight) * 1000, 3),
    }
    if args.json:
        print(json.dumps({**figures, "slow_readers": slow, "trickling_fills": fills}, indent=2))
        return 0
    print(f"image: {len(BUILDS)} builds, each busybox + {args.layer_mib} MiB random; {args.rounds} pulls of each kind")
    print(f"builds pulled: direct -> {builds['direct']}, through the proxy as {MACHINE_TYPE} -> {builds['proxy']}")
    for kind, values in times.items():
        spread = f"min {min(values):.3f}, max {max(values):.3f}"
        print(f"  podman pull {kind:11} median {statistics.median(values):.3f} s  ({spread})")
    print(f"ratio proxy/direct of the medians: cold cache {figures['ratio_cold']}, warm cache {figures['ratio_warm']}")
    print(
        f"median of per-round ratios:       cold cache {figures['paired_ratio_cold']}, "
        f"warm cache {figures['paired_ratio_warm']}"
    )
    print(f"filtered index request through the proxy ({args.requests}): {_ms(via)}")
    print(f"same request straight to the registry ({args.requests}):  {_ms(straight)}")
    if slow is not None:
        _print_slow(slow, False)
    if fills is not None:
        print_fills(fills, False)
    return 0


def _print_slow(slow: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"slow_readers": slow}, indent=2))
        return
    anchor, loaded, rss = slow["anchor"], slow["with_slow_readers"], slow["rss_mib"]
    assert isinstance(anchor, dict) and isinstance(loaded, dict) and isinstance(rss, dict)
    print(f"1 KiB cached blob, {slow['requests']} requests, proxy process (fakeproxy):")
    print("| case | p50 ms | p99 ms | proxy RSS MiB |")
    print("|---|---|---|---|")
    print(f"| alone (anchor) | {anchor['p50_ms']} | {anchor['p99_ms']} | {rss['before']} |")
    print(
        f"| {slow['readers']} stalled readers of a 30 MiB blob | {loaded['p50_ms']} | {loaded['p99_ms']} | "
        f"{rss['during']} (after they leave: {rss['after']}) |"
    )


if __name__ == "__main__":
    raise SystemExit(main())
