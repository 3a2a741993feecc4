"""The run's objects: ``export_kubernetes`` puts them together; the step Jobs, their
containers and quantities, the claim and the NetworkPolicy are made here, the driver's
objects in ``_driver``."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping

from hetflow.errors import HetflowError
from hetflow.execute import container_env, input_mounts
from hetflow.export.kubernetes._common import (
    DEFAULT_TOOLS_IMAGE,
    RUN_ID_RE,
    STAGING_ATTEMPT,
    Context,
    ImageFor,
    Obj,
    run_volumes,
    small_resources,
)
from hetflow.export.kubernetes._driver import driver_access, driver_job
from hetflow.export.kubernetes._gang import DEFAULT_RDMA_RESOURCE, gang_objects
from hetflow.export.kubernetes._placement import node_affinity, plan_note, reasons
from hetflow.kube import (
    ANNOTATION_IMAGE,
    ANNOTATION_PLAN,
    ANNOTATION_REASONS,
    DNS_LABEL_RE,
    LABEL_CLASS,
    LABEL_NETWORK,
    LABEL_STEP,
    LABEL_VARIANT,
    MANAGED_BY,
    QUANTITY_RE,
    RESOURCE_NAME_RE,
    container_security,
    gpu_limits,
    gpu_toleration,
    job_name,
    label_value,
    network_policy,
    pod_security,
)
from hetflow.plan import Cluster, MachineClass, Placement, Plan, Resolver, class_node
from hetflow.spec import Step, Variant, Workflow, edges_of, topo_order


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
    rdma_resource: str = DEFAULT_RDMA_RESOURCE,
) -> list[Obj]:
    """The objects that run ``plan`` (of ``workflow`` on ``cluster``) as run ``run_id``.

    ``image_for(image, node_class)`` gives the reference to run for a step's image on its
    planned class (a digest-pinned build, see ``pinned_image_for``); without it images
    run as written.  ``namespace=None`` leaves objects namespace-less (kubectl's current
    namespace).  ``claim_size=None`` leaves the claim out: it must then exist, be
    ReadWriteMany, and be writable by ``uid``:``gid``.  A gang step (``step.gang``) becomes
    an Indexed Job and a headless Service, or an MPIJob (``launcher: mpi``); a gang with
    ``network: rdma`` asks each replica for one ``rdma_resource``.  Raises ``ValueError`` saying
    what to change when the run ID, a name or the plan does not fit."""
    if not RUN_ID_RE.match(run_id):
        raise ValueError(
            f"run ID {run_id!r} cannot name Kubernetes objects; use 1-20 lowercase letters, digits "
            "or '-', starting and ending alphanumeric (hetflow's own IDs are 8 hex digits)"
        )
    for what, name in (("namespace", namespace), ("workdir claim", workdir_claim)):
        if name is not None and not DNS_LABEL_RE.match(name):
            raise ValueError(f"{what} {name!r} is not a valid Kubernetes name; use lowercase letters, digits and '-'")
    if not RESOURCE_NAME_RE.match(rdma_resource):
        raise ValueError(f"RDMA resource {rdma_resource!r} is not an extended resource name; write e.g. rdma/hca")
    if uid < 0 or gid < 0:
        raise ValueError(f"uid and gid must be 0 or more, got {uid}:{gid}")
    if claim_size is not None and not QUANTITY_RE.match(claim_size):
        raise ValueError(f"claim size {claim_size!r} is not a Kubernetes quantity; write e.g. 10Gi or 1Ti")
    if poll_seconds < 1:
        raise ValueError(f"poll_seconds must be at least 1, got {poll_seconds}")
    classes = {c.name: c for c in cluster.classes()}
    edges = edges_of(workflow)
    order = [s for s in topo_order(edges) if s in plan.placements]
    _check_plan(workflow, plan, classes)
    ctx = Context(workflow, run_id, namespace, uid, gid, workdir_claim, tools_image)
    jobs = {name: job_name(f"hf-{run_id}-{name}") for name in order}
    mpi = {name for name in order if (g := workflow.steps[name].gang) is not None and g.launcher == "mpi"}
    step_jobs: list[Obj] = []
    for name in order:
        step = workflow.steps[name]
        plain = _step_job(ctx, name, step, plan.placements[name], classes, plan, jobs[name], image_for)
        if step.gang is None:
            step_jobs.append(plain)
        else:
            step_jobs += gang_objects(ctx, name, step, plain, rdma_resource=rdma_resource)
    skipped = sorted(set(workflow.steps) - set(plan.placements))
    objects: list[Obj] = []
    if claim_size is not None:
        objects.append(_claim(ctx, claim_size, storage_class))
    objects += driver_access(ctx, sorted(j for n, j in jobs.items() if n not in mpi), sorted(jobs[n] for n in mpi))
    if any(not workflow.steps[name].network for name in order):
        objects.append(network_policy(ctx.namespace))  # the namespace's one (``kube.network_policy``)
    objects += step_jobs
    parents = {name: [p for p in edges[name] if p in jobs] for name in order}
    objects.append(driver_job(ctx, order, jobs, parents, skipped, poll_seconds, mpi))
    return objects


def pinned_image_for(classes: Iterable[MachineClass], resolver: Resolver) -> ImageFor:
    """An ``image_for`` that pins each image to the build the resolver chooses for a node
    class (``plan.feasible.images.class_node`` stands for the class, as in planning).  An image
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
                cache[key] = (res.pinned if res is not None else None) or image
        return cache[key]

    return image_for


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


