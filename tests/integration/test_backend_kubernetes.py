"""The Kubernetes backend on a real node: the control plane of kube_fixture and one real
kubelet with containerd (demo/kube/kubelet.py), so each job is a real container of the
busybox image; the backend contract (tests/contract/parts.py) holds as for local podman,
Slurm and Ray: the base, gang and node-failure parts (a node fails tainted NoExecute, as the
node controller taints a NotReady one, and the pods are evicted; the taint is removed after
the test).  Then a workflow with data: on a hostPath work directory, on a PersistentVolumeClaim
(``claim``/``claim_root``), and run twice (the second run all from hetflow's cache)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from kubernetes import client, watch

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.kubernetes import KubernetesBackend
from tests.contract.backend_contract import BackendContract, OrderingContract, job, new_run_id
from tests.contract.gang_contract import GangContract
from tests.contract.node_contract import NodeFailureContract, NodeFault
from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.kube_fixture import REAL_NODE, RealKube, api_client, kube_real, wait_for

__all__ = ["kube_real"]  # the module-scoped cluster fixture, used below


@pytest.fixture(scope="module")
def backend(kube_real: RealKube) -> KubernetesBackend:
    return KubernetesBackend(kube_real.settings())


@pytest.fixture
def fresh_backend(kube_real: RealKube) -> KubernetesBackend:
    return KubernetesBackend(kube_real.settings())


DOWN = {"key": "hetflow-test/node-down", "effect": "NoExecute"}


class KubeNodeFault:
    """A node tainted NoExecute (the node controller's move once a node is NotReady past its
    pods' tolerations): the taint-eviction controller evicts its pods (DisruptionTarget)."""

    def __init__(self, kube_real: RealKube) -> None:
        self.core = client.CoreV1Api(api_client(kube_real.cluster.kubeconfig))
        self.down = list[str]()

    def place(self, job: Job) -> Job:
        return job  # the one real node

    def fail(self, node: str) -> None:
        self.down.append(node)
        self.core.patch_node(node, {"spec": {"taints": [DOWN]}})

    def close(self) -> None:
        for node in self.down:
            self.core.patch_node(node, {"spec": {"taints": None}})


@pytest.fixture
def node_fault(kube_real: RealKube) -> Iterator[NodeFault]:
    fault = KubeNodeFault(kube_real)
    try:
        yield fault
    finally:
        fault.close()


class TestKubernetesBackend(BackendContract, OrderingContract, GangContract, NodeFailureContract):
    LACKS: ClassVar[Mapping[str, str]] = {
        "ordering": "Kubernetes holds no DAG order: the runner creates a step's Job once its parents ended "
        "(holds_dependencies False)",
        "test_the_next_attempt_runs_on_a_node_still_up": "the live cluster has one real node (kube_real): none is "
        "up for the next attempt while it is down (test_run_kubernetes runs an evicted step again on kwok's nodes)",
    }

    def test_capabilities(self, backend: KubernetesBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == (
            "kubernetes",
            False,
            True,
            True,
        )


DATA_WF = f"""apiVersion: hetflow/v1
name: kubedata
data:
  docs: inputs/*.txt
steps:
  count:
    image: {BUSYBOX}
    foreach: {{files: data.docs}}
    inputs: {{doc: "{{{{ item.path }}}}"}}
    command: [sh, -c, "wc -w < /in/doc/{{{{ item.name }}}} > /out/n; id -u; echo counted {{{{ item.name }}}}"]
    resources: {{cpus: 0.5, memory: 128Mi}}
    outputs: [n]
  total:
    image: {BUSYBOX}
    inputs: {{counts: count/n}}
    command: [sh, -c, "t=0; for f in /in/counts/*/n; do t=$((t + $(cat $f))); done; echo $t > /out/total"]
    resources: {{cpus: 0.5, memory: 128Mi}}
    outputs: [total]
    publish: {{to: results}}
"""


def _data_run(hf: Hetflow, folder: Path, kube: dict[str, object], workdir: Path) -> str:
    """DATA_WF and its two input files in ``folder``, run with ``kube`` as the kubernetes
    settings and ``workdir``; returns the run's id (it must succeed)."""
    (folder / "inputs").mkdir(exist_ok=True)
    for name, words in (("a.txt", "one two three"), ("b.txt", "four five")):
        (folder / "inputs" / name).write_text(words + "\n")
    settings = {"backend": "kubernetes", "workdir": str(workdir), "kubernetes": kube}
    config = write(folder, yaml.safe_dump(settings), "config.yaml")
    hf("run", "-q", "--config", config, write(folder, DATA_WF), timeout=300)
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert data["state"] == "succeeded", data
    return run_id


def _real_settings(kube_real: RealKube, **more: str) -> dict[str, object]:
    return {"kubeconfig": str(kube_real.cluster.kubeconfig), "image_pull_policy": "Never", **more}


def test_a_workflow_with_data_runs_in_real_containers_and_publishes(
    hf: Hetflow, tmp_path: Path, kube_real: RealKube
) -> None:
    """Host files fanned out, gathered and published, every step a real pod on the real node;
    the work directory is a hostPath at the same path (one node: no shared file system needed)."""
    run_id = _data_run(hf, tmp_path, _real_settings(kube_real), tmp_path / "work")
    assert {s["node"] for s in hf.show(run_id)["steps"]} == {REAL_NODE}
    assert (tmp_path / "results" / "total").read_text().strip() == "5"
    log = hf("logs", run_id, "count").stdout
    assert "counted a.txt" in log and "counted b.txt" in log
    assert f"] | {os.getuid()}\n" in log and log.startswith("count[0 ")  # the submitter's UID, as on one machine


@contextmanager
def _jobs_seen(kube_real: RealKube) -> Iterator[dict[str, Any]]:
    """Every hetflow Job created in "default" while the block runs (name -> the Job, as first
    seen): hetflow deletes each Job once its step is done, so a list after a run finds none."""
    batch = client.BatchV1Api(api_client(kube_real.cluster.kubeconfig))
    seen: dict[str, Any] = {}
    stop = threading.Event()
    version = batch.list_namespaced_job("default").metadata.resource_version

    def follow() -> None:
        """Watch from ``version`` in one-second watches (the server ends each), until stopped."""
        nonlocal version
        while not stop.is_set():
            for event in watch.Watch().stream(
                batch.list_namespaced_job, "default", resource_version=version, timeout_seconds=1
            ):
                seen.setdefault(event["object"].metadata.name, event["object"])
                version = event["object"].metadata.resource_version

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(timeout=30)


def test_the_work_directory_on_a_persistent_volume_claim(hf: Hetflow, tmp_path: Path, kube_real: RealKube) -> None:
    """``claim``/``claim_root``: every mount is a subPath of one PersistentVolumeClaim (here a
    hostPath PersistentVolume at ``root``, bound statically), so the pods see the work
    directory only through the claim; the result is published from it."""
    root = tmp_path / "claim"
    root.mkdir()
    core = client.CoreV1Api(api_client(kube_real.cluster.kubeconfig))
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "hf-work"},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                   "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(root), "type": "Directory"},
                   "claimRef": {"namespace": "default", "name": "hf-work"}}}  # fmt: skip
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "hf-work"},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": "hf-work",
                    "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    core.create_persistent_volume(pv)
    try:
        core.create_namespaced_persistent_volume_claim("default", pvc)
        wait_for(
            "claim hf-work Bound (the PV controller's static binding)",
            lambda: core.read_namespaced_persistent_volume_claim("hf-work", "default").status.phase == "Bound",
        )
        kube = _real_settings(kube_real, claim="hf-work", claim_root=str(root))
        with _jobs_seen(kube_real) as seen:
            run_id = _data_run(hf, root, kube, root / "runs")
        assert (root / "results" / "total").read_text().strip() == "5"
        assert any((root / "runs" / run_id).rglob("n")), "the steps' outputs are not on the claim"
        jobs = [j for j in seen.values() if j.spec.template.metadata.labels.get("hetflow.run") == run_id]
        volumes = [v for j in jobs for v in j.spec.template.spec.volumes]
        assert len(jobs) == 3 and {v.persistent_volume_claim.claim_name for v in volumes if v.name == "work"} == {
            "hf-work"
        }, jobs
        assert [v.name for v in volumes if v.host_path is not None] == []  # only the claim: no hostPath
        mounts = [m for j in jobs for m in j.spec.template.spec.containers[0].volume_mounts if m.name == "work"]
        assert all(m.sub_path.startswith(f"runs/{run_id}/") or m.sub_path.startswith("inputs") for m in mounts), mounts
    finally:
        core.delete_namespaced_persistent_volume_claim("hf-work", "default")
        core.delete_persistent_volume("hf-work")


