"""A plan as Kubernetes objects: ``hetflow export kubernetes WORKFLOW --cluster FILE``.

``export_kubernetes`` renders one planned run as plain objects of the core API, which a
user creates with ``kubectl create -f``; ``to_yaml`` writes them as one YAML stream
(same input, same bytes); ``validate_objects`` checks them against the Kubernetes
OpenAPI schema as the official Python client models it (``pip install kubernetes``).

What is created, in this order::

    PersistentVolumeClaim  workdir_claim (ReadWriteMany), unless claim_size=None
    ServiceAccount, Role, RoleBinding  hf-RUN: the driver may list the run's Jobs
                           and patch (un-suspend) exactly those Jobs, nothing else
    NetworkPolicy          hf-RUN-no-network: no ingress or egress for steps without
                           ``network: true`` (needs a CNI that enforces policies)
    Job hf-RUN-STEP        one per planned step, created suspended
    Job hf-RUN             the driver: releases each step when its parents succeeded

The DAG: a Job per step, released by a driver Job
------------------------------------------------
Kubernetes Jobs have no dependencies, so something must order them.  Three ways were
weighed:

* An init container per step that waits for its parents' markers on the shared volume
  needs nothing but core objects, but every step's pod is scheduled at once and then
  *holds* its CPUs, memory and GPUs while it waits.  On a busy cluster that wastes the
  GPUs the plan meant for other steps, and it can deadlock: waiting children fill the
  nodes their parent needs (likely with the wide DAGs ``hetflow import wfcommons``
  makes).  A failed parent also leaves its children waiting forever.
* One Argo Workflow is the natural DAG (no pod before its turn, retries, a UI), but
  needs Argo installed, and Argo's ``wait`` sidecar talks to the API server, so a step
  without ``network: true`` could not be cut off from the network.
* Chosen: every step Job is created with ``suspend: true`` (no pod, nothing held) and a
  small driver Job un-suspends each one when all its parents have succeeded.  Only
  core objects, no controller to install; step pods get no service-account token and
  keep an exact deny-all NetworkPolicy; a failed step stops its descendants (they stay
  suspended, holding nothing) while independent branches finish.  The cost: the user
  must be allowed to create a Role and RoleBinding in the namespace, and the driver
  needs an image with ``sh`` and ``kubectl`` (``tools_image``).

The driver also does what the local runner does after a step (``runner`` and
``outputs.accept_outputs``): it checks the declared outputs exist, then renames the
attempt's directory into place, so a child only ever reads accepted outputs.  Its state
is the Jobs' status plus marker files, so a restarted driver pod picks up where it was.

On the shared volume (``paths.RunPaths`` under ``runs/RUN`` on the claim)::

    runs/RUN/attempts/STEP/1/out   a step's /out while it runs (emptied per pod)
    runs/RUN/steps/STEP/out/       accepted outputs, mounted read-only into children
    runs/RUN/steps/STEP/done       the driver's marker: accepted

Each step pod runs as the local runner's container does (``container.build_spec``,
``engine.run_args``): the submitter's UID:GID, all capabilities dropped, no privilege
escalation, a read-only root with a memory-backed /tmp, HOME=/tmp, the user's
environment minus the reserved keys, inputs read-only at /in/NAME/FILE, outputs at
/out, no network unless asked, and the command as the image's arguments.  Placement
follows the plan's node class: its GPU product and the step's GPU constraints as NVIDIA
GPU Feature Discovery labels, its CPU micro-architecture as node-feature-discovery
labels, its ``labels`` from the cluster file, and the step's ``node_selector``.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import math
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import archspec.cpu
import yaml

from hetflow.errors import HetflowError
from hetflow.execute.container import container_env, input_mounts
from hetflow.execute.engine import LABEL_RUN, LABEL_STEP
from hetflow.execute.paths import RunPaths
from hetflow.plan.build import DEFAULT_ESTIMATE, FILTERS
from hetflow.plan.cluster import Cluster
from hetflow.plan.images import Resolver, class_node
from hetflow.plan.instance import MachineClass, Placement, Plan
from hetflow.spec.checks import edges_of
from hetflow.spec.dag import topo_order
from hetflow.spec.models import Step, Variant, Workflow

Obj = dict[str, Any]
ImageFor = Callable[[str, str], str]  # (image as written, node class) -> reference to run

LABEL_WORKFLOW = "hetflow.workflow"
LABEL_VARIANT = "hetflow.variant"
LABEL_CLASS = "hetflow.node-class"
LABEL_ROLE = "hetflow.role"  # step | driver
LABEL_NETWORK = "hetflow.network"  # none | allowed: what the NetworkPolicy selects on
ANNOTATION_PLAN = "hetflow.plan"
ANNOTATION_REASONS = "hetflow.reasons"
ANNOTATION_IMAGE = "hetflow.image"  # the image as written, when it runs pinned
MANAGED_BY = {"app.kubernetes.io/managed-by": "hetflow"}

# The NVIDIA device plugin's resource, and GPU Feature Discovery's labels (GFD README,
# "Generated Labels"): the product name with blanks as dashes, memory in MiB, and the
# compute capability split in two integers.  Under time-slicing with renameByDefault
# the product gets a "-SHARED" suffix, so both spellings are accepted.
GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"
ARCH_LABEL = "kubernetes.io/arch"  # well-known label, GOARCH spelling
NFD_CPUID = "feature.node.kubernetes.io/cpu-cpuid."

# archspec feature (Linux /proc/cpuinfo spelling) -> the cpuid flag name NFD publishes
# (klauspost/cpuid spelling; NFD docs, "Feature labels", X86 and Arm64 CPUID flags).
# Only vector extensions, which is what a -march build breaks on.  The x86-64-v2 flags
# (SSE4.2, POPCNT, ...) and BMI1/2, F16C, LZCNT are on NFD's default attributeBlacklist
# (source/cpu/cpu.go) and never appear as labels, so requiring them would match no node.
# NFD spells a flag as the /proc/cpuinfo name without '_', upper case, except FMA3.
NFD_FLAGS: Mapping[str, str] = {
    **{
        f: f.replace("_", "").upper()
        for f in (
            "avx", "avx2", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512ifma",
            "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bf16", "avx512_bitalg",
            "avx512_vpopcntdq", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "sve",
        )
    },
    "fma": "FMA3",
}  # fmt: skip
GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "riscv64": "riscv64", "s390x": "s390x"}

# Needs POSIX sh, coreutils and kubectl (registry.k8s.io/kubectl has no shell).
DEFAULT_TOOLS_IMAGE = "docker.io/alpine/k8s:1.33.4"
WORK_MOUNT = "/work"
TMP_SIZE = "256Mi"  # as the local runner's tmpfs (engine.ContainerSpec.tmpfs_size)
STAGING_ATTEMPT = 1  # Job retries reuse one staging directory; each pod empties it first
DRIVER_FAILED_EXIT = 3  # the driver's "a step failed" exit: fails its Job at once
_RUN_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?\Z")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][A-Za-z0-9_.-]{0,61})?[A-Za-z0-9])?\Z")
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
# resource.Quantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go)
_QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?\Z")


# --- export -----------------------------------------------------------------------------


def export_kubernetes(
    workflow: Workflow,
    cluster: Cluster,
    plan: Plan,
    *,
    run_id: str,
    namespace: str | None = None,
    uid: int,
    gid: int,
    workdir_claim: str = "hetflow-work",
    image_for: ImageFor | None = None,
    claim_size: str | None = "10Gi",
    storage_class: str | None = None,
    tools_image: str = DEFAULT_TOOLS_IMAGE,
    poll_seconds: int = 10,
) -> list[Obj]:
    """The objects that run ``plan`` (of ``workflow`` on ``cluster``) as run ``run_id``.

    ``image_for(image, node_class)`` gives the reference to run for a step's image on its
    planned class (a digest-pinned build, see ``pinned_image_for``); without it images
    run as written.  ``namespace=None`` leaves objects namespace-less (kubectl's current
    namespace).  ``claim_size=None`` leaves the claim out: it must then exist, be
    ReadWriteMany, and be writable by ``uid``:``gid``.  Raises ``ValueError`` saying
    what to change when the run ID, a name or the plan does not fit."""
    if not _RUN_ID_RE.match(run_id):
        raise ValueError(
            f"run ID {run_id!r} cannot name Kubernetes objects; use 1-20 lowercase letters, digits "
            "or '-', starting and ending alphanumeric (hetflow's own IDs are 8 hex digits)"
        )
    for what, name in (("namespace", namespace), ("workdir claim", workdir_claim)):
        if name is not None and not _DNS_LABEL_RE.match(name):
            raise ValueError(f"{what} {name!r} is not a valid Kubernetes name; use lowercase letters, digits and '-'")
    if uid < 0 or gid < 0:
        raise ValueError(f"uid and gid must be 0 or more, got {uid}:{gid}")
    if claim_size is not None and not _QUANTITY_RE.match(claim_size):
        raise ValueError(f"claim size {claim_size!r} is not a Kubernetes quantity; write e.g. 10Gi or 1Ti")
    if poll_seconds < 1:
        raise ValueError(f"poll_seconds must be at least 1, got {poll_seconds}")
    classes = {c.name: c for c in cluster.classes()}
    edges = edges_of(workflow)
    order = [s for s in topo_order(edges) if s in plan.placements]
    _check_plan(workflow, plan, classes)
    ctx = _Context(workflow, run_id, namespace, uid, gid, workdir_claim, tools_image)
    jobs = {name: _job_name(run_id, name) for name in order}
    step_jobs = [
        _step_job(ctx, name, workflow.steps[name], plan.placements[name], classes, plan, jobs[name], image_for)
        for name in order
    ]
    skipped = sorted(set(workflow.steps) - set(plan.placements))
    objects: list[Obj] = []
    if claim_size is not None:
        objects.append(_claim(ctx, claim_size, storage_class))
    objects += _driver_access(ctx, sorted(jobs.values()))
    if any(not workflow.steps[name].network for name in order):
        objects.append(_network_policy(ctx))
    objects += step_jobs
    parents = {name: [p for p in edges[name] if p in jobs] for name in order}
    objects.append(_driver_job(ctx, order, jobs, parents, skipped, poll_seconds))
    return objects


def pinned_image_for(classes: Iterable[MachineClass], resolver: Resolver) -> ImageFor:
    """An ``image_for`` that pins each image to the build the resolver chooses for a node
    class (``plan.images.class_node`` stands for the class, as in planning).  An image
    that cannot be read from here, or has no build for the class, runs as written: the
    planner's image check already turned down classes with no build."""
    by_name = {c.name: c for c in classes}
    cache: dict[tuple[str, str], str] = {}

    def image_for(image: str, node_class: str) -> str:
        key = (image, node_class)
        if key not in cache:
            try:
                res = resolver(image, class_node(by_name[node_class]))
            except HetflowError:
                cache[key] = image
            else:
                cache[key] = res.pinned or image
        return cache[key]

    return image_for