def _step_job(
    ctx: Context,
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
        LABEL_CLASS: label_value(cls.name),
    }
    annotations = {ANNOTATION_PLAN: plan_note(p, plan), ANNOTATION_REASONS: reasons(step, p, cls)}
    if image != variant.image:
        annotations[ANNOTATION_IMAGE] = variant.image
    pod: Obj = {
        "restartPolicy": "Never",  # a retry is a new pod of the Job (backoffLimit), as an attempt
        "automountServiceAccountToken": False,  # a step has no business with the API
        "enableServiceLinks": False,  # the environment is exactly the step's
        "securityContext": pod_security(ctx.uid, ctx.gid),
        "initContainers": [_clean_container(ctx, name)],
        "containers": [_step_container(ctx, name, step, variant, image, cls)],
        "volumes": run_volumes(ctx),
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": node_affinity(variant, cls)}},
    }
    if variant.node_selector:
        pod["nodeSelector"] = dict(sorted(variant.node_selector.items()))
    if cls.gpus:
        # the plan put this step on a GPU class, whose nodes are commonly tainted (``kube.gpu_toleration``)
        pod["tolerations"] = [gpu_toleration(variant.gpu_request, cls.gpu_vendor)]
    pod_labels = {**labels, LABEL_NETWORK: "allowed" if step.network else "none"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": ctx.meta(job, labels, annotations),
        "spec": {
            "suspend": True,  # the driver releases it when its parents have succeeded
            "backoffLimit": step.retry_policy.count,
            # A replacement pod starts only once the failed one is gone, so two attempts
            # never write the same staging directory (Job podReplacementPolicy, 1.29+).
            "podReplacementPolicy": "Failed",
            "template": {"metadata": {"labels": {**MANAGED_BY, **pod_labels}}, "spec": pod},
        },
    }


def _step_container(ctx: Context, name: str, step: Step, variant: Variant, image: str, cls: MachineClass) -> Obj:
    res = variant.resources
    requests = {"cpu": _cpu_quantity(res.cpus), "memory": _memory_quantity(res.memory)}
    limits = dict(requests)  # as the local runner's --cpus/--memory: a hard cap
    gpu_env: dict[str, str] = {"HETFLOW_RUN_ID": ctx.run_id, "HETFLOW_STEP": name}
    gpus = gpu_limits(variant.gpu_request, cls.gpu_vendor)  # nvidia.com/gpu, mig-<profile>, amd.com/gpu, ...
    limits |= gpus
    if not any(k.startswith("nvidia.com/") for k in gpus):  # the device plugin sets NVIDIA_VISIBLE_DEVICES
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
    out["securityContext"] = container_security()
    out["volumeMounts"] = mounts
    out["terminationMessagePolicy"] = "FallbackToLogsOnError"  # kubectl describe shows the log's tail
    return out


def _clean_container(ctx: Context, name: str) -> Obj:
    """Empties the staging directory, so a retry never sees a failed attempt's files."""
    attempt_dir = posixpath.dirname(posixpath.dirname(_staging(ctx, name)))  # runs/RUN/attempts/STEP
    return {
        "name": "clean",
        "image": ctx.tools,
        "command": ["sh", "-c", f"rm -rf /attempt/{STAGING_ATTEMPT} && mkdir -p /attempt/{STAGING_ATTEMPT}/out"],
        "resources": small_resources(),
        "securityContext": container_security(),
        "volumeMounts": [{"name": "work", "mountPath": "/attempt", "subPath": attempt_dir}],
    }


def _staging(ctx: Context, name: str) -> str:
    return ctx.paths.staging(name, STAGING_ATTEMPT).as_posix()


def _literal(text: str) -> str:
    """Kubernetes expands $(VAR) in args and env values and reads $$ as $; doubling every
    '$' keeps the text as written, as podman passes it."""
    return text.replace("$", "$$")


def _cpu_quantity(cpus: float) -> str:
    if float(cpus).is_integer():
        return str(int(cpus))
    return f"{max(1, round(cpus * 1000))}m"


def _memory_quantity(size: int) -> str:
    for suffix, unit in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def _claim(ctx: Context, size: str, storage_class: str | None) -> Obj:
    spec: Obj = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": ctx.meta(ctx.claim), "spec": spec}
