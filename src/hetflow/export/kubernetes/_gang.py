"""Gang steps: ``replicas`` pods started together.

``launcher: torch`` or ``none`` becomes an Indexed Job (one pod per replica, its index the
rank) and a headless Service that gives every pod a stable DNS name; ``launcher: mpi``
becomes a kubeflow mpi-operator MPIJob (v2beta1: one launcher pod running ``mpirun``, and
``replicas`` worker pods).  Both are created suspended, like every step, and released by
the driver.  Each is made from the step's plain Job (``_objects``), so resources, mounts,
hardening and placement stay one code path: ``resources`` are per replica.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from hetflow.execute import render_contract
from hetflow.export.kubernetes._common import Context, Obj, small_resources
from hetflow.kube import (
    ANNOTATION_GPU_LINK,
    HOSTNAME_LABEL,
    LABEL_NETWORK,
    LABEL_REPLICA,
    LABEL_RUN,
    LABEL_STEP,
    MANAGED_BY,
    container_security,
    headless_service,
    indexed,
    rank_values,
)
from hetflow.spec import GANG_ENV, Step

# The resource Mellanox/NVIDIA k8s-rdma-shared-dev-plugin advertises in its default
# configuration (resourcePrefix "rdma", resourceName "hca_shared_devices_a"); a cluster
# that names its RDMA resource otherwise passes --rdma-resource.
DEFAULT_RDMA_RESOURCE = "rdma/hca_shared_devices_a"
MPI_API = "kubeflow.org/v2beta1"
# Where mpi-operator mounts the launcher's SSH keys: the pods' HOME is /tmp (read-only root).
MPI_SSH_DIR = "/tmp/.ssh"

# The launch contract (``execute.gang.replicas.LAUNCH_CONTRACT``) as pod fields: one replica per pod,
# so a pod is torchrun's node (node rank = rank, local rank 0 of 1).  mpi: the rank of a
# process is OpenMPI's own OMPI_COMM_WORLD_RANK, and ``mpirun -x`` passes the launcher's
# variables to every rank, so only the contract's gang-wide ones are set.


def gang_objects(ctx: Context, name: str, step: Step, job: Obj, *, rdma_resource: str) -> list[Obj]:
    """The step's plain ``job`` as its gang: [Service, Indexed Job] or [MPIJob]."""
    assert step.gang is not None
    job = copy.deepcopy(job)
    pod: Obj = job["spec"]["template"]["spec"]
    _link_and_network(step, job, pod, rdma_resource)
    policy = [] if step.network else [_gang_policy(ctx, name, job)]
    if step.gang.launcher == "mpi":
        return [*policy, _mpi_job(ctx, name, step, job)]
    return [*policy, *_indexed(ctx, name, step, job)]