@dataclass(frozen=True)
class _Context:
    """What every object of one run shares."""

    workflow: Workflow
    run_id: str
    namespace: str | None
    uid: int
    gid: int
    claim: str
    tools: str

    @property
    def paths(self) -> RunPaths:
        return RunPaths(Path("runs") / self.run_id)  # relative: the claim's root is the base

    @property
    def driver(self) -> str:
        return f"hf-{self.run_id}"

    def meta(
        self, name: str, labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
    ) -> Obj:
        out: Obj = {"name": name}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        out["labels"] = {**MANAGED_BY, **(labels or {})}
        if annotations:
            out["annotations"] = dict(annotations)
        return out

    def run_labels(self, role: str) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_WORKFLOW: self.workflow.name, LABEL_ROLE: role}


def _check_plan(workflow: Workflow, plan: Plan, classes: Mapping[str, MachineClass]) -> None:
    unknown = sorted(set(plan.placements) - set(workflow.steps))
    if unknown:
        raise ValueError(f"the plan places steps the workflow does not have: {', '.join(unknown)}; plan it again")
    missing = sorted(n for n, s in workflow.steps.items() if n not in plan.placements and not s.optional)
    if missing:
        raise ValueError(f"the plan has no placement for step(s) {', '.join(missing)}; plan the workflow again")
    for name, p in plan.placements.items():
        if p.machine_class not in classes:
            raise ValueError(
                f"step {name!r} is planned on node class {p.machine_class!r}, which the cluster file does not "
                "have; plan with the same cluster file"
            )
        if p.variant not in workflow.steps[name].resolved_variants():
            raise ValueError(f"step {name!r} is planned as variant {p.variant!r}, which it does not have")


