"""The same step both ways: ``hetflow export kubernetes``'s manifest and the live backend's
objects (``KubernetesBackend.submit`` over a recording API, no cluster) agree on every field
Kubernetes' vocabulary (``hetflow.kube``) decides: the GPU resources and toleration, the pod
and container security contexts, the labels the NetworkPolicy selects on and the policy
itself, the Job name rule, and a gang's Indexed Job, rank variables and headless Service.

What legitimately differs is left out: the export's placement is node affinity on labels, the
live backend's the planned class's hostnames; the export's steps are released by a driver,
the live backend's attempts are named per attempt and retried by hetflow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

import pytest

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.kubernetes import KubernetesBackend, KubernetesSettings, object_name
from hetflow.execute.backends.kubernetes.api import NotFound
from hetflow.execute.engine import ContainerSpec
from hetflow.execute.gang.replicas import Quantity
from hetflow.execute.run.dispatching.dispatch import ClusterDispatch
from hetflow.execute.run.launch.launcher import engine_request
from hetflow.export.kubernetes import export_kubernetes
from hetflow.inventory import GpuSharing
from hetflow.kube import RankQuantity
from hetflow.plan.instance import MachineClass, Placement, Plan
from tests.unit.builders import load_steps
from tests.unit.builders import node as make_node

Obj = dict[str, Any]
RUN = "r1"
UID_GID = (1000, 1001)

CPU = MachineClass(name="cpu", count=1, cores=16, memory=64 << 30)
T4 = MachineClass(name="t4", count=1, cores=16, memory=64 << 30, gpus=2, gpu_model="Tesla T4")
MI250 = MachineClass(name="mi250", count=1, cores=16, memory=64 << 30, gpus=4, gpu_model="AMD Instinct MI250X",
                     gpu_vendor="amd")  # fmt: skip
SLICED = MachineClass(name="sliced", count=1, cores=16, memory=64 << 30, gpus=1, gpu_model="Tesla T4",
                      gpu_sharing=GpuSharing(mode="time-slicing", replicas=4))  # fmt: skip


@dataclass(frozen=True)
class Case:
    body: str  # the step's YAML under ``s:``, minus its image
    cls: MachineClass
    share: float = 0.0
    name: str = "s"


CASES = {
    "cpu": Case("resources: {cpus: 2, memory: 1Gi}", CPU),
    "network": Case("network: true\nresources: {cpus: 1, memory: 1Gi}", CPU),
    "nvidia-whole": Case("resources: {cpus: 2, memory: 1Gi, gpus: 2}", T4),
    # vendor any: the planned class's vendor's resource, not always nvidia.com/gpu
    "any-on-amd": Case("resources: {cpus: 2, memory: 1Gi, gpus: 1, gpu_vendor: any}", MI250),
    "share": Case("resources: {cpus: 1, memory: 1Gi, gpu_share: 0.25}", SLICED, share=0.25),
    # a CPU step the plan put on a GPU class tolerates its nodes' taint too
    "cpu-on-gpu-class": Case("resources: {cpus: 2, memory: 1Gi}", T4),
    # not a DNS label as it stands, and long: one name rule
    "odd-name": Case("resources: {cpus: 1, memory: 1Gi}", CPU, name="align_reads_" + "x" * 40),
}


class _Classes:
    def __init__(self, classes: Sequence[MachineClass]) -> None:
        self._classes = list(classes)

    def classes(self) -> list[MachineClass]:
        return self._classes


class RecordingApi:
    """What ``KubernetesBackend.submit`` posts, kept; nothing exists before."""

    namespace = "ns1"

    def __init__(self) -> None:
        self.created: list[Obj] = []

    def ns(self, resource: str, group: str = "") -> str:
        return f"/{group}/namespaces/{self.namespace}/{resource}"

    def create(self, path: str, body: Obj) -> Obj:
        self.created.append(body)
        return {"metadata": {"uid": "u1", "name": body["metadata"]["name"]}}

    def get(self, path: str, **params: Any) -> Obj:
        raise NotFound(path)


def both_ways(case: Case, gang: str = "") -> tuple[list[Obj], list[Obj]]:
    """(the export's objects, the live backend's) for one step placed on ``case.cls``."""
    body = f"{case.name}:\n  image: img\n  command: [run]\n  " + case.body.replace("\n", "\n  ") + gang
    workflow = load_steps(body).workflow
    step = workflow.steps[case.name]
    replicas = step.gang.replicas if step.gang is not None else 0
    ranks = tuple((f"{case.cls.name}-0", (0,)) for _ in range(replicas))
    placed = Placement(case.name, "default", f"{case.cls.name}-0", case.cls.name, 0.0, 10.0, 1.0, 1 << 30,
                       (0,) if case.cls.gpus else (), ranks=ranks, share=case.share)  # fmt: skip
    plan = Plan({case.name: placed}, makespan=10.0, cost=0.0, algorithm="test")
    uid, gid = UID_GID
    exported = export_kubernetes(
        workflow,
        _Classes([case.cls]),
        plan,
        run_id=RUN,
        namespace="ns1",
        uid=uid,
        gid=gid,  # type: ignore[arg-type]
    )
    # the live side: what the runner tells a cluster backend (``ClusterDispatch.where``, ``Launcher._job``)
    where = ClusterDispatch(make_node(), {case.name: placed}, [case.cls]).where(case.name)
    variant = step.resolved_variants()["default"]
    name = f"hf-{RUN}-{case.name}-1"
    spec = ContainerSpec(name=name, image="img", command=("run",), user=f"{uid}:{gid}", labels={}, env={},
                         network=step.network)  # fmt: skip
    job = Job(name=name, run_id=RUN, step=case.name, attempt=1, container=spec, cpus=variant.resources.cpus,
              memory=variant.resources.memory, gpus=variant.resources.gpus, gpu_model=where.gpu_model,
              gpu_vendor=where.gpu_vendor, node=where.pinned_node, node_class=where.node_class,
              ranks=(spec,) * replicas, gang=step.gang, gpu_request=engine_request(variant, where),
              gpu_sharing=where.gpu_sharing)  # fmt: skip
    api = RecordingApi()
    backend = KubernetesBackend(KubernetesSettings(gpu_api="device-plugin"), api=api)  # type: ignore[arg-type]
    backend.submit(job)
    backend.created([job.name])  # its creates run on the backend's client threads
    return exported, api.created


def step_job(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["kind"] == "Job" and o["metadata"]["labels"].get("hetflow.role") != "driver")


def pod_of(job: Obj) -> Obj:
    spec: Obj = job["spec"]["template"]["spec"]
    return spec


def step_container(job: Obj) -> Obj:
    c: Obj = pod_of(job)["containers"][0]
    return c


def gpu_limits(job: Obj) -> dict[str, str]:
    return {k: v for k, v in step_container(job)["resources"]["limits"].items() if k not in ("cpu", "memory")}


SHARED_LABELS = ("app.kubernetes.io/managed-by", "hetflow.run", "hetflow.step", "hetflow.network")


def shared_fields(objects: list[Obj]) -> dict[str, Any]:
    """Every field both writers take from ``hetflow.kube``, of one step's objects."""
    job = step_job(objects)
    labels = job["spec"]["template"]["metadata"]["labels"]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy" and not o["metadata"]["name"].endswith("-gang")]
    return {
        "gpu limits": gpu_limits(job),
        "tolerations": pod_of(job).get("tolerations", []),
        "pod security": pod_of(job)["securityContext"],
        "container security": step_container(job)["securityContext"],
        "pod labels": {k: labels.get(k) for k in SHARED_LABELS},
        "network policy": [(p["metadata"]["name"], p["metadata"]["labels"], p["spec"]) for p in policies],
    }


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_step_is_the_same_pod_exported_and_live(case: Case) -> None:
    exported, live = both_ways(case)
    assert shared_fields(exported) == shared_fields(live)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_job_names_follow_one_rule(case: Case) -> None:
    """The export names a step's Job as the live backend names an attempt's (its name, hf-RUN-STEP-N)."""
    exported, _ = both_ways(case)
    assert step_job(exported)["metadata"]["name"] == object_name(f"hf-{RUN}-{case.name}")