def _gang_policy(ctx: Context, name: str, job: Obj) -> Obj:
    """A gang without ``network: true`` still talks to itself: its pods may reach each
    other and the cluster DNS (to resolve each other's names), nothing else.  Policies
    add up, so this opens exactly that hole in the run's deny-all policy."""
    peers = [{"podSelector": {"matchLabels": _selector(ctx, name)}}]
    dns = [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": ctx.meta(f"{job['metadata']['name']}-gang", dict(job["metadata"]["labels"])),
        "spec": {
            "podSelector": {"matchLabels": {**_selector(ctx, name), LABEL_NETWORK: "none"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": peers}],
            "egress": [{"to": peers}, {"to": [{"namespaceSelector": {}}], "ports": dns}],
        },
    }


def _selector(ctx: Context, name: str) -> dict[str, str]:
    return {LABEL_RUN: ctx.run_id, LABEL_STEP: name}


def _link_and_network(step: Step, job: Obj, pod: Obj, rdma_resource: str) -> None:
    assert step.gang is not None
    if step.gang.gpu_link != "any":
        # GPU Feature Discovery publishes no NVLink or NUMA label (gpu.product, .family,
        # .count, .memory, .machine...), so nothing honest can be required of the node.
        # Which GPUs a pod gets is the device plugin's choice: the kubelet's Topology
        # Manager (policy single-numa-node) and the NVIDIA device plugin's aligned
        # allocation keep them together.  The annotation says what the step asked for.
        for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
            meta.setdefault("annotations", {})[ANNOTATION_GPU_LINK] = step.gang.gpu_link
    if step.gang.network == "rdma":
        step_container = pod["containers"][0]
        step_container["resources"]["limits"][rdma_resource] = "1"
        step_container["resources"]["requests"][rdma_resource] = "1"
        # Registering memory for RDMA locks it: IPC_LOCK, the one capability added back.
        step_container["securityContext"]["capabilities"]["add"] = ["IPC_LOCK"]


def _spread(ctx: Context, name: str, step: Step, pod: Obj, extra: Mapping[str, str] | None = None) -> None:
    """At most ``per_node`` replicas on one node.

    per_node 1: a required pod anti-affinity on the hostname, exact.  per_node P > 1: no
    scheduler rule says "at most P" (topology spread bounds the *difference* between the
    fullest and the emptiest eligible node, not a count).  Chosen: topologySpreadConstraints
    with maxSkew 1 (DoNotSchedule, counting only nodes the pod's affinity and tolerations
    admit): the replicas are balanced, so a node holds at most ceil(replicas / eligible
    nodes), which is at most P whenever the gang fits at P per node at all.  maxSkew P would
    pack the gang tighter but allows P + min pods on a node once every eligible node holds
    one, so it is not an upper bound.  The price: replicas spread wider than P per node
    needs."""
    assert step.gang is not None
    per_node = step.gang.per_node
    if per_node is None:
        return
    selector = {"matchLabels": {**_selector(ctx, name), **(extra or {})}}
    if per_node == 1:
        pod.setdefault("affinity", {})["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": HOSTNAME_LABEL}
            ]
        }
        return
    pod["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
            "nodeAffinityPolicy": "Honor",
            "nodeTaintsPolicy": "Honor",
        }
    ]


def _env(container: Obj, gang: Mapping[str, Obj]) -> None:
    """The step's variables minus the gang's names (the loader notes that they are
    ignored), then the gang's, sorted by name as every container's are."""
    kept = [e for e in container.get("env", []) if e["name"] not in GANG_ENV and e["name"] not in gang]
    container["env"] = sorted([*kept, *({"name": k, **v} for k, v in gang.items())], key=lambda e: e["name"])


def _indexed(ctx: Context, name: str, step: Step, job: Obj) -> list[Obj]:
    gang = step.gang
    assert gang is not None
    job_name = job["metadata"]["name"]
    service = job_name  # the pods' subdomain; a Job name is a DNS-1035 label ("hf-...")
    spec = job["spec"]
    spec |= indexed(gang.replicas)
    pod: Obj = spec["template"]["spec"]
    pod["subdomain"] = service  # each pod resolves as JOB-INDEX.SERVICE
    values = render_contract(gang.launcher, rank_values(job_name, gang.replicas, gang.port))
    for c in pod["containers"]:
        _env(c, values)
    # Replicas share one staging directory; only replica 0 empties it (the others would
    # wipe what an earlier replica wrote).  JOB_COMPLETION_INDEX: set by the Job controller.
    for c in pod.get("initContainers", []):
        if c["name"] == "clean":
            c["command"][2] = f'[ "$JOB_COMPLETION_INDEX" != 0 ] || {{ {c["command"][2]}; }}'
    _spread(ctx, name, step, pod)
    return [headless_service(ctx.meta(service, dict(job["metadata"]["labels"])), _selector(ctx, name), gang.port), job]


