"""Pod startup on the local Kubernetes test control plane: ``python -m bench.engines.kubernetes
[--pods 1000] [--nodes 100] [--paced 200 --rate 20] [--threads 16] [--keep]``.

A fresh cluster (demo/kube/cluster.py: etcd, kube-apiserver, kube-controller-manager and the
plain kube-scheduler, built from Go modules) with ``--nodes`` kwok nodes; bare pods (kwok's
default stages: Running at once; no Job, so they stay Running) in two phases: ``--pods`` created
by client threads as fast as they go (saturation), then ``--paced`` at ``--rate`` pods/s (the
latency phase, as clusterloader2 measures the SLO); one watch records when each pod is seen
bound and Running.  Printed per phase, all from this one run on this machine:

- creation -> Running: client-side (the create request sent -> the watch sees phase Running:
  the SLO's "observed via watch"), and from the API's own timestamps (creationTimestamp ->
  the Ready condition's lastTransitionTime, which kwok sets on Running; both 1 s resolution);
- scheduling throughput: pods bound per second, first to last bind the watch saw;
- the Kubernetes pod startup SLO (99% of pods start within 5 s, image pulls excluded), pass/fail.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from demo.kube.cluster import LocalKube, start_cluster, stop_cluster
from demo.kube.objects import KwokNode

from hetflow.errors import EngineError

NS = "default"
SLO_SECONDS = 5.0
SLO_PERCENTILE = 99


def _client(cluster: LocalKube, timeout: float | None = 30) -> httpx.Client:
    pki = cluster.base / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return httpx.Client(base_url=cluster.server, verify=ctx, timeout=timeout)


def _api_time(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class Seen:
    """What the watch saw, by pod name: wall-clock times (time.time()) and API timestamps."""

    created: dict[str, float] = field(default_factory=dict)  # the create request sent (client)
    bound: dict[str, float] = field(default_factory=dict)  # the watch first saw spec.nodeName
    running: dict[str, float] = field(default_factory=dict)  # the watch first saw phase Running
    api: dict[str, float] = field(default_factory=dict)  # Ready.lastTransitionTime - creationTimestamp
    lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        with self.lock:
            if pod["spec"].get("nodeName") and name not in self.bound:
                self.bound[name] = now
            if pod.get("status", {}).get("phase") == "Running" and name not in self.running:
                self.running[name] = now
                ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
                self.api[name] = _api_time(ready["lastTransitionTime"]) - _api_time(
                    pod["metadata"]["creationTimestamp"]
                )


def _watch(cluster: LocalKube, run: str, seen: Seen, want: int, rv: str, deadline: float) -> None:
    """Watch the run's pods (raw JSON lines: a typed client's decoding would lag the watch)
    until ``want`` are Running or the deadline; each watch asks for 10 s and is renewed."""
    with _client(cluster, timeout=None) as http:
        while len(seen.running) < want and time.time() < deadline:
            params = {"watch": "1", "labelSelector": f"bench={run}", "resourceVersion": rv, "timeoutSeconds": "10"}
            with http.stream("GET", f"/api/v1/namespaces/{NS}/pods", params=params) as r:
                for line in r.iter_lines():
                    if not line:
                        continue
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        raise EngineError(f"the benchmark's pod watch failed: {ev['object'].get('message')}")
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    seen.event(ev["object"], time.time())
                    if len(seen.running) >= want:
                        return


def _pod(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": run}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


def _create(cluster: LocalKube, run: str, pods: int, threads: int, rate: float, seen: Seen) -> float:
    """Create the pods from ``threads`` clients (at ``rate`` pods/s in all when given);
    returns the seconds it took."""
    local = threading.local()
    t0 = time.time()

    def one(i: int) -> None:
        if rate:
            time.sleep(max(0.0, t0 + i / rate - time.time()))
        if not hasattr(local, "http"):
            local.http = _client(cluster)
        name = f"bench-{run}-{i:05d}"
        with seen.lock:
            seen.created[name] = time.time()
        r = local.http.post(f"/api/v1/namespaces/{NS}/pods", json=_pod(name, run))
        if r.status_code != 201:
            raise EngineError(f"creating pod {name}: {r.status_code} {r.text[:200]}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(pods)))
    return time.time() - t0


def _pct(values: Sequence[float], p: float) -> float:
    """The nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))]