GANG = "\n  gang: {replicas: 3, launcher: torch, port: 29400}"


def gang_fields(objects: list[Obj]) -> dict[str, Any]:
    """A gang's shape, with its Job's own name written as JOB."""
    job = step_job(objects)
    name = job["metadata"]["name"]
    spec = job["spec"]
    service = next(o for o in objects if o["kind"] == "Service")
    env = {e["name"]: e for e in step_container(job)["env"] if e["name"] in ("RANK", "WORLD_SIZE", "MASTER_ADDR")}
    return {
        "indexed": {k: spec.get(k) for k in ("completionMode", "completions", "parallelism")},
        "subdomain": pod_of(job)["subdomain"].replace(name, "JOB"),
        "env": {k: str(v).replace(name, "JOB") for k, v in env.items()},
        "service": (
            service["metadata"]["name"].replace(name, "JOB"),
            {k: v for k, v in service["spec"].items() if k != "selector"},
        ),
    }


def test_a_gang_is_the_same_indexed_job_exported_and_live() -> None:
    exported, live = both_ways(CASES["nvidia-whole"], gang=GANG)
    assert gang_fields(exported) == gang_fields(live)


def test_the_vocabularys_rank_quantities_are_the_launch_contracts() -> None:
    """``kube.RankQuantity`` spells ``execute.gang.replicas.Quantity`` again (kube sits below
    execute): the two literals must name the same quantities."""
    assert get_args(RankQuantity) == get_args(Quantity)
