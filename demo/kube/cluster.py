"""A local Kubernetes test cluster on this one machine, for tests, ``make demo-kubernetes`` and
``python -m bench.engines.kubernetes``: a real control plane (etcd, kube-apiserver with Node,RBAC
authorization and resource.k8s.io/v1, kube-controller-manager, kube-scheduler) built from Go
modules by tools/kube/build, and kwok playing the nodes: simulated nodes with device-plugin GPUs
(GFD labels) or DRA GPUs (a ResourceSlice of driver gpu.nvidia.com), whose pods follow the
test convention's stages (demo/kube/objects.py).  Every server listens on 127.0.0.1, free ports.

    BASE/pki/            CA, serving and client certificates, service-account key
    BASE/kubeconfig      the admin (system:masters)   BASE/kubeconfig-restricted  get/list pods in "default"
    BASE/etcd/  BASE/log/NAME.log  BASE/run/NAME.pid  BASE/kwok/ (kwok.yaml, pod.log)  BASE/cluster.json

Pod logs: kwok's log server stands in for each node's kubelet (the node's InternalIP 127.0.0.1 and
its daemonEndpoints port are kwok's), so ``read_namespaced_pod_log`` works for kwok pods; every
container's log is BASE/kwok/pod.log (one ClusterLogs rule: kwok starts no container).

    python -m demo.kube.cluster start|status|stop [--base DIR]   (make demo-kubernetes: demo/kube/demo.py)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from demo.kube.objects import (
    DEVICE_CLASS,
    RESTRICTED_RBAC,
    KwokNode,
    component_args,
    gfd_labels,
    node_object,
    resource_slice,
    write_files,
)
from demo.kube.processes import PROGRAMS, free_port, healthy, kube_bin, running_pid, spawn, wait_for
from hetflow.config import hetflow_home
from hetflow.errors import EngineError

Obj = dict[str, Any]

DEFAULT_NODES = (
    KwokNode("kwok-cpu-0", cpus=8, memory="32Gi"),
    KwokNode("kwok-cpu-1", cpus=8, memory="32Gi"),
    KwokNode(
        "kwok-a100",
        cpus=32,
        memory="256Gi",
        labels=gfd_labels("NVIDIA A100-SXM4-40GB", 40960, (8, 0), 4),
        extended={"nvidia.com/gpu": 4},
    ),
    KwokNode(
        "kwok-t4",
        cpus=16,
        memory="64Gi",
        labels=gfd_labels("Tesla T4", 15360, (7, 5), 2),
        extended={"nvidia.com/gpu": 2},
    ),
    KwokNode(
        "kwok-h100-dra",
        cpus=32,
        memory="512Gi",
        dra_gpus=(("NVIDIA H100 80GB HBM3", "Hopper", "9.0", "550.54.15", "80Gi"),) * 2,
    ),
)


@dataclass(frozen=True)
class LocalKube:
    """A running cluster under ``base``; ``server``: the API server's https URL."""

    base: Path
    server: str

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (group system:masters)."""
        return self.base / "kubeconfig"

    @property
    def restricted_kubeconfig(self) -> Path:
        """A user who may only get and list pods in namespace "default" (RBAC-forbidden tests)."""
        return self.base / "kubeconfig-restricted"

    @property
    def logs_file(self) -> Path:
        """What every kwok pod's container serves as its log (CRI format; append to it)."""
        return self.base / "kwok" / "pod.log"

    @property
    def nodes(self) -> tuple[KwokNode, ...]:
        return _load_nodes(self.base)

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig)}

    def stop(self) -> None:
        stop_cluster(self.base)

    def add_node(self, node: KwokNode, *, timeout: float = 60) -> None:
        """Create ``node`` (and its ResourceSlice) and wait until it is Ready and untainted."""
        api = _Api(self.server, self.base / "pki")
        _create_node(api, node)
        _save_nodes(self.base, (*(n for n in self.nodes if n.name != node.name), node))
        wait_for(f"node {node.name} Ready", lambda: _nodes_ready(api, [node.name]), {}, self.base, "kwok", timeout)

    def delete_node(self, name: str) -> None:
        """Delete the node (its ResourceSlice goes with it: owned by the Node)."""
        _Api(self.server, self.base / "pki").delete(f"/api/v1/nodes/{name}")
        _save_nodes(self.base, tuple(n for n in self.nodes if n.name != name))


# --- the API, without a Kubernetes client ---------------------------------------------------