def _job_name(run_id: str, step: str) -> str:
    """``hf-RUN-STEP``; a step name that is not a DNS label as it stands ('_', too long)
    gets a hash of the original, so two names never meet."""
    plain = f"hf-{run_id}-{step}"
    if _DNS_LABEL_RE.match(plain):
        return plain
    digest = hashlib.sha256(step.encode()).hexdigest()[:6]
    room = 63 - len(f"hf-{run_id}--{digest}")
    return f"hf-{run_id}-{step.replace('_', '-')[:room].strip('-')}-{digest}"


def _label_value(text: str) -> str:
    """``text`` as a label value: other characters become '-', at most 63, alphanumeric ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


# --- one step ---------------------------------------------------------------------------


def _step_job(
    ctx: _Context,
    name: str,
    step: Step,
    p: Placement,
    classes: Mapping[str, MachineClass],
    plan: Plan,
    job: str,
    image_for: ImageFor | None,
) -> Obj:
    variant = step.resolved_variants()[p.variant]
    cls = classes[p.machine_class]
    image = image_for(variant.image, cls.name) if image_for else variant.image
    labels = {
        **ctx.run_labels("step"),
        LABEL_STEP: name,
        LABEL_VARIANT: p.variant,
        LABEL_CLASS: _label_value(cls.name),
    }
    annotations = {ANNOTATION_PLAN: _plan_note(p, plan), ANNOTATION_REASONS: _reasons(step, p, cls)}
    if image != variant.image:
        annotations[ANNOTATION_IMAGE] = variant.image
    pod: Obj = {
        "restartPolicy": "Never",  # a retry is a new pod of the Job (backoffLimit), as an attempt
        "automountServiceAccountToken": False,  # a step has no business with the API
        "enableServiceLinks": False,  # the environment is exactly the step's
        "securityContext": _pod_security(ctx),
        "initContainers": [_clean_container(ctx, name)],
        "containers": [_step_container(ctx, name, step, variant, image)],
        "volumes": _volumes(ctx),
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": _node_affinity(variant, cls)}},
    }
    if variant.node_selector:
        pod["nodeSelector"] = dict(sorted(variant.node_selector.items()))
    if cls.gpus:
        # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule (GKE, AKS, the GPU
        # operator's guides); the plan put this step on one, so it tolerates that.
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    pod_labels = {**labels, LABEL_NETWORK: "allowed" if step.network else "none"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": ctx.meta(job, labels, annotations),
        "spec": {
            "suspend": True,  # the driver releases it when its parents have succeeded
            "backoffLimit": step.retries,
            # A replacement pod starts only once the failed one is gone, so two attempts
            # never write the same staging directory (Job podReplacementPolicy, 1.29+).
            "podReplacementPolicy": "Failed",
            "template": {"metadata": {"labels": {**MANAGED_BY, **pod_labels}}, "spec": pod},
        },
    }


def _step_container(ctx: _Context, name: str, step: Step, variant: Variant, image: str) -> Obj:
    res = variant.resources
    requests = {"cpu": _cpu_quantity(res.cpus), "memory": _memory_quantity(res.memory)}
    limits = dict(requests)  # as the local runner's --cpus/--memory: a hard cap
    gpu_env: dict[str, str] = {"HETFLOW_RUN_ID": ctx.run_id, "HETFLOW_STEP": name}
    if res.gpus:
        limits[GPU_RESOURCE] = str(res.gpus)  # the device plugin sets NVIDIA_VISIBLE_DEVICES
    else:
        # As gpu.py does for CPU steps: a CUDA base image's NVIDIA_VISIBLE_DEVICES=all
        # must not hand every GPU of the node to a step that asked for none.
        gpu_env["NVIDIA_VISIBLE_DEVICES"] = "void"
    env = container_env(variant.env, gpu_env)
    mounts: list[Obj] = [{"name": "work", "mountPath": "/out", "subPath": _staging(ctx, name)}]
    mounts += [
        {"name": "work", "mountPath": m.target, "subPath": m.source, "readOnly": True}
        for m in input_mounts(step, ctx.paths)
    ]
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    out: Obj = {"name": "step", "image": image}
    if "@sha256:" in image:
        out["imagePullPolicy"] = "IfNotPresent"  # a digest never changes
    if variant.command:
        # podman run IMAGE ARGS... keeps the image's ENTRYPOINT and replaces its CMD
        # (engine.run_args): in Kubernetes terms that is `args`, not `command`.
        out["args"] = [_literal(a) for a in variant.command]
    out["env"] = [{"name": k, "value": _literal(v)} for k, v in sorted(env.items())]
    out["resources"] = {"requests": requests, "limits": limits}
    out["securityContext"] = _container_security()
    out["volumeMounts"] = mounts
    out["terminationMessagePolicy"] = "FallbackToLogsOnError"  # kubectl describe shows the log's tail
    return out


def _clean_container(ctx: _Context, name: str) -> Obj:
    """Empties the staging directory, so a retry never sees a failed attempt's files."""
    attempt_dir = posixpath.dirname(posixpath.dirname(_staging(ctx, name)))  # runs/RUN/attempts/STEP
    return {
        "name": "clean",
        "image": ctx.tools,
        "command": ["sh", "-c", f"rm -rf /attempt/{STAGING_ATTEMPT} && mkdir -p /attempt/{STAGING_ATTEMPT}/out"],
        "resources": _small_resources(),
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "work", "mountPath": "/attempt", "subPath": attempt_dir}],
    }


