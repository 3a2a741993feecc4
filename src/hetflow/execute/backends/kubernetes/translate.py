"""A step attempt in Kubernetes' terms (pure functions, no client import): the Job, its pod
template, the DRA ResourceClaimTemplate of a GPU step, a gang's Indexed Job and headless
Service.  Kubernetes' vocabulary (labels, resource names, the security contexts, the Job name
rule, a gang's values, the namespace's deny-all NetworkPolicy) is ``hetflow.kube``'s, which
the exporter builds its pods from too.

The pod is the local runner's container (``engine.run_args``) in the API's words: the
submitter's UID:GID (``runAsUser``/``runAsGroup``), every capability dropped, no privilege
escalation, a read-only root with a memory-backed /tmp, the RuntimeDefault seccomp profile,
no service-account token, the command as the image's arguments, and only the mounts the
step has (inputs read-only, /out).  ``restartPolicy: Never`` and ``backoffLimit: 0``:
hetflow retries, as a new attempt with its own name, so that each attempt has one pod, one
log and one exit code.  A pod ended by a disruption (its node gone, an eviction, a
preemption: the ``DisruptionTarget`` condition) fails the Job through a ``podFailurePolicy``
rule, which ``states`` reads as a node fault rather than the step's failure.

GPUs, by what the API server serves (``gpu_api``): device-plugin resources
(``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``, ``amd.com/gpu``, ``gpu.intel.com/i915``;
``vendor: any`` asks the planned class's vendor's, ``Job.gpu_vendor``) with the plan's node
affinity; or, for whole NVIDIA GPUs, a DRA ResourceClaimTemplate (resource.k8s.io/v1) whose
CEL selectors say what the plan chose: the product name and the device memory the step needs
(attributes of NVIDIA's DRA driver, ``gpu.nvidia.com``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.kubernetes.devices import ANNOTATION_DRA, CLAIM
from hetflow.execute.backends.kubernetes.settings import KubernetesSettings
from hetflow.execute.engine import ContainerSpec
from hetflow.execute.gang.replicas import render_contract
from hetflow.kube import (
    ANNOTATION_JOB,
    DRA_DRIVER,
    HOSTNAME_LABEL,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_NETWORK,
    LABEL_RUN,
    LABEL_STEP,
    MANAGED_BY,
    container_security,
    gpu_limits,
    gpu_toleration,
    headless_service,
    indexed,
    job_name,
    label_value,
    planned_vendor,
    pod_security,
    rank_values,
)
from hetflow.spec import GANG_ENV, GpuRequest

Obj = dict[str, Any]
object_name = job_name  # an attempt's name (hf-RUN-STEP-ATTEMPT) as its Job's: ``kube.job_name``'s rule


@dataclass(frozen=True)
class Placement:
    """Where the plan sends the attempt, in the cluster's words: the nodes it may run on
    (its pinned node, or every node of its planned class); empty: anywhere that fits."""

    nodes: tuple[str, ...] = ()
    dra: bool = False  # GPUs through a ResourceClaim (the API serves resource.k8s.io/v1)


def job_labels(job: Job, settings: KubernetesSettings) -> dict[str, str]:
    return {
        **{k: label_value(v) for k, v in settings.labels.items()},
        **MANAGED_BY,
        LABEL_RUN: label_value(job.run_id),
        LABEL_STEP: label_value(job.step),
        LABEL_ATTEMPT: str(job.attempt),
        LABEL_JOB: object_name(job.name),
    }


def job_objects(job: Job, settings: KubernetesSettings, where: Placement) -> list[Obj]:
    """The objects one attempt needs, in creation order: a ResourceClaimTemplate (DRA GPUs),
    a headless Service (a gang), then the Job."""
    name = object_name(job.name)
    labels = job_labels(job, settings)
    meta = {"name": name, "labels": labels, "annotations": {ANNOTATION_JOB: job.name}}
    pod = _pod(job, settings, where, labels)
    out: list[Obj] = []
    claim = _claim_template(job, settings, meta) if where.dra and _gpu_count(job) else None
    if claim is not None:
        out.append(claim)
        pod["spec"]["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": name}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": CLAIM}]
        # what each replica's claim asks, for a gang's admission before any claim exists (``devices``)
        pod["metadata"].setdefault("annotations", {})[ANNOTATION_DRA] = f"{DRA_DRIVER}={_gpu_count(job)}"
    spec: Obj = {
        "backoffLimit": 0,
        "template": pod,
        # a disruption (node gone, eviction, preemption) fails the Job at once, with a reason
        # ``states`` tells apart from the step's own failure
        "podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
    }
    if job.gang is not None and job.ranks:
        replicas = len(job.ranks)
        # created suspended: no pod, nothing held, until ``admission`` sees room for every replica
        spec |= {**indexed(replicas), "suspend": True}
        pod["spec"]["subdomain"] = name
        _gang_env(pod["spec"]["containers"][0], job, name)
        out.append(headless_service(dict(meta), {LABEL_JOB: name}, job.gang.port))
    out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
    return out


def _gang_env(container: Obj, job: Job, name: str) -> None:
    """The launch contract with pod fields, as the export renders it: a pod is a node, its
    rank the Job's completion index, replica 0 reachable as NAME-0.NAME (the headless Service)."""
    gang = job.gang
    assert gang is not None
    if gang.launcher == "mpi":
        raise EngineError(
            f"step {job.step}: an mpi gang runs on Kubernetes through the MPI operator, not as an Indexed Job: "
            "use 'hetflow export kubernetes' (an MPIJob) or launcher: torch"
        )
    contract = render_contract(gang.launcher, rank_values(name, len(job.ranks), gang.port))
    kept = [e for e in container["env"] if e["name"] not in contract and e["name"] not in GANG_ENV]
    container["env"] = sorted([*kept, *({"name": k, **v} for k, v in contract.items())], key=lambda e: e["name"])