def test_a_second_run_takes_every_step_from_the_cache(hf: Hetflow, tmp_path: Path, kube_real: RealKube) -> None:
    """The same workflow again: every step comes from hetflow's cache (no Job created for
    it), and its result is published again."""
    first = _data_run(hf, tmp_path, _real_settings(kube_real), tmp_path / "work")
    assert [s["attempts"] for s in hf.show(first)["steps"]] == [1, 1, 1]  # ran: nothing cached before
    (tmp_path / "results" / "total").unlink()
    with _jobs_seen(kube_real) as seen:
        second = _data_run(hf, tmp_path, _real_settings(kube_real), tmp_path / "work")
    assert second != first
    steps = hf.show(second)["steps"]
    assert {s["step"] for s in steps} == {"count.0", "count.1", "total"}, steps
    assert all(s["attempts"] == 0 and s["reason"].startswith(f"cached: from run {first}") for s in steps), steps
    assert hf("show", second).stdout.count("cached: from run") == 3
    assert [n for n, j in seen.items() if j.spec.template.metadata.labels.get("hetflow.run") == second] == []
    assert (tmp_path / "results" / "total").read_text().strip() == "5"


FAN_WF = f"""apiVersion: hetflow/v1
name: kubefan
steps:
  fan:
    image: {BUSYBOX}
    foreach: {{range: 10}}
    command: [sh, -c, "echo item {{{{ item }}}} says hello"]
    resources: {{cpus: 0.1, memory: 64Mi}}
  slow:
    image: {BUSYBOX}
    command: [sh, -c, "sleep 20; echo slow done"]
    resources: {{cpus: 0.1, memory: 64Mi}}
"""