def _staging(ctx: _Context, name: str) -> str:
    return ctx.paths.staging(name, STAGING_ATTEMPT).as_posix()


def _literal(text: str) -> str:
    """Kubernetes expands $(VAR) in args and env values and reads $$ as $; doubling every
    '$' keeps the text as written, as podman passes it."""
    return text.replace("$", "$$")


def _pod_security(ctx: _Context) -> Obj:
    out: Obj = {"runAsUser": ctx.uid, "runAsGroup": ctx.gid}
    if ctx.uid != 0:
        out["runAsNonRoot"] = True
    # Makes a fresh block-backed volume writable by the submitter's group; ignored by
    # volumes that do not support ownership management (NFS).  OnRootMismatch skips the
    # recursive chown when the root already fits.
    out["fsGroup"] = ctx.gid
    out["fsGroupChangePolicy"] = "OnRootMismatch"
    out["seccompProfile"] = {"type": "RuntimeDefault"}
    return out


def _container_security() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
    }


def _small_resources() -> Obj:
    both = {"cpu": "100m", "memory": "128Mi"}
    return {"requests": dict(both), "limits": dict(both)}


def _volumes(ctx: _Context) -> list[Obj]:
    return [
        {"name": "work", "persistentVolumeClaim": {"claimName": ctx.claim}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": TMP_SIZE}},
    ]


def _cpu_quantity(cpus: float) -> str:
    if float(cpus).is_integer():
        return str(int(cpus))
    return f"{max(1, round(cpus * 1000))}m"


def _memory_quantity(size: int) -> str:
    for suffix, unit in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


# --- placement --------------------------------------------------------------------------


def gfd_product(model: str) -> str:
    """A GPU product name as GPU Feature Discovery labels it: blanks become '-' (GFD
    joins the words with dashes), and characters a label value cannot hold too."""
    return _label_value("-".join(model.split()))


def cpu_expressions(microarchitecture: str) -> list[Obj]:
    """Node requirements for a class's CPU: ``kubernetes.io/arch`` from archspec's family
    and the NFD cpuid label of every vector extension the micro-architecture has.  A
    name archspec does not know gives none (the planner's image check decides then)."""
    target = archspec.cpu.TARGETS.get(microarchitecture)
    if target is None:
        return []
    out: list[Obj] = []
    arch = GOARCH.get(str(target.family))
    if arch:
        out.append({"key": ARCH_LABEL, "operator": "In", "values": [arch]})
    flags = sorted({NFD_FLAGS[f] for f in target.features if f in NFD_FLAGS})
    out += [{"key": NFD_CPUID + f, "operator": "In", "values": ["true"]} for f in flags]
    return out


def _node_affinity(variant: Variant, cls: MachineClass) -> Obj:
    """requiredDuringScheduling terms that keep the pod on nodes like the planned class.

    Terms are ORed and expressions in a term ANDed (Kubernetes' NodeSelector), so a
    compute capability of at least M.m becomes two terms: major > M, or major = M and
    minor >= m; every other requirement is repeated in both."""
    base = cpu_expressions(cls.microarchitecture)
    base += [{"key": k, "operator": "In", "values": [v]} for k, v in cls.labels]
    if cls.gpus:
        product = gfd_product(cls.gpu_model)
        base.append({"key": GFD_PRODUCT, "operator": "In", "values": [product, f"{product}-SHARED"]})
    else:
        # The plan kept this step off GPU nodes: GFD runs on (and labels) GPU nodes only.
        base.append({"key": GFD_PRODUCT, "operator": "DoesNotExist"})
    terms: list[list[Obj]] = [[]]
    if variant.uses_gpu and variant.gpu is not None:
        if variant.gpu.min_memory > 0:
            mib = math.ceil(variant.gpu.min_memory / 1024**2)
            base.append({"key": GFD_MEMORY, "operator": "Gt", "values": [str(mib - 1)]})
        major, minor = variant.gpu.cc_tuple
        if minor:
            terms = [
                [{"key": GFD_CC_MAJOR, "operator": "Gt", "values": [str(major)]}],
                [
                    {"key": GFD_CC_MAJOR, "operator": "In", "values": [str(major)]},
                    {"key": GFD_CC_MINOR, "operator": "Gt", "values": [str(minor - 1)]},
                ],
            ]
        elif major:
            terms = [[{"key": GFD_CC_MAJOR, "operator": "Gt", "values": [str(major - 1)]}]]
    return {"nodeSelectorTerms": [{"matchExpressions": base + extra} for extra in terms]}


def _plan_note(p: Placement, plan: Plan) -> str:
    return (
        f"{p.variant} on {p.machine_class} ({p.machine}), planned {p.start:.1f}s to {p.finish:.1f}s "
        f"by {plan.algorithm} ({plan.objective})"
    )


def _reasons(step: Step, p: Placement, cls: MachineClass) -> str:
    """Why not the step's other variants on the planned class, in a line: the filter that
    rejects one, or its estimated run time there against the plan's."""
    chosen = p.finish - p.start
    out = []
    for vname, v in step.resolved_variants().items():
        if vname == p.variant:
            continue
        why = next((r[1] for f in FILTERS if (r := f(v, cls))), None)
        if why is None:
            speed = cls.gpu_speed if v.uses_gpu else cls.speed
            runtime = (DEFAULT_ESTIMATE if v.estimate is None else v.estimate) / speed
            why = f"est. {runtime:.3g}s here vs {chosen:.3g}s planned"
        out.append(f"{vname}: {why}")
    text = "; ".join(out) or "the step's only variant"
    return text if len(text) <= 300 else text[:297] + "..."


# --- run-wide objects -------------------------------------------------------------------


def _claim(ctx: _Context, size: str, storage_class: str | None) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": ctx.meta(ctx.claim), "spec": spec}


def _driver_access(ctx: _Context, jobs: list[str]) -> list[Obj]:
    labels = ctx.run_labels("driver")
    subject: Obj = {"kind": "ServiceAccount", "name": ctx.driver}
    if ctx.namespace is not None:
        subject["namespace"] = ctx.namespace  # else the RoleBinding's own namespace
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ctx.meta(ctx.driver, labels)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": ctx.meta(ctx.driver, labels),
            "rules": [
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
                # RBAC cannot limit list by name, but it can limit patch: only this run's Jobs.
                {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"], "resourceNames": jobs},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": ctx.meta(ctx.driver, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ctx.driver},
            "subjects": [subject],
        },
    ]


def _network_policy(ctx: _Context) -> Obj:
    """Selected pods get no traffic in or out: a policy of each type with no rules
    (Kubernetes docs, "Default deny all ingress and all egress traffic")."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": ctx.meta(f"{ctx.driver}-no-network", ctx.run_labels("step")),
        "spec": {
            "podSelector": {"matchLabels": {LABEL_RUN: ctx.run_id, LABEL_NETWORK: "none"}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


def _driver_job(
    ctx: _Context,
    order: list[str],
    jobs: Mapping[str, str],
    parents: Mapping[str, list[str]],
    skipped: list[str],
    poll_seconds: int,
) -> Obj:
    labels = ctx.run_labels("driver")
    annotations = {}
    if skipped:
        annotations["hetflow.skipped"] = "optional, fits no node class: " + ", ".join(skipped)
    container = {
        "name": "driver",
        "image": ctx.tools,
        "command": ["sh", "-c", driver_script(ctx.run_id, order, jobs, parents, ctx.workflow)],
        "env": [
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "HETFLOW_WORKDIR", "value": posixpath.join(WORK_MOUNT, ctx.paths.workdir.as_posix())},
            {"name": "HETFLOW_POLL_SECONDS", "value": str(poll_seconds)},
            {"name": "HOME", "value": "/tmp"},  # kubectl's cache; the root is read-only
        ],
        "resources": _small_resources(),
        "securityContext": _container_security(),
        "volumeMounts": [{"name": "work", "mountPath": WORK_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": ctx.meta(ctx.driver, labels, annotations),
        "spec": {
            "backoffLimit": 3,  # a lost node or an API hiccup; the driver resumes from the Jobs' state
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",  # a step failed: retrying the driver changes nothing
                        "onExitCodes": {
                            "containerName": "driver",
                            "operator": "In",
                            "values": [DRIVER_FAILED_EXIT],
                        },
                    }
                ]
            },
            "template": {
                "metadata": {"labels": {**MANAGED_BY, **labels}},
                "spec": {
                    "serviceAccountName": ctx.driver,
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "securityContext": _pod_security(ctx),
                    "containers": [container],
                    "volumes": _volumes(ctx),
                },
            },
        },
    }


_DRIVER = r"""# hetflow run @RUN@: un-suspend each step's Job once all its parents' outputs are accepted.
set -u
W="$HETFLOW_WORKDIR"
POLL="${HETFLOW_POLL_SECONDS:-10}"
SEL='hetflow.run=@RUN@,hetflow.role=step'
FMT='{range .items[*]}{.metadata.name}{" suspend="}{.spec.suspend}'
FMT="$FMT"'{" conditions="}{.status.conditions[?(@.status=="True")].type}{"\n"}{end}'

# accept STEP OUTPUT...: check the declared outputs, then rename the attempt into place.
accept() {
  s=$1
  shift
  stage="$W/attempts/$s/@ATTEMPT@/out"
  final="$W/steps/$s/out"
  if [ ! -d "$stage" ] && [ -d "$final" ]; then
    : > "$W/steps/$s/done"
    return 0
  fi
  missing=""
  for o in "$@"; do
    [ -e "$stage/$o" ] || missing="$missing $o"
  done
  if [ -n "$missing" ]; then
    echo "step $s exited 0 but did not write:$missing" > "$W/steps/$s/failed"
    cat "$W/steps/$s/failed"
    return 1
  fi
  rm -rf "$final" && mv "$stage" "$final" && : > "$W/steps/$s/done" || return 1
  rmdir "$W/attempts/$s/@ATTEMPT@" 2> /dev/null
  echo "step $s done"
}

# step STEP JOB 'PARENT...' OUTPUT...: one look at one step.
step() {
  s=$1
  j=$2
  parents=$3
  shift 3
  [ -e "$W/steps/$s/done" ] && return 0
  if [ -e "$W/steps/$s/failed" ]; then
    FAILED="$FAILED $s"
    return 0
  fi
  line=$(printf '%s\n' "$ST" | grep "^$j " || true)
  case "$line" in
    *" conditions="*Complete*)
      accept "$s" "$@" || FAILED="$FAILED $s"
      return 0
      ;;
    *" conditions="*Failed*)
      echo "step $s failed; see kubectl logs job/$j" > "$W/steps/$s/failed"
      cat "$W/steps/$s/failed"
      FAILED="$FAILED $s"
      return 0
      ;;
  esac
  for p in $parents; do
    case " $FAILED $BLOCKED " in
      *" $p "*)
        BLOCKED="$BLOCKED $s"
        return 0
        ;;
    esac
  done
  ACTIVE=$((ACTIVE + 1))
  case "$line" in
    *" suspend=true "*) ;;
    *) return 0 ;;
  esac
  for p in $parents; do
    [ -e "$W/steps/$p/done" ] || return 0
  done
  kubectl -n "$NS" patch job "$j" --type=merge -p '{"spec":{"suspend":false}}' > /dev/null && echo "step $s started"
}