def _pod(job: Job, settings: KubernetesSettings, where: Placement, labels: Mapping[str, str]) -> Obj:
    spec = job.container
    uid, _, gid = spec.user.partition(":")
    volumes, mounts = _volumes(spec, settings)
    container: Obj = {
        "name": "step",
        "image": spec.image,
        "imagePullPolicy": settings.image_pull_policy,
        **({"command": list(spec.entrypoint)} if spec.entrypoint is not None else {}),
        "args": list(spec.command),
        "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
        "resources": _resources(job, where),
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    if spec.secrets:
        raise EngineError(
            f"step {job.step}: secrets are not passed to Kubernetes pods yet; put them in a Secret the pod mounts, "
            "or run the step with --backend local"
        )
    pod_spec: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": settings.stop_timeout if spec.stop_grace is None else spec.stop_grace,
        "securityContext": pod_security(int(uid), int(gid or uid)),
        "containers": [container],
        "volumes": volumes,
    }
    if where.nodes:
        term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(where.nodes)}]}
        pod_spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    if job.gpu_vendor is not None or _request(job).any:
        # the planned class has GPUs: its nodes are commonly tainted (``kube.gpu_toleration``)
        pod_spec["tolerations"] = [gpu_toleration(_request(job), job.gpu_vendor)]
    network = "allowed" if spec.network else "none"
    return {"metadata": {"labels": {**labels, LABEL_NETWORK: network}}, "spec": pod_spec}