def _phase(cluster: LocalKube, label: str, pods: int, threads: int, rate: float, timeout: float) -> bool:
    """Create ``pods`` pods, print one phase's table; True when the SLO holds."""
    run = f"{label[0]}{time.time_ns() % 10**8}"
    with _client(cluster) as http:
        rv = http.get(f"/api/v1/namespaces/{NS}/pods", params={"limit": "1"}).json()["metadata"]["resourceVersion"]
    seen = Seen()
    deadline = time.time() + timeout
    watcher = threading.Thread(target=_watch, args=(cluster, run, seen, pods, rv, deadline), daemon=True)
    watcher.start()
    took = _create(cluster, run, pods, threads, rate, seen)
    watcher.join(max(0.0, deadline - time.time()))
    if len(seen.running) < pods:
        raise EngineError(f"only {len(seen.running)} of {pods} pods Running within {timeout:.0f} s")
    client_lat = [seen.running[n] - seen.created[n] for n in seen.created]
    bind_lat = [seen.bound[n] - seen.created[n] for n in seen.created]
    binds = sorted(seen.bound.values())
    pace = f"at {rate:g} pods/s" if rate else "as fast as they go"
    print(
        f"\n== {label}: {pods} pods created by {threads} client threads {pace}, in {took:.2f} s ({pods / took:.0f}/s)"
    )
    print(f"{'':48} {'p50':>7} {'p99':>7} {'max':>7}")
    for what, xs, digits in (
        ("creation -> bound, client (watch)", bind_lat, 3),
        ("creation -> Running, client (watch)", client_lat, 3),
        ("creation -> Running, API timestamps (1 s res.)", list(seen.api.values()), 0),
    ):
        print(f"{what:48} {_pct(xs, 50):7.{digits}f} {_pct(xs, 99):7.{digits}f} {max(xs):7.{digits}f}")
    span = binds[-1] - binds[0]
    print(
        f"scheduling throughput: {pods} pods bound in {span:.2f} s (first to last bind seen): {(pods - 1) / span:.0f}/s"
    )
    p99 = _pct(client_lat, SLO_PERCENTILE)
    ok = p99 <= SLO_SECONDS
    print(
        f"SLO (99% of pods start within {SLO_SECONDS:g} s, creation to Running seen by watch): "
        f"p99 {p99:.3f} s -> {'PASS' if ok else 'FAIL'}"
    )
    return ok


def bench(
    cluster: LocalKube, pods: int, threads: int = 16, paced: int = 200, rate: float = 20, scheduler_qps: int = 0
) -> bool:
    """Two phases on one cluster: ``pods`` pods at once (saturation: the scheduler's
    throughput, and the latency of a queue), then ``paced`` pods at ``rate``/s (latency, as
    clusterloader2 measures the SLO: pods created at a steady pace).  True when both hold the SLO."""
    with _client(cluster) as http:
        version = http.get("/version").json()["gitVersion"]
    print(f"Kubernetes {version} control plane on 127.0.0.1 (etcd, apiserver, controller-manager, kube-scheduler")
    limit = f"{scheduler_qps}/s (--scheduler-qps)" if scheduler_qps else "50/s, its default"
    print(f"whose client is limited to {limit}: one bind per pod), {len(cluster.nodes)} kwok nodes")
    ok = _phase(cluster, "saturation", pods, threads, 0.0, 600)
    if paced:
        ok = _phase(cluster, "paced", paced, threads, rate, 600) and ok
    print(
        "\nWhat flatters: kwok pods start no container (no kubelet, sandbox, CNI or image pull: a pod is\n"
        "  Running as soon as kwok patches it), etcd runs with --unsafe-no-fsync on loopback, and every pod\n"
        "  fits.  What does not: the client, the watch, the control plane and kwok share this machine's cores."
    )
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engines.kubernetes", description=__doc__)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--threads", type=int, default=16, help="client threads creating pods")
    ap.add_argument("--paced", type=int, default=200, help="pods of the paced phase (0: none)")
    ap.add_argument("--rate", type=float, default=20.0, help="pods/s of the paced phase")
    ap.add_argument("--scheduler-qps", type=int, default=0, help="the scheduler's client limit (default: 50/s)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running (its folder is printed)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="hfkbench-", dir="/tmp"))
    nodes = [KwokNode(f"kwok-{i:03d}", cpus=32, memory="128Gi") for i in range(args.nodes)]
    try:
        t0 = time.monotonic()
        cluster = start_cluster(base, nodes, timeout=600, scheduler_qps=args.scheduler_qps)
        print(f"cluster of {args.nodes} kwok nodes up in {time.monotonic() - t0:.1f} s ({base})")
        try:
            bench(cluster, args.pods, args.threads, args.paced, args.rate, args.scheduler_qps)
        finally:
            if not args.keep:
                stop_cluster(base)
                shutil.rmtree(base, ignore_errors=True)
        return 0
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