def _mpi_job(ctx: Context, name: str, step: Step, job: Obj) -> Obj:
    """The step's plain ``job`` as a kubeflow MPIJob: its workers (sshd), its launcher
    (``mpirun``) and the object around them.  Long because it is one object, built in the
    order its YAML reads: split, it would scatter one MPIJob's fields (and the comments that
    cite the operator's behaviour) across helpers."""
    gang = step.gang
    assert gang is not None
    spec = job["spec"]
    template = spec["template"]
    pod: Obj = template["spec"]
    step_container: Obj = pod["containers"][0]
    args = step_container.pop("args", None)
    if not args:
        raise ValueError(
            f"step {name!r} is an mpi gang without a command; mpirun needs one (write 'command:' in the step)"
        )
    _env(step_container, render_contract("mpi", {"world": {"value": str(gang.replicas)}}, gang_wide=True))
    # Processes started over ssh do not inherit the worker pod's environment: mpirun
    # exports the step's own variables with -x.
    # (Not NVIDIA_VISIBLE_DEVICES: the runtime reads it when the container starts.)
    exported = [
        a
        for e in step_container["env"]
        if "value" in e and e["name"] != "NVIDIA_VISIBLE_DEVICES"
        for a in ("-x", e["name"])
    ]

    # Workers: one per replica, each with the step's resources, running sshd for mpirun.
    worker_pod = copy.deepcopy(pod)
    worker_pod.pop("initContainers", None)  # the launcher empties the staging directory
    worker_pod["containers"] = [
        {**step_container, "name": "worker", "command": ["/usr/sbin/sshd"], "args": ["-De"]},
    ]
    worker_pod["restartPolicy"] = "Never"
    _spread(ctx, name, step, worker_pod, {LABEL_REPLICA: "worker"})

    # The launcher: mpirun only, no GPU, the hetflow variables and /tmp for ssh.
    launcher = copy.deepcopy(step_container)
    launcher.update(
        name="launcher",
        command=["mpirun"],
        args=["-np", str(gang.replicas), "--bind-to", "none", *exported, *args],
        resources=small_resources(),
        volumeMounts=[m for m in step_container["volumeMounts"] if m["mountPath"] == "/tmp"],
    )
    launcher["env"] = [e for e in launcher["env"] if e["name"] != "NVIDIA_VISIBLE_DEVICES"]
    launcher["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    launcher["env"].sort(key=lambda e: e["name"])
    launcher["securityContext"] = container_security()  # no RDMA: no IPC_LOCK
    launcher_pod = copy.deepcopy(pod)
    # Placed as the workers are (the image was pinned for that node class), unspread.
    launcher_pod["containers"] = [launcher]

    def meta(replica: str) -> Obj:
        out: Obj = {"labels": {**MANAGED_BY, **template["metadata"]["labels"], LABEL_REPLICA: replica}}
        if "annotations" in template["metadata"]:
            out["annotations"] = dict(template["metadata"]["annotations"])
        return out

    return {
        "apiVersion": MPI_API,
        "kind": "MPIJob",
        "metadata": job["metadata"],
        "spec": {
            "slotsPerWorker": 1,  # one rank per worker pod, each with the step's resources
            # The launcher only runs mpirun; it is no rank (and holds no GPU).
            "runLauncherAsWorker": False,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": MPI_SSH_DIR,
            # mpirun starts once every worker's sshd is up; the launcher's init container
            # empties the staging directory first.
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {
                "suspend": True,  # the driver releases it (spec.runPolicy.suspend: false)
                "cleanPodPolicy": "Running",  # workers go when the launcher ends
                "backoffLimit": step.retry_policy.count,  # the launcher Job's, as a step Job's
            },
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",  # a retry is a new launcher pod (backoffLimit)
                    "template": {"metadata": meta("launcher"), "spec": launcher_pod},
                },
                "Worker": {
                    "replicas": gang.replicas,
                    "restartPolicy": "Never",
                    "template": {"metadata": meta("worker"), "spec": worker_pod},
                },
            },
        },
    }
