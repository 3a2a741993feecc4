"""hetflow's own cost on Kubernetes: ``python -m bench.engines.kube_hetflow [--steps 100] [--nodes 20]``.

On one fresh local cluster (demo/kube/cluster.py: the real control plane, kwok nodes whose pods
succeed 0.3 s after they run), in one run:

- anchor (run before and after hetflow): the same ``--steps`` Jobs that hetflow makes for
  trivial steps (built by hetflow's own ``translate.job_objects``: same pod spec, same labels),
  created directly by 16 client threads,
  timed from the first create until every pod has Succeeded (a watch: the event hetflow reads);
- hetflow: a workflow of ``--steps`` independent trivial steps run with
  ``hetflow run --backend kubernetes`` (a new process: start-up, RBAC check, planning on the
  API's nodes, submitting, watching, logs, releasing, recording), timed end to end.

It flatters the anchor: it records nothing, follows no log and plans nothing; and it flatters
neither: kwok starts no container, so what is measured is API and bookkeeping work only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from demo.kube.cluster import LocalKube, start_cluster, stop_cluster
from demo.kube.objects import KwokNode

from bench.engines.kubernetes import _client
from bench.speedrow import Row, emit
from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.kubernetes import KubernetesSettings, Placement, job_objects
from hetflow.execute.engine import ContainerSpec

IMAGE = "localhost/hetflow-test/busybox:latest"
NS = "default"


def _jobs(run: str, steps: int) -> list[dict[str, Any]]:
    out = []
    for i in range(steps):
        name = f"hf-{run}-s{i}-1"
        spec = ContainerSpec(name, IMAGE, ("true",), "1000:1000", {}, {}, cpus=0.5, memory=128 << 20)
        job = Job(name, run, f"s{i}", 1, spec, cpus=0.5, memory=128 << 20)
        out.append(job_objects(job, KubernetesSettings(), Placement())[-1])
    return out


def direct(cluster: LocalKube, steps: int) -> float:
    """Seconds from the first create of ``steps`` Jobs to the last of their pods Succeeded (the
    event hetflow reads a step's end from; the Job's Complete condition comes later)."""
    run = f"d{time.time_ns() % 10**9}"
    jobs = _jobs(run, steps)
    done: set[str] = set()
    all_done = threading.Event()
    path = f"/api/v1/namespaces/{NS}/pods"
    with _client(cluster, timeout=None) as watch_http:
        rv = watch_http.get(path, params={"limit": 1}).json()["metadata"]["resourceVersion"]
        params = {"watch": "true", "labelSelector": f"hetflow.run={run}", "resourceVersion": rv}

        def follow() -> None:
            with watch_http.stream("GET", path, params=params) as r:
                for line in r.iter_lines():
                    obj = json.loads(line)["object"] if line else {}
                    if obj.get("status", {}).get("phase") == "Succeeded":
                        done.add(obj["metadata"]["labels"]["hetflow.job"])
                        if len(done) == steps:
                            all_done.set()
                            return

        threading.Thread(target=follow, daemon=True).start()
        time.sleep(0.5)  # the watch is open
        t0 = time.monotonic()
        with _client(cluster) as http, ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda j: http.post(f"/apis/batch/v1/namespaces/{NS}/jobs", json=j).raise_for_status(), jobs))
        if not all_done.wait(600):
            raise EngineError(f"only {len(done)} of {steps} Jobs completed")
        took = time.monotonic() - t0
    with _client(cluster) as http:
        query = {"labelSelector": f"hetflow.run={run}", "propagationPolicy": "Background"}
        http.delete(f"/apis/batch/v1/namespaces/{NS}/jobs", params=query)
    return took


def _drained(cluster: LocalKube, limit: float = 300) -> None:
    """Wait until no Job and no pod is left (the garbage collector deletes the last phase's
    pods through the same controller-manager client that the next phase's Jobs need)."""
    deadline = time.monotonic() + limit
    with _client(cluster) as http:
        while time.monotonic() < deadline:
            left = [http.get(f"{p}", params={"limit": 1}).json()["items"] for p in (f"/api/v1/namespaces/{NS}/pods",
                    f"/apis/batch/v1/namespaces/{NS}/jobs")]  # fmt: skip
            if not any(left):
                return
            time.sleep(0.5)
    raise EngineError(f"Jobs or pods still left after {limit:.0f} s")


QUIET = 2.0  # seconds without a write to pods, Jobs or events: the controllers are done with the last phase
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _writes(http: Any) -> float:
    """The API server's count of writes to pods, Jobs and events so far (its /metrics)."""
    total = 0.0
    for line in http.get("/metrics").text.splitlines():
        written = line.startswith("apiserver_request_total{") and any(f'verb="{v}"' in line for v in WRITES)
        if written and any(f'resource="{r}"' in line for r in ("pods", "jobs", "events")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _settled(cluster: LocalKube, limit: float = 300) -> None:
    """Wait until the controllers have finished the phase before: no write to pods, Jobs or
    events for QUIET seconds.  No Job or pod left is not enough: the job controller then still
    sends the last phase's events and finalizer patches, through a client limited to 20
    requests/s with a burst of 30, so a phase that began at once began without the burst that
    the first one (a fresh cluster) had: a second or more of a hundred steps' ten, which the
    second anchor and hetflow paid and the first anchor did not."""
    deadline = time.monotonic() + limit
    with _client(cluster) as http:
        last, since = _writes(http), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = _writes(http)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= QUIET:
                return
    raise EngineError(f"the controllers still write after {limit:.0f} s")


def through_hetflow(cluster: LocalKube, steps: int, home: Path) -> tuple[float, str]:
    """Seconds of ``hetflow run --backend kubernetes`` of ``steps`` independent trivial steps, and
    its last line."""
    resources = {"cpus": 0.5, "memory": "128Mi"}
    step = {"image": IMAGE, "command": ["true"], "resources": resources}
    wf = {"apiVersion": "hetflow/v1", "name": "kbench", "steps": {f"s{i}": step for i in range(steps)}}
    (home / "wf.yaml").write_text(yaml.safe_dump(wf))
    config = {
        "backend": "kubernetes",
        "workdir": str(home / "work"),
        "kubernetes": {"kubeconfig": str(cluster.kubeconfig)},
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "HETFLOW_HOME": str(home)}
    argv = [sys.executable, "-m", "hetflow.cli.main", "run", "-q", "--no-cache", "--config", str(home / "config.yaml")]
    t0 = time.monotonic()
    proc = subprocess.run([*argv, str(home / "wf.yaml")], env=env, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise EngineError(f"hetflow run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return took, proc.stdout.strip().splitlines()[-1]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engines.kube_hetflow", description=__doc__)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=20)
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="hfkhf-", dir="/tmp"))
    try:
        cluster = start_cluster(
            base / "c", [KwokNode(f"kwok-{i:02d}", cpus=32, memory="128Gi") for i in range(args.nodes)]
        )
        try:
            (base / "home").mkdir()
            _settled(cluster)  # each phase begins on a cluster done with the one before, the first too
            first = direct(cluster, args.steps)  # anchor, hetflow, anchor: a warming cluster favours neither
            _drained(cluster)
            _settled(cluster)
            took, said = through_hetflow(cluster, args.steps, base / "home")
            _drained(cluster)
            _settled(cluster)
            second = direct(cluster, args.steps)
        finally:
            stop_cluster(base / "c")
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"{args.steps} trivial steps on {args.nodes} kwok nodes (pods succeed 0.3 s after they run),"
        " one cluster, one run; each phase starts once the one before has no Job or pod left"
        f" and the controllers have not written for {QUIET:.0f} s"
    )
    print(f"{'':40} {'seconds':>8} {'per step':>9}")
    anchor = (first + second) / 2
    for label, t in (("Jobs created directly (anchor), before", first), ("hetflow run --backend kubernetes", took),
                     ("Jobs created directly (anchor), after", second)):  # fmt: skip
        print(f"{label:40} {t:8.2f} {t / args.steps * 1000:7.0f}ms")
    print(f"ratio to the anchors' mean {took / anchor:.2f}; hetflow said: {said}")
    target = f"{args.steps} steps through hetflow run --backend kubernetes, at most 1.1x 16-thread creation"
    emit(Row(target, took / anchor, "x", "direct creation (s)", anchor, 1.1, "bench.engines.kube_hetflow"))
    print("It flatters " + __doc__.split("It flatters ", 1)[1].strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