for s in @ALL@; do
  mkdir -p "$W/steps/$s" "$W/attempts/$s" || exit 1
done
while :; do
  if ! ST=$(kubectl -n "$NS" get jobs -l "$SEL" -o "jsonpath=$FMT"); then
    sleep "$POLL"
    continue
  fi
  FAILED=""
  BLOCKED=""
  ACTIVE=0
@STEPS@
  if [ "$ACTIVE" -eq 0 ]; then
    if [ -n "$FAILED" ]; then
      echo "run @RUN@ failed:$FAILED"
      [ -z "$BLOCKED" ] || echo "not started, as a step before them failed:$BLOCKED"
      exit @FAILED_EXIT@
    fi
    echo "run @RUN@: all @COUNT@ steps done"
    exit 0
  fi
  sleep "$POLL"
done
"""


def driver_script(
    run_id: str, order: Sequence[str], jobs: Mapping[str, str], parents: Mapping[str, Sequence[str]], wf: Workflow
) -> str:
    """The driver's POSIX sh program: steps in topological order, each released when its
    parents are accepted.  Reads $NS, $HETFLOW_WORKDIR and $HETFLOW_POLL_SECONDS."""
    calls = [
        "  step "
        + " ".join(
            [shlex.quote(s), shlex.quote(jobs[s]), shlex.quote(" ".join(parents[s]))]
            + [shlex.quote(posixpath.normpath(o)) for o in wf.steps[s].outputs]
        )
        for s in order
    ]
    return (
        _DRIVER.replace("@RUN@", run_id)
        .replace("@ATTEMPT@", str(STAGING_ATTEMPT))
        .replace("@ALL@", " ".join(shlex.quote(s) for s in order))
        .replace("@STEPS@", "\n".join(calls))
        .replace("@COUNT@", str(len(order)))
        .replace("@FAILED_EXIT@", str(DRIVER_FAILED_EXIT))
    )


# --- YAML -------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style throughout; multi-line strings (the driver's script) as literal blocks."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """One YAML stream, a document per object, with a comment saying how to use it.
    Deterministic: keys in the order the objects have them, no timestamps."""
    body = yaml.dump_all(
        [dict(o) for o in objects],
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,
    )
    return _usage(objects) + body


def _usage(objects: Sequence[Mapping[str, Any]]) -> str:
    driver = next((o for o in objects if o.get("metadata", {}).get("labels", {}).get(LABEL_ROLE) == "driver"), None)
    if driver is None:
        return ""
    meta = driver["metadata"]
    run, name = meta["labels"][LABEL_RUN], meta["name"]
    ns = f" -n {meta['namespace']}" if "namespace" in meta else ""
    return (
        f"# hetflow run {run} of workflow {meta['labels'][LABEL_WORKFLOW]}, exported for Kubernetes.\n"
        f"# Start:   kubectl create{ns} -f FILE   (create, not apply: a second apply would suspend\n"
        "#          the Jobs the driver has released)\n"
        f"# Wait:    kubectl wait{ns} --for=condition=complete job/{name} --timeout=24h\n"
        f"# Follow:  kubectl logs{ns} -f job/{name}; a step: kubectl logs{ns} job/{name}-STEP\n"
        f"# Remove:  kubectl delete{ns} job,networkpolicy,rolebinding,role,serviceaccount -l {LABEL_RUN}={run}\n"
    )


# --- validation -------------------------------------------------------------------------

KINDS: Mapping[tuple[str, str], str] = {
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Pod"): "V1Pod",
    ("batch/v1", "Job"): "V1Job",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}
_LIST_T = re.compile(r"^(?:list|List)\[(.*)\]\Z")
_DICT_T = re.compile(r"^(?:dict\((\w+), (.*)\)|[Dd]ict\[(\w+), (.*)\])\Z")
_OPTIONAL_T = re.compile(r"^Optional\[(.*)\]\Z")
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def validate_objects(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem found in ``objects``, each as "Kind name: field.path: what"; empty
    when all are valid.

    The schema is the official client's (``pip install kubernetes``): its model classes
    carry the OpenAPI field names and types, so an unknown field, a snake_case key, a
    wrong type or a missing required field is caught as the API server would catch it.
    A few of the API server's own rules that no schema states are checked as well: names,
    labels, quantities, node selector operators, container and volume references."""
    models = _client_models()
    problems: list[str] = []
    for i, obj in enumerate(objects):
        if not isinstance(obj, Mapping):
            problems.append(f"object {i + 1}: not a mapping but {type(obj).__name__}")
            continue
        kind, meta = obj.get("kind"), obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        what = f"{kind or 'object'} {name or i + 1}"
        model = KINDS.get((str(obj.get("apiVersion")), str(kind)))
        if model is None:
            known = ", ".join(f"{a} {k}" for a, k in KINDS)
            problems.append(f"{what}: apiVersion {obj.get('apiVersion')!r} kind {kind!r} is not one of {known}")
            continue
        found = _check_type(obj, model, "", models)
        if not found:  # the client's own model, for anything the walk does not know
            found = _client_check(obj, model, models)
        found += _api_rules(obj)
        problems += [f"{what}: {p}" for p in found]
    return problems