def test_every_items_log_is_read_before_its_pod_goes_and_show_says_how_it_ended(
    hf: Hetflow, tmp_path: Path, kube_real: RealKube
) -> None:
    """issue 37: a 10-item fan-out of quick pods on the real node lost some items' logs ("the API
    server gave no log ... pods not found": a poll while a released Job's pods were going read
    the log again, over the one read) and kept "pending: ContainerCreating" as the reason of
    steps that had succeeded.  ``slow`` keeps the executor polling after the items end.  One run:
    the log race is held deterministically by the next test; this one holds it end to end."""
    settings = {"backend": "kubernetes", "workdir": str(tmp_path / "work"), "kubernetes": _real_settings(kube_real)}
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    hf("run", "-q", "--config", config, write(tmp_path, FAN_WF), timeout=300)
    run_id = hf.last_run()
    steps = [s for s in hf.show(run_id)["steps"] if s["step"] != "slow"]
    assert [s["state"] for s in steps] == ["succeeded"] * 10, steps
    lost = {}
    for i in range(10):
        log = hf("logs", run_id, f"fan.{i}").stdout
        if f"item {i} says hello" not in log:
            lost[i] = log
    assert not lost, lost
    assert not [(s["step"], s["reason"]) for s in steps if s["reason"].startswith("pending:")], steps


def test_a_released_jobs_log_stays_as_read_while_its_pod_goes(kube_real: RealKube, tmp_path: Path) -> None:
    """issue 37: the log is read before the Job is deleted, and only once: a poll while the
    released Job and its pod are going (the watch wakes the runner on every change) read it
    again over the file, from a pod whose log was gone ("the API server gave no log")."""
    backend = KubernetesBackend(kube_real.settings())
    run_id = new_run_id()
    name = f"hf-{run_id}-talk-1"
    talk = job(name, tmp_path / "out", "for i in $(seq 1 3000); do echo line $i; done", run_id=run_id)
    close = backend.watch(run_id, lambda: None)
    assert close is not None
    try:
        backend.submit(talk)
        wait_for("the pod ends", lambda: (st := backend.poll(run_id).get(name)) is not None and not st.running)
        backend.release([name])
        backend.released()  # a release reads the logs and deletes off the caller's thread (issue 43)
        log = Path(talk.container.log_path or "")
        read = (log.read_text(), log.stat().st_mtime_ns)  # read whole before the Job was deleted
        assert "line 1 " in read[0].replace("\n", " \n") and "line 3000" in read[0], read[0][-500:]
        wait_for("the Job and its pod are gone", lambda: not backend.poll(run_id) or None, timeout=120)
    finally:
        close()
    assert (log.read_text(), log.stat().st_mtime_ns) == read, log.read_text()[-500:]  # and never again