class _Api:
    """The few API calls the cluster's setup needs, as the admin."""

    def __init__(self, server: str, pki: Path, *, timeout: float = 10) -> None:
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.http = httpx.Client(base_url=server, verify=ctx, timeout=timeout)

    def get(self, path: str) -> Obj | None:
        r = self.http.get(path)
        if r.status_code == 404:
            return None
        self._check(r, "GET", path)
        out: Obj = r.json()
        return out

    def create(self, path: str, obj: Obj) -> Obj:
        r = self.http.post(path, json=obj)
        self._check(r, "POST", path)
        out: Obj = r.json()
        return out

    def delete(self, path: str) -> None:
        r = self.http.delete(path)
        if r.status_code != 404:
            self._check(r, "DELETE", path)

    @staticmethod
    def _check(r: httpx.Response, verb: str, path: str) -> None:
        if r.status_code >= 300:
            raise EngineError(f"the test cluster's API server refused {verb} {path}: {r.status_code} {r.text[:300]}")


def _create_node(api: _Api, node: KwokNode) -> None:
    created = api.create("/api/v1/nodes", node_object(node))
    if node.dra_gpus:
        api.create("/apis/resource.k8s.io/v1/resourceslices", resource_slice(node, created["metadata"]["uid"]))


def _nodes_ready(api: _Api, names: Sequence[str]) -> bool:
    """Every node named is Ready and has lost the not-ready taint new nodes start with."""
    listed = api.get("/api/v1/nodes") or {}
    by_name = {n["metadata"]["name"]: n for n in listed.get("items", [])}
    for name in names:
        node = by_name.get(name)
        if node is None:
            return False
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        taints = {t["key"] for t in node.get("spec", {}).get("taints", [])}
        if conditions.get("Ready") != "True" or taints & {
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        }:
            return False
    return True


# --- start and stop ------------------------------------------------------------------------