def _volumes(spec: ContainerSpec, settings: KubernetesSettings) -> tuple[list[Obj], list[Obj]]:
    volumes: list[Obj] = [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(spec.tmpfs_size)}}]
    mounts: list[Obj] = [{"name": "tmp", "mountPath": "/tmp"}]
    for i, extra in enumerate(spec.tmpfs):
        path = extra.partition(":")[0]
        volumes.append({"name": f"tmp{i + 1}", "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": f"tmp{i + 1}", "mountPath": path})
    if settings.volume == "claim":
        assert settings.claim is not None and settings.claim_root is not None
        volumes.append({"name": "work", "persistentVolumeClaim": {"claimName": settings.claim}})
        root = PurePosixPath(settings.claim_root)
        for m in spec.mounts:
            source = PurePosixPath(m.source)
            if not source.is_relative_to(root):
                raise EngineError(
                    f"{m.source} (mounted at {m.target}) is not under kubernetes.claim_root {root}: put the run's "
                    "work directory (workdir:) and its data on the claim"
                )
            mounts.append(
                {
                    "name": "work",
                    "mountPath": m.target,
                    "subPath": str(source.relative_to(root)),
                    "readOnly": m.read_only,
                }
            )
        return volumes, mounts
    for i, m in enumerate(spec.mounts):
        volumes.append({"name": f"m{i}", "hostPath": {"path": m.source}})
        mounts.append({"name": f"m{i}", "mountPath": m.target, "readOnly": m.read_only})
    return volumes, mounts


def _resources(job: Job, where: Placement) -> Obj:
    amounts: Obj = {"cpu": _cpu(job.cpus), "memory": str(max(1, job.memory))}
    if not where.dra or not _gpu_count(job):
        amounts |= _gpu_limits(job)
    # requests == limits: the Guaranteed QoS class, as a container with --cpus/--memory gets on one machine
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _request(job: Job) -> GpuRequest:
    """The attempt's accelerator request; without one, ``gpus`` whole NVIDIA GPUs (``Job``)."""
    return job.gpu_request if job.gpu_request is not None else GpuRequest(count=job.gpus)


def _gpu_limits(job: Job) -> dict[str, str]:
    """The device-plugin limits, the planned class's vendor's for ``vendor: any`` (``kube.gpu_limits``)."""
    return gpu_limits(_request(job), job.gpu_vendor)


def _gpu_count(job: Job) -> int:
    """Whole NVIDIA GPUs the attempt asks for (what a DRA claim carries); 0 for anything else."""
    req = _request(job)
    return req.count if req.kind == "whole" and planned_vendor(req, job.gpu_vendor) == "nvidia" else 0


def cel_selectors(model: str | None, memory: int) -> list[str]:
    """CEL over NVIDIA's DRA driver's attributes: the planned product, the memory needed."""
    out = []
    if model:
        out.append(f'device.attributes["{DRA_DRIVER}"].productName == {_cel_string(model)}')
    if memory:
        out.append(f'device.capacity["{DRA_DRIVER}"].memory.compareTo(quantity("{memory}")) >= 0')
    return out


def _claim_template(job: Job, settings: KubernetesSettings, meta: Obj) -> Obj:
    memory = job.gpu_request.memory if job.gpu_request is not None else 0
    exactly: Obj = {"deviceClassName": settings.device_class, "allocationMode": "ExactCount", "count": _gpu_count(job)}
    selectors = cel_selectors(job.gpu_model, memory)
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": dict(meta),
        "spec": {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}},
    }


def _cel_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cpu(cpus: float) -> str:
    return f"{max(1, math.ceil(cpus * 1000))}m"


def _quantity(size: str) -> str:
    """podman's tmpfs size (256m, 1g) as a Kubernetes quantity (256Mi, 1Gi)."""
    m = re.fullmatch(r"(\d+)([kmg]?)", size.strip().lower())
    if m is None:
        return size
    return m.group(1) + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m.group(2)]


def allowed_nodes(pod_spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The hostnames a pod's required node affinity allows (``_pod`` writes one term); empty: any."""
    affinity = pod_spec.get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms") or ()
    for term in terms:
        for e in term.get("matchExpressions") or ():
            if e.get("key") == HOSTNAME_LABEL and e.get("operator") == "In":
                return tuple(e.get("values") or ())
    return ()


def owned_by(obj: Obj, job_uid: str, job_name: str) -> Obj:
    """``obj`` owned by the Job, so that deleting the Job deletes it (the garbage collector)."""
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid, "blockOwnerDeletion": True}
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def gang_ranks(job: Job) -> Sequence[ContainerSpec]:
    return job.ranks