def _client_models() -> ModuleType:
    try:
        return importlib.import_module("kubernetes.client.models")
    except ImportError:
        raise HetflowError(
            "validating Kubernetes objects needs the official client: pip install 'kubernetes>=28'"
        ) from None


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check_type(value: Any, type_name: str, path: str, models: ModuleType) -> list[str]:
    """``value`` against one OpenAPI type as the client names it (``V1PodSpec``,
    ``list[V1Container]`` or ``List[...]``, ``dict(str, str)``, ``dict[...]`` or
    ``Dict[...]``: the spellings of client versions 28 to 37)."""
    t = type_name.strip()
    if m := _OPTIONAL_T.match(t):
        t = m.group(1)
    where = path or "the object"
    if m := _LIST_T.match(t):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {_kind_of(value)}"]
        return [p for i, v in enumerate(value) for p in _check_type(v, m.group(1), _at(path, i), models)]
    if m := _DICT_T.match(t):
        if not isinstance(value, Mapping):
            return [f"{where}: expected a mapping, got {_kind_of(value)}"]
        inner = m.group(2) or m.group(4)
        out = [f"{where}: key {k!r} is not a string" for k in value if not isinstance(k, str)]
        return out + [p for k, v in value.items() for p in _check_type(v, inner, _at(path, str(k)), models)]
    primitive = _PRIMITIVES.get(t)
    if primitive is not None:
        return [] if primitive(value) else [f"{where}: expected {t}, got {_kind_of(value)} ({value!r})"]
    if t == "object":
        return []
    cls = getattr(models, t, None)
    if cls is None or not hasattr(cls, "attribute_map"):
        return []  # a type this client does not model: nothing to check it against
    if not isinstance(value, Mapping):
        return [f"{where}: expected an object ({t}), got {_kind_of(value)}"]
    by_json = {j: a for a, j in cls.attribute_map.items()}
    out = []
    for key, v in value.items():
        attr = by_json.get(key)
        if attr is None:
            near = difflib.get_close_matches(str(key), list(by_json), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            out.append(f"{_at(path, str(key))}: unknown field{hint}")
        elif v is not None:
            out += _check_type(v, cls.openapi_types[attr], _at(path, key), models)
    for attr in _required(cls):
        if value.get(cls.attribute_map[attr]) is None:
            out.append(f"{_at(path, cls.attribute_map[attr])}: required field missing")
    return out


@functools.cache
def _required(cls: Any) -> tuple[str, ...]:
    """Required attributes of a client model.  The pydantic models (client 37+) say so;
    older ones only refuse None in their setters, so each setter is asked on a bare
    instance."""
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, Mapping):
        return tuple(a for a, f in fields.items() if f.is_required() and a in cls.attribute_map)
    probe = cls.__new__(cls)
    probe.local_vars_configuration = importlib.import_module("kubernetes.client").Configuration()
    required = []
    for attr in cls.attribute_map:
        try:
            setattr(probe, attr, None)
        except ValueError:
            required.append(attr)
    return tuple(required)


