"""`hetflow run --backend kubernetes` against a real control plane (kube-apiserver, the Job
controller, the real kube-scheduler; tests/integration/kube_fixture.py) whose nodes are kwok's:
simulated nodes with device-plugin GPUs (GFD labels) and DRA GPUs (a ResourceSlice).  kwok
starts no container: a pod's outcome is the test convention's stage, chosen by the step's name
(demo/kube/objects.py: default succeeds, ``fails`` exits 3, ``flaky`` fails its first attempt,
``oom`` is OOMKilled, ``holds`` runs until deleted), so these workflows declare no outputs.
Real containers through Kubernetes: tests/integration/test_kube_kubelet.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from demo.kube.cluster import LocalKube
from kubernetes import client, watch

from tests.integration.hfkit import BUSYBOX, Hetflow, free_port, write
from tests.integration.kube_fixture import api_client, kube_cluster, wait_for  # noqa: F401  (module fixture)

NAMESPACE = "default"


def kube_config(tmp_path: Path, cluster: LocalKube, kubeconfig: Path | None = None, **kube: object) -> str:
    settings = {
        "backend": "kubernetes",
        "workdir": str(tmp_path / "work"),
        "kubernetes": {"kubeconfig": str(kubeconfig or cluster.kubeconfig), "namespace": NAMESPACE,
                       "stop_timeout": 1, **kube},
    }  # fmt: skip
    return write(tmp_path, yaml.safe_dump(settings), "config.yaml")


def step(command: str = "true", **extra: Any) -> dict[str, Any]:
    return {"image": BUSYBOX, "command": ["sh", "-c", command], "resources": {"cpus": 1, "memory": "256Mi"}} | extra


def workflow(name: str, steps: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": "hetflow/v1", "name": name, "steps": steps})


def core_api(cluster: LocalKube) -> Any:
    """The cluster's core/v1 API as its admin (kubernetes.client.CoreV1Api: untyped)."""
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def jobs(cluster: LocalKube, run_id: str) -> list[dict[str, Any]]:
    batch = client.BatchV1Api(api_client(cluster.kubeconfig))
    found = batch.list_namespaced_job(NAMESPACE, label_selector=f"hetflow.run={run_id}").to_dict()
    return list(found["items"])


@contextmanager
def pods_seen(
    cluster: LocalKube, events: list[tuple[str, str, bool]] | None = None
) -> Iterator[dict[str, dict[str, Any]]]:
    """Every hetflow pod of the namespace as last seen while the block runs (the backend deletes
    a finished attempt's Job and pods once its result is stored), by pod name.  The watch is
    fenced at both ends by a marker pod of its own (never scheduled): the block starts once the
    watch has seen the marker created, and ends once it has seen it deleted, so no pod event of
    the block is missed however late the watch's thread runs (a watch delivers in order)."""
    seen: dict[str, dict[str, Any]] = {}
    marker = f"hf-fence-{os.urandom(4).hex()}"
    marks: list[str] = []
    core = core_api(cluster)
    w = watch.Watch()

    def follow() -> None:
        stream = w.stream(core.list_namespaced_pod, NAMESPACE, label_selector="app.kubernetes.io/managed-by=hetflow")
        with contextlib.suppress(Exception):  # w.stop() ends the stream; a closed connection too
            for event in stream:
                pod = event["object"].to_dict()
                if pod["metadata"]["name"] == marker:
                    marks.append(event["type"])
                    continue
                seen[pod["metadata"]["name"]] = pod
                if events is not None:  # (step, pod, holding its resources) in the API's order
                    ended = pod["status"]["phase"] in ("Succeeded", "Failed") or event["type"] == "DELETED"
                    events.append(
                        (pod["metadata"]["labels"].get("hetflow.step", ""), pod["metadata"]["name"], not ended)
                    )

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    body = {
        "metadata": {"name": marker, "labels": {"app.kubernetes.io/managed-by": "hetflow"}},
        "spec": {"containers": [{"name": "c", "image": BUSYBOX}], "nodeSelector": {"hetflow.test/none": "x"}},
    }
    core.create_namespaced_pod(NAMESPACE, body)
    try:
        wait_for("the pod watch sees its start marker", lambda: "ADDED" in marks or None, timeout=60)
        yield seen
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespaced_pod(marker, NAMESPACE, grace_period_seconds=0)
            wait_for("the pod watch sees its end marker", lambda: "DELETED" in marks or None, timeout=60)
        w.stop()