def start_cluster(
    base: Path, nodes: Sequence[KwokNode] = DEFAULT_NODES, *, timeout: float = 240, scheduler_qps: int = 0
) -> LocalKube:
    """Start a fresh cluster under ``base`` (one running there is stopped first) with ``nodes``;
    returns once every component is healthy and every node Ready.  ``scheduler_qps``: the
    scheduler's client limit (default: its own, 50 requests/s)."""
    base = Path(base).resolve()
    binp = kube_bin()
    stop_cluster(base)
    for d in ("etcd", "kwok", "pki", "log", "run"):
        shutil.rmtree(base / d, ignore_errors=True)
        (base / d).mkdir(parents=True)
    ports = {p: free_port() for p in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    write_files(base, server, scheduler_qps)
    args = component_args(base, binp, ports)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["etcd"] = spawn(base, "etcd", args["etcd"])
        etcd = healthy(f"http://127.0.0.1:{ports['etcd']}/health")
        wait_for("etcd", etcd, procs, base, "etcd", timeout)
        procs["kube-apiserver"] = spawn(base, "kube-apiserver", args["kube-apiserver"])
        api = _Api(server, base / "pki")
        wait_for(
            "kube-apiserver /readyz",
            lambda: api.http.get("/readyz").text == "ok",
            procs,
            base,
            "kube-apiserver",
            timeout,
        )
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            procs[name] = spawn(base, name, args[name])
        for obj, path in (
            (DEVICE_CLASS, "/apis/resource.k8s.io/v1/deviceclasses"),
            (RESTRICTED_RBAC[0], "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles"),
            (RESTRICTED_RBAC[1], "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings"),
        ):
            api.create(path, obj)
        for node in nodes:
            _create_node(api, node)
        _save_nodes(base, tuple(nodes))
        for name, port in (("kube-controller-manager", "controller-manager"), ("kube-scheduler", "scheduler")):
            wait_for(name, healthy(f"https://127.0.0.1:{ports[port]}/healthz"), procs, base, name, timeout)
        wait_for("kwok", healthy(f"https://127.0.0.1:{ports['kwok']}/healthz"), procs, base, "kwok", timeout)
        names = [n.name for n in nodes]
        wait_for("every node Ready", lambda: _nodes_ready(api, names), procs, base, "kwok", timeout)
        sa = "/api/v1/namespaces/default/serviceaccounts/default"  # pods in "default" need it
        wait_for(
            "service account default", lambda: api.get(sa) is not None, procs, base, "kube-controller-manager", timeout
        )
    except BaseException:
        stop_cluster(base)
        raise
    (base / "cluster.json").write_text(json.dumps({"server": server, "ports": ports}))
    return LocalKube(base, server)


def _save_nodes(base: Path, nodes: tuple[KwokNode, ...]) -> None:
    (base / "nodes.json").write_text(json.dumps([asdict(n) for n in nodes]))


def _load_nodes(base: Path) -> tuple[KwokNode, ...]:
    try:
        raw = json.loads((base / "nodes.json").read_text())
    except (OSError, ValueError):
        return ()
    return tuple(KwokNode(**{**d, "dra_gpus": tuple(tuple(g) for g in d["dra_gpus"])}) for d in raw)


def cluster_running(base: Path) -> LocalKube | None:
    """The cluster under ``base`` if all its processes are up and the API server is ready."""
    base = Path(base).resolve()
    try:
        server = json.loads((base / "cluster.json").read_text())["server"]
    except (OSError, ValueError, KeyError):
        return None
    if any(running_pid(base / "run" / f"{p}.pid", p) is None for p in PROGRAMS):
        return None
    try:
        ready = _Api(server, base / "pki", timeout=5).http.get("/readyz").text == "ok"
    except (httpx.HTTPError, OSError):
        return None
    return LocalKube(base, server) if ready else None


def stop_cluster(base: Path, *, timeout: float = 20) -> None:
    """End the cluster's processes: only those named in its own pid files, kwok and the
    controllers first, etcd last."""
    base = Path(base).resolve()
    (base / "cluster.json").unlink(missing_ok=True)
    for group in (("kwok", "kube-scheduler", "kube-controller-manager"), ("kube-apiserver",), ("etcd",)):
        pids = [pid for p in group if (pid := running_pid(base / "run" / f"{p}.pid", p))]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pids and time.monotonic() < deadline:
            for pid in pids:
                _reap(pid)
            pids = [pid for p in group if (pid := running_pid(base / "run" / f"{p}.pid", p))]
            time.sleep(0.1)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> None:
    """Collect an ended child of this process (a test's cluster): no zombie left behind."""
    # ChildProcessError: started by another process (python -m demo.kube.cluster start): init reaps it
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# --- the command ---------------------------------------------------------------------------


def nodes_table(cluster: LocalKube) -> str:
    """The cluster's nodes as the API server lists them: capacity, GFD product, DRA devices."""
    api = _Api(cluster.server, cluster.base / "pki")
    slices = (api.get("/apis/resource.k8s.io/v1/resourceslices") or {}).get("items", [])
    dra: dict[str, list[str]] = {}
    for s in slices:
        for d in s["spec"].get("devices", []):
            dra.setdefault(s["spec"].get("nodeName", ""), []).append(d["attributes"]["productName"]["string"])
    rows = [("NAME", "READY", "CPU", "MEMORY", "nvidia.com/gpu", "GFD PRODUCT", "DRA DEVICES")]
    for n in (api.get("/api/v1/nodes") or {}).get("items", []):
        name, cap = n["metadata"]["name"], n["status"].get("capacity", {})
        ready = {c["type"]: c["status"] for c in n["status"].get("conditions", [])}.get("Ready", "?")
        devices = dra.get(name, [])
        rows.append(
            (
                name,
                ready,
                cap.get("cpu", "-"),
                cap.get("memory", "-"),
                cap.get("nvidia.com/gpu", "-"),
                n["metadata"].get("labels", {}).get("nvidia.com/gpu.product", "-"),
                f"{len(devices)}x {devices[0]}" if devices else "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.kube.cluster", description=__doc__)
    ap.add_argument("command", choices=["start", "status", "stop"])
    ap.add_argument("--base", type=Path, default=None, help="default: $HETFLOW_HOME/kube-cluster")
    args = ap.parse_args(argv)
    base = (args.base or hetflow_home() / "kube-cluster").resolve()
    try:
        if args.command == "stop":
            stop_cluster(base)
            print(f"stopped the cluster under {base}")
            return 0
        if args.command == "status":
            running = cluster_running(base)
            if running is None:
                print(f"no cluster running under {base}")
                return 1
            print(nodes_table(running))
            return 0
        t0 = time.monotonic()
        cluster = start_cluster(base)
        print(f"Kubernetes test cluster up in {time.monotonic() - t0:.1f} s: {cluster.server}")
        print(nodes_table(cluster))
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