def _client_check(obj: Mapping[str, Any], model: str, models: ModuleType) -> list[str]:
    """Build the client's own model from ``obj``, for what the walk above cannot know."""
    cls = getattr(models, model)
    try:
        if hasattr(cls, "model_validate"):
            cls.model_validate(dict(obj))
        else:
            client = importlib.import_module("kubernetes.client")
            client.ApiClient()._ApiClient__deserialize(dict(obj), model)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        return [f"the client refuses it: {' '.join(str(exc).split())[:300]}"]
    return []


_PRIMITIVES: Mapping[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "datetime": lambda v: isinstance(v, str),
    "date": lambda v: isinstance(v, str),
}


def _kind_of(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}.get(
        type(value), type(value).__name__
    )


def _api_rules(obj: Mapping[str, Any]) -> list[str]:
    """Rules of the API server's validation (pkg/apis/*/validation) that matter here."""
    out: list[str] = []
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name")
    # A Job's name becomes a label value of its pods, so it must fit a DNS label.
    name_re = _DNS_LABEL_RE if obj.get("kind") == "Job" else _DNS_SUBDOMAIN_RE
    if not isinstance(name, str) or not name_re.match(name):
        out.append(f"metadata.name: {name!r} is not a valid name (lowercase letters, digits and '-')")
    out += _label_rules(meta.get("labels"), "metadata.labels")
    out += _label_rules(meta.get("annotations"), "metadata.annotations", values=False)
    spec: Mapping[str, Any] = obj["spec"] if isinstance(obj.get("spec"), Mapping) else {}
    if obj.get("kind") == "PersistentVolumeClaim":
        out += _quantities(_get(spec, "resources", "requests"), "spec.resources.requests")
    pod, at = (spec, "spec") if obj.get("kind") == "Pod" else (_get(spec, "template", "spec"), "spec.template.spec")
    if isinstance(pod, Mapping):
        out += _label_rules(_get(spec, "template", "metadata", "labels"), "spec.template.metadata.labels")
        out += _pod_rules(pod, at)
        if obj.get("kind") == "Job":
            if pod.get("restartPolicy") not in ("Never", "OnFailure"):
                out.append(f"{at}.restartPolicy: a Job's pods must use Never or OnFailure")
            if "podFailurePolicy" in spec and pod.get("restartPolicy") != "Never":
                out.append(f"{at}.restartPolicy: podFailurePolicy needs restartPolicy Never")
    return out