GPU_WF = {
    "prep": step(estimate="1s"),
    "train": {
        "needs": ["prep"],
        "variants": {
            "gpu": step(resources={"cpus": 2, "memory": "1Gi", "gpus": 2}, gpu={"min_compute_capability": "9.0"},
                        estimate="2s"),
            "cpu": step(estimate="600s"),
        },
    },
    "embed": {
        "needs": ["prep"],
        "variants": {
            "gpu": step(resources={"cpus": 2, "memory": "1Gi", "gpus": 1}, gpu={"models": ["A100"]}, estimate="2s"),
            "cpu": step(estimate="600s"),
        },
    },
}  # fmt: skip


def test_nodes_lists_the_clusters_nodes_as_the_planner_sees_them(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    config = kube_config(tmp_path, kube_cluster)
    table = hf("nodes", "--backend", "kubernetes", "--config", config).stdout
    assert "kwok-a100" in table and "device plugin" in table and "DRA" in table
    cluster = json.loads(hf("nodes", "--backend", "kubernetes", "--config", config, "--json").stdout)
    types = {t["name"]: t for t in cluster["nodeTypes"]}
    assert types["k8s-8c-32g"]["count"] == 2  # the two CPU nodes, alike, are one node type
    assert types["kwok-h100-dra"]["gpus"]["model"] == "NVIDIA H100 80GB HBM3"
    assert types["kwok-a100"]["gpus"] | {"count": 4} == types["kwok-a100"]["gpus"]
    # what --json prints is a cluster file: plan reads it
    saved = write(tmp_path, json.dumps(cluster), "cluster.json")
    plan = hf("plan", write(tmp_path, workflow("gpus", GPU_WF)), "--cluster", saved, "--json").stdout
    assert "kwok-h100-dra" in plan


def test_a_cpu_and_gpu_workflow_runs_where_the_plan_put_it_through_the_real_scheduler(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    config = kube_config(tmp_path, kube_cluster)
    marker = f"log line {tmp_path.name}"  # kwok serves this file as every pod's log, through the API server
    with kube_cluster.logs_file.open("a") as f:
        f.write(f"2026-11-27T08:00:00.000000000Z stdout F {marker}\n")
    with pods_seen(kube_cluster) as seen:
        hf("run", "-q", "--config", config, write(tmp_path, workflow("gpus", GPU_WF)), timeout=180)
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert data["state"] == "succeeded", data
    steps = {s["step"]: s for s in data["steps"]}
    assert (steps["train"]["variant"], steps["train"]["node"]) == ("gpu", "kwok-h100-dra")
    assert (steps["embed"]["variant"], steps["embed"]["node"]) == ("gpu", "kwok-a100")
    bound = {
        p["metadata"]["labels"]["hetflow.step"]: p
        for p in seen.values()
        if p["metadata"]["labels"]["hetflow.run"] == run_id
    }
    assert not jobs(kube_cluster, run_id)  # released: each Job deleted once its result was stored
    # the real kube-scheduler bound each pod to the planned node: DRA claim and device plugin
    assert bound["train"]["spec"]["node_name"] == "kwok-h100-dra"
    assert bound["train"]["spec"]["resource_claims"][0]["name"] == "gpus"
    assert bound["embed"]["spec"]["node_name"] == "kwok-a100"
    limits = bound["embed"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    # each pod's log was followed through the API into hetflow's log of the step
    assert marker in hf("logs", run_id, "prep").stdout
    # issue 37: GPUS are what each pod got: the DRA devices the scheduler allocated to train's
    # claim (their index attribute in the ResourceSlice), embed's device-plugin GPU (the API
    # names no device: its count); a finished step's reason is no longer a wait
    assert sorted(steps["train"]["gpus"]) == [0, 1], steps["train"]
    assert steps["embed"]["gpus"] == ["1x nvidia.com/gpu"], steps["embed"]
    assert steps["prep"]["gpus"] == [], steps["prep"]
    assert not [s["reason"] for s in steps.values() if s["reason"].startswith("pending:")], steps


def test_a_failure_is_retried_and_oom_and_exit_codes_are_reported(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    config = kube_config(tmp_path, kube_cluster)
    wf = {"flaky": step(retries=1), "fails": step(), "oom": step()}
    proc = hf("run", "-q", "--config", config, write(tmp_path, workflow("outcomes", wf)), check=False, timeout=180)
    assert proc.returncode == 1, proc.stderr
    steps = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}
    assert steps["flaky"]["state"] == "succeeded" and steps["flaky"]["attempts"] == 2
    assert steps["fails"]["state"] == "failed" and steps["fails"]["exit_code"] == 3
    assert steps["oom"]["state"] == "failed" and steps["oom"]["exit_code"] == 137
    assert "memory" in json.dumps(steps["oom"]).lower()


def test_stop_deletes_the_jobs_and_resume_adopts_what_a_killed_executor_left(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    config = kube_config(tmp_path, kube_cluster)
    wf = write(tmp_path, workflow("holding", {"holds": step()}))
    run_id = hf("run", "-d", "--config", config, wf).stdout.strip().split()[-1]
    wait_for("the pod runs", lambda: hf.step_states(run_id).get("holds") == "running", timeout=120)
    first = [j["metadata"]["uid"] for j in jobs(kube_cluster, run_id)]
    assert len(first) == 1
    executor = hf.show(run_id)["pid"]
    os.kill(executor, signal.SIGKILL)
    hf("resume", "-d", run_id)
    wait_for("the resumed executor holds the run", lambda: hf.show(run_id).get("pid") not in (None, executor))
    # adopted: the same Job, not a second attempt
    assert [j["metadata"]["uid"] for j in jobs(kube_cluster, run_id)] == first
    hf("stop", run_id, timeout=120)
    wait_for("the run's Jobs are deleted", lambda: not jobs(kube_cluster, run_id) or None, timeout=60)
    assert hf.show(run_id)["state"] in ("stopped", "failed")


def test_bad_access_is_a_clear_error_naming_what_to_fix(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    wf = write(tmp_path, workflow("denied", {"a": step()}))
    restricted = kube_config(tmp_path, kube_cluster, kube_cluster.restricted_kubeconfig)
    proc = hf("run", "-q", "--config", restricted, wf, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "RBAC" in proc.stderr and "jobs" in proc.stderr, proc.stderr
    missing = kube_config(tmp_path, kube_cluster, namespace="no-such-ns")
    proc = hf("run", "-q", "--config", missing, wf, check=False)
    assert proc.returncode == 2 and "namespace 'no-such-ns' does not exist" in proc.stderr, proc.stderr
    closed = tmp_path / "closed-kubeconfig"
    server = yaml.safe_load(kube_cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    closed.write_text(kube_cluster.kubeconfig.read_text().replace(server, f"https://127.0.0.1:{free_port()}"))
    proc = hf("run", "-q", "--config", kube_config(tmp_path, kube_cluster, closed), wf, check=False)
    assert proc.returncode == 2 and "cannot reach the Kubernetes API server at https://127.0.0.1:" in proc.stderr
    gone = tmp_path / "nowhere.yaml"
    proc = hf("run", "-q", "--config", kube_config(tmp_path, kube_cluster, gone), wf, check=False)
    assert proc.returncode == 2 and f"no kubeconfig at {gone}" in proc.stderr, proc.stderr


def gang_step(replicas: int) -> dict[str, Any]:
    resources = {"cpus": 1, "memory": "256Mi", "gpus": 1}
    return step(resources=resources, gpu={"models": ["A100"]}, gang={"replicas": replicas, "launcher": "torch"})


def test_gangs_are_admitted_all_or_nothing_so_two_never_hold_part_of_the_gpus(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    """Two gangs of 3 replicas, each replica one of the A100 node's 4 GPUs: as plain Jobs the
    scheduler could bind 2 + 2 and both would wait forever; admitted whole, one runs at a time."""
    config = kube_config(tmp_path, kube_cluster)
    wf = write(tmp_path, workflow("gangs", {"ga": gang_step(3), "gb": gang_step(3)}))
    events: list[tuple[str, str, bool]] = []  # (step, pod, live) in the API's order
    with pods_seen(kube_cluster, events) as seen:
        hf("run", "-q", "--config", config, wf, timeout=180)
    run_id = hf.last_run()
    assert hf.show(run_id)["state"] == "succeeded"
    mine = [p for p in seen.values() if p["metadata"]["labels"]["hetflow.run"] == run_id]
    assert sorted(p["metadata"]["labels"]["hetflow.step"] for p in mine) == ["ga"] * 3 + ["gb"] * 3
    env = {e["name"]: e for e in mine[0]["spec"]["containers"][0]["env"]}
    assert env["WORLD_SIZE"]["value"] == "3" and "job-completion-index" in str(env["RANK"]["value_from"])
    # admitted whole, a gang's pods exist only once all its replicas fit: the pods alive at once
    # never ask for more than the node's 4 GPUs (as plain Jobs, 3 + 3 would be made at once and
    # 2 + 2 could bind). Once two of the first gang's replicas have ended, the second gang fits
    # beside the third, so the two may overlap: that is room, not a partial gang.
    live: dict[str, set[str]] = {"ga": set(), "gb": set()}
    for step_name, pod_name, alive in events:
        if step_name in live:
            (live[step_name].add if alive else live[step_name].discard)(pod_name)
            assert len(live["ga"]) + len(live["gb"]) <= 4, f"pods asking for more than the node's GPUs: {live}"


def dra_gang_step(replicas: int) -> dict[str, Any]:
    resources = {"cpus": 1, "memory": "256Mi", "gpus": 1}
    return step(resources=resources, gpu={"models": ["H100"]}, gang={"replicas": replicas, "launcher": "torch"})


def test_gangs_on_dra_gpus_are_admitted_all_or_nothing_too(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    """issue 37: two gangs of 2 replicas, each replica one of the H100 node's 2 DRA GPUs (a
    ResourceClaim each): admission counts the ResourceSlices' devices and the claims' allocations,
    so one gang runs at a time; counting CPU and memory only, both were let go (4 pods for 2 GPUs)."""
    config = kube_config(tmp_path, kube_cluster)
    wf = write(tmp_path, workflow("dragangs", {"da": dra_gang_step(2), "db": dra_gang_step(2)}))
    events: list[tuple[str, str, bool]] = []  # (step, pod, live) in the API's order
    with pods_seen(kube_cluster, events) as seen:
        hf("run", "-q", "--config", config, wf, timeout=240)
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert data["state"] == "succeeded", data
    mine = [p for p in seen.values() if p["metadata"]["labels"]["hetflow.run"] == run_id]
    assert sorted(p["metadata"]["labels"]["hetflow.step"] for p in mine) == ["da"] * 2 + ["db"] * 2
    assert {p["spec"]["node_name"] for p in mine} == {"kwok-h100-dra"}
    live: dict[str, set[str]] = {"da": set(), "db": set()}
    for step_name, pod_name, alive in events:
        if step_name in live:
            (live[step_name].add if alive else live[step_name].discard)(pod_name)
            assert len(live["da"]) + len(live["db"]) <= 2, f"pods asking for more than the node's 2 DRA GPUs: {live}"


def test_a_quota_keeps_a_step_queued_with_kubernetes_reason(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    core = core_api(kube_cluster)
    ns = "hf-quota"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_resource_quota(ns, {"metadata": {"name": "none"}, "spec": {"hard": {"pods": "0"}}})
    config = kube_config(tmp_path, kube_cluster, namespace=ns)
    run_id = hf("run", "-d", "--config", config, write(tmp_path, workflow("quota", {"a": step()}))).stdout.split()[-1]

    def queued_reason() -> str | None:
        s = hf.show(run_id)["steps"][0]
        return str(s.get("reason") or "") if s.get("queued") else None

    reason = wait_for("the step queued with the quota's reason", lambda: "exceeded quota" in (queued_reason() or ""))
    assert reason
    core.delete_namespaced_resource_quota("none", ns)
    # the Job controller retries a refused pod creation with an exponential backoff: give it room
    wait_for("the run succeeds once the quota is gone", lambda: hf.show(run_id)["state"] == "succeeded", timeout=300)


def test_an_evicted_pod_is_a_node_fault_run_again_as_a_new_attempt(
    hf: Hetflow,
    tmp_path: Path,
    kube_cluster: LocalKube,  # noqa: F811
) -> None:
    core = core_api(kube_cluster)
    config = kube_config(tmp_path, kube_cluster)
    run_id = hf("run", "-d", "--config", config, write(tmp_path, workflow("evict", {"holds": step()}))).stdout.split()[
        -1
    ]
    wait_for("the pod runs", lambda: hf.step_states(run_id).get("holds") == "running", timeout=120)
    pod = next(p for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"hetflow.run={run_id}").items)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod.metadata.name}}
    core.create_namespaced_pod_eviction(pod.metadata.name, NAMESPACE, eviction)
    wait_for("a second attempt's Job", lambda: any(j["metadata"]["labels"]["hetflow.attempt"] == "2"
                                                   for j in jobs(kube_cluster, run_id)), timeout=120)  # fmt: skip
    step_row = hf.show(run_id)["steps"][0]
    assert step_row["attempts"] == 2
    hf("stop", run_id, timeout=120)
