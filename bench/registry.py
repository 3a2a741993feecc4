"""Measure the proxy: ``python -m bench.registry [--rounds N] [--layer-mib M]``.

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

from hetflow.config import engine_env, find_engine
from hetflow.images.client import RegistryClient
from hetflow.images.index_build import build_index
from hetflow.images.match import parse_requirements
from hetflow.images.oci import ACCEPT_ANY_MANIFEST
from hetflow.registry.app import start_in_thread
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.registry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11, help="pulls of each kind (default 11)")
    parser.add_argument("--layer-mib", type=int, default=8, help="random MiB in each build's layer (default 8)")
    parser.add_argument("--requests", type=int, default=200, help="filtered index requests (default 200)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

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
        print(json.dumps(figures, indent=2))
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