def _get(value: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(k)
    return value


def _label_rules(labels: Any, at: str, *, values: bool = True) -> list[str]:
    if not isinstance(labels, Mapping):
        return []
    out = []
    for k, v in labels.items():
        prefix, _, key = str(k).rpartition("/")
        if not _LABEL_NAME_RE.match(key) or (prefix and not _DNS_SUBDOMAIN_RE.match(prefix)):
            out.append(f"{at}: key {k!r} is not a valid qualified name")
        if values and not (isinstance(v, str) and _LABEL_VALUE_RE.match(v)):
            out.append(f"{at}.{k}: value {v!r} is not a valid label value")
    return out


def _quantities(resources: Any, at: str) -> list[str]:
    if not isinstance(resources, Mapping):
        return []
    return [
        f"{at}.{k}: {v!r} is not a quantity (e.g. 500m, 2, 512Mi)"
        for k, v in resources.items()
        if not (isinstance(v, str) and _QUANTITY_RE.match(v))
    ]


def _pod_rules(pod: Mapping[str, Any], at: str) -> list[str]:
    out: list[str] = []
    volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, Mapping)}
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, c in enumerate(pod.get(field) or []):
            if not isinstance(c, Mapping):
                continue
            where = f"{at}.{field}[{i}]"
            cname = c.get("name")
            if not isinstance(cname, str) or not _DNS_LABEL_RE.match(cname) or cname in seen:
                out.append(f"{where}.name: {cname!r} is not a unique DNS label")
            seen.add(str(cname))
            for part in ("requests", "limits"):
                out += _quantities(_get(c, "resources", part), f"{where}.resources.{part}")
            for j, m in enumerate(c.get("volumeMounts") or []):
                if not isinstance(m, Mapping):
                    continue
                if m.get("name") not in volumes:
                    out.append(f"{where}.volumeMounts[{j}].name: no volume {m.get('name')!r} in the pod")
                if not str(m.get("mountPath", "")).startswith("/"):
                    out.append(f"{where}.volumeMounts[{j}].mountPath: must be absolute")
                sub = m.get("subPath")
                if sub is not None and (str(sub).startswith("/") or ".." in str(sub).split("/")):
                    out.append(f"{where}.volumeMounts[{j}].subPath: must be relative, without '..'")
    terms = _get(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    for i, term in enumerate(terms or []):
        for j, e in enumerate(_get(term, "matchExpressions") or []):
            out += _expression(e, f"{at}.affinity...nodeSelectorTerms[{i}].matchExpressions[{j}]")
    return out


def _expression(e: Any, at: str) -> list[str]:
    """NodeSelectorRequirement (core/validation ValidateNodeSelectorRequirement)."""
    if not isinstance(e, Mapping):
        return []
    op, values = e.get("operator"), e.get("values") or []
    if op not in _NODE_OPERATORS:
        return [f"{at}.operator: {op!r} is not one of {', '.join(_NODE_OPERATORS)}"]
    if op in ("In", "NotIn") and not values:
        return [f"{at}.values: {op} needs at least one value"]
    if op in ("Exists", "DoesNotExist") and values:
        return [f"{at}.values: {op} takes no values"]
    if op in ("Gt", "Lt") and (len(values) != 1 or not re.fullmatch(r"-?\d+", str(values[0]))):
        return [f"{at}.values: {op} takes exactly one integer, got {values!r}"]
    return []
