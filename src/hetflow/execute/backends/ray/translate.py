"""Job -> Ray: the task options a job asks for (CPUs, GPUs, memory, accelerator and node-type
resources, node affinity), a node's hetflow name, and the container spec with exactly the
GPUs Ray assigned.  Pure functions (no Ray import), for tests.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.devices.gpu import DRIVER_DIR, cdi_device_names, driver_mounts
from hetflow.execute.devices.migtable import MigInstance
from hetflow.execute.engine import ContainerSpec

# Where a node says which hetflow node it is: a label (``ray start --labels
# hetflow/node=gpu-1``) or a custom resource (``--resources '{"hetflow_node:gpu-1": 1}'``).
NODE_LABEL = "hetflow/node"
NODE_RESOURCE = "hetflow_node:"
NODE_TYPE_RESOURCE = "hetflow/node-type:"  # a cluster file's node type, e.g. hetflow/node-type:gpu.a100
ACCELERATOR_RESOURCE = "accelerator_type:"  # Ray's own: set by Ray on nodes with NVIDIA, AMD, Intel GPUs
# Ray counts NVIDIA, AMD (ROCR_VISIBLE_DEVICES) and Intel (ONEAPI_DEVICE_SELECTOR) GPUs alike
# as its "GPU" resource (docs.ray.io, ray-core/scheduling/accelerators), so a vendor is asked
# for by a marker: Ray's accelerator_type of the planned model, or, without a model, the
# vendor resource a node declares (``ray start --resources '{"gpu_vendor:amd": 1}'``).
VENDOR_RESOURCE = "gpu_vendor:"
# A MIG instance: Ray has no MIG resource; a node declares its instances per profile
# (``--resources '{"mig-1g.10gb": 7}'``, as the Kubernetes device plugin names them) and a
# step takes one (a quantity, not a marker) and no whole GPU.
MIG_RESOURCE = "mig-"
# A custom resource asked for as a marker, not a quantity: 1000 jobs fit on a node with 1.
MARKER = 0.001
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True)
class RayNode:
    """One alive Ray node as hetflow sees it."""

    node_id: str
    name: str
    resources: Mapping[str, float]  # totals


@dataclass(frozen=True)
class TaskRequest:
    """The Ray task options for one job (``.options(...)`` of the step task)."""

    num_cpus: float
    num_gpus: float  # whole GPUs, or a fraction of one (a shared step: Ray packs fractions onto one GPU)
    memory: int
    resources: Mapping[str, float]
    node_id: str | None = None  # NodeAffinitySchedulingStrategy(node_id, soft=False)

    def describe(self) -> str:
        parts = [f"{self.num_cpus:g} CPU"] + ([f"{self.num_gpus:g} GPU"] if self.num_gpus else [])
        parts += sorted(self.resources) + ([f"node {self.node_id[:12]}"] if self.node_id else [])
        return ", ".join(parts)


# Ray's own rule for naming an NVIDIA model (ray/_private/accelerators/nvidia_gpu.py,
# NVIDIA_GPU_NAME_PATTERN): "NVIDIA A100-SXM4-40GB" -> A100, "Tesla T4" -> T4.
_RAY_GPU_NAME = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")


def accelerator_type(model: str) -> str:
    """The ``accelerator_type:`` Ray gives a node with this GPU model; a bare model name
    ("a100", as a cluster file may write it) is taken as is, upper-cased.  AMD and Intel
    products as Ray names them (ray/util/accelerators): "AMD Instinct MI250X" ->
    AMD-Instinct-MI250X, "Intel Data Center GPU Max 1550" -> Intel-GPU-Max-1550."""
    model = model.strip()
    if model.upper().startswith("AMD "):
        return re.sub(r"\s+", "-", model)
    intel = re.match(r"Intel.*\bMax\s+(\d+)", model, re.IGNORECASE)
    if intel:
        return f"Intel-GPU-Max-{intel.group(1)}"
    m = _RAY_GPU_NAME.match(model)
    if m and len(m.group(1)) > 1:
        return m.group(1).replace(" ", "-")
    if " " not in model:
        return model.split("-")[0].upper()
    return re.sub(r"^NVIDIA\s+", "", model).replace(" ", "-")


def node_name(labels: Mapping[str, str], resources: Mapping[str, float], node_id: str) -> str:
    """A node's hetflow name: its ``hetflow/node`` label, else its ``hetflow_node:NAME``
    resource, else its Ray node id."""
    if labels.get(NODE_LABEL):
        return labels[NODE_LABEL]
    for key in resources:
        if key.startswith(NODE_RESOURCE):
            return key[len(NODE_RESOURCE) :]
    return node_id


def task_request(job: Job, nodes: Sequence[RayNode]) -> TaskRequest:
    """What to ask Ray for; EngineError saying what to change when no node of the
    cluster could ever run the job (Ray would keep such a task pending for ever)."""
    resources: dict[str, float] = {}
    offered = {k for n in nodes for k in n.resources}
    num_gpus, accel = gpu_resources(job, offered)
    resources |= accel
    if num_gpus and job.gpu_model:
        key = ACCELERATOR_RESOURCE + accelerator_type(job.gpu_model)
        if key not in offered:
            have = sorted(k[len(ACCELERATOR_RESOURCE) :] for k in offered if k.startswith(ACCELERATOR_RESOURCE))
            raise EngineError(
                f"{job.name} asks for {job.gpu_model} GPUs ({key}); no Ray node offers it "
                f"(GPU types: {', '.join(have) or 'none'}); start a node with that GPU, or "
                f"add --resources '{{\"{key}\": 1}}' to its `ray start`"
            )
        resources[key] = MARKER
    # A cluster that labels its nodes with node types is held to them; one that does not
    # is placed by resources alone (a plan of this machine names its own node type).
    typed = any(k.startswith(NODE_TYPE_RESOURCE) for k in offered)
    type_key = NODE_TYPE_RESOURCE + job.node_class if job.node_class else None
    if typed and type_key:
        if type_key not in offered:
            have = sorted(k[len(NODE_TYPE_RESOURCE) :] for k in offered if k.startswith(NODE_TYPE_RESOURCE))
            raise EngineError(
                f"{job.name} is planned on node type {job.node_class}; no Ray node offers {type_key} "
                f"(node types: {', '.join(have)}); add --resources '{{\"{type_key}\": 1}}' to that node's `ray start`"
            )
        resources[type_key] = MARKER
    node_id = None
    if job.node:
        named = [n for n in nodes if n.name == job.node]
        if named:
            node_id = named[0].node_id
        elif not (typed and job.node == job.node_class):
            raise EngineError(
                f"{job.name} is pinned to node {job.node}; no Ray node has that name "
                f"(nodes: {', '.join(sorted(n.name for n in nodes))}); name it with "
                f"`ray start --labels {NODE_LABEL}={job.node}`"
            )
    request = TaskRequest(float(job.cpus), num_gpus, job.memory, resources, node_id)
    _check_fits(job, request, nodes)
    return request


def gpu_resources(job: Job, offered: Collection[str]) -> tuple[float, dict[str, float]]:
    """``num_gpus`` and the accelerator resources of a job's request: whole GPUs as today; a
    share as fractional ``num_gpus``; a MIG instance as one ``mig-<profile>``; a vendor
    (without a model to name) as its ``gpu_vendor:`` marker where the cluster declares
    vendors; ``any`` as plain GPUs.  EngineError when no node offers the MIG profile."""
    req = job.gpu_request
    if req is None or req.kind == "whole":
        count = req.count if req is not None else job.gpus
        return float(count), _vendor_marker(job, offered) if count else {}
    if req.kind == "mig":
        key = MIG_RESOURCE + str(req.mig)
        if key not in offered:
            have = sorted(k for k in offered if k.startswith(MIG_RESOURCE))
            raise EngineError(
                f"{job.name} asks for a MIG {req.mig} instance ({key}); no Ray node offers it "
                f"(MIG resources: {', '.join(have) or 'none'}); add --resources '{{\"{key}\": N}}' "
                "to the `ray start` of a node with N such instances"
            )
        return 0.0, {key: 1.0}
    return float(req.share or 0.0), _vendor_marker(job, offered)


def _vendor_marker(job: Job, offered: Collection[str]) -> dict[str, float]:
    req = job.gpu_request
    if req is None or req.vendor == "any" or job.gpu_model:
        return {}  # a model names its vendor (accelerator_type)
    key = VENDOR_RESOURCE + req.vendor
    if not any(k.startswith(VENDOR_RESOURCE) for k in offered) and req.vendor == "nvidia":
        return {}  # a cluster that declares no vendors: its GPUs are NVIDIA's, as before
    if key not in offered:
        raise EngineError(
            f"{job.name} asks for {req.describe()}; no Ray node declares {key} (Ray counts every "
            f"vendor's GPUs as GPU); add --resources '{{\"{key}\": 1}}' to the `ray start` of its nodes"
        )
    return {key: MARKER}


def _check_fits(job: Job, req: TaskRequest, nodes: Sequence[RayNode]) -> None:
    wants = {"CPU": req.num_cpus, "GPU": req.num_gpus, "memory": float(req.memory), **req.resources}
    candidates = [n for n in nodes if req.node_id in (None, n.node_id)]
    for n in candidates:
        if all(v <= 0 or n.resources.get(k, 0.0) >= v for k, v in wants.items()):
            return
    where = f"node {job.node}" if req.node_id else "any Ray node"
    biggest = max(candidates, key=lambda n: (n.resources.get("GPU", 0), n.resources.get("CPU", 0)), default=None)
    has = (
        f"; the largest has {biggest.resources.get('CPU', 0):g} CPUs, {biggest.resources.get('GPU', 0):g} GPUs"
        if biggest
        else ""
    )
    raise EngineError(f"{job.name} asks for {req.describe()}, more than {where} has{has}")


# --- inside the task: GPUs and the container (run on the node Ray chose) ----------------


VENDOR_ENV = "HETFLOW_GPU_VENDOR"  # how the task learns whose device nodes to pass (amd, intel)
MIG_ENV = "HETFLOW_MIG_PROFILE"  # how the task learns it takes a MIG instance (``with_mig``); not passed on
_DRM_ENV = {"amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"), "intel": ("ZE_AFFINITY_MASK",)}


def with_vendor(job: Job) -> ContainerSpec:
    """The job's container spec, marked with its GPU vendor when that is AMD or Intel (the
    task passes their DRM render nodes instead of nvidiaN: ``with_gpus``), with its MIG
    profile (``with_mig``), and with a share's variables as this machine gives them
    (``execute/devices/gpu.py``: HETFLOW_GPU_SHARE, and HETFLOW_GPU_SHARING for NVIDIA)."""
    req = job.gpu_request
    if req is None:
        return job.container
    env = dict(job.container.env)
    if req.vendor in _DRM_ENV:
        env[VENDOR_ENV] = req.vendor
    if req.kind == "mig" and req.mig:
        env[MIG_ENV] = req.mig
    if req.kind == "share":
        env["HETFLOW_GPU_SHARE"] = f"{float(req.share or 0.0):g}"
        if req.vendor not in _DRM_ENV:
            sharing = job.gpu_sharing
            env["HETFLOW_GPU_SHARING"] = sharing.mode if sharing is not None and sharing.shared else "time-slicing"
    return replace(job.container, env=env) if env != job.container.env else job.container


def with_mig(spec: ContainerSpec, mig: MigInstance, device_dir: str) -> ContainerSpec:
    """The spec with exactly one MIG instance, as this machine gives it (``gpu._nvidia_mig``):
    the parent GPU's node, only the instance's nvidia-caps nodes, the control nodes of
    ``device_dir``, and its UUID in NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES."""
    env = {k: v for k, v in spec.env.items() if k != MIG_ENV} | mig.env()
    devices = tuple(d for d in spec.devices if not os.path.basename(d[1]).startswith("nvidia"))
    devices += mig.devices()
    devices += tuple((f"{device_dir}/{c}", f"/dev/{c}") for c in CONTROL_DEVICES if os.path.exists(f"{device_dir}/{c}"))
    return replace(spec, env=env, devices=devices)


def with_gpus(spec: ContainerSpec, gpu_ids: Sequence[int], device_dir: str) -> ContainerSpec:
    """The spec with exactly the GPUs Ray assigned: their device nodes from ``device_dir``
    and the control nodes found there; inside numbered 0..n-1.  Real GPUs (``/dev``)
    go by CDI when a spec exists, else with the driver's libraries mounted.  AMD and Intel
    GPUs (``HETFLOW_GPU_VENDOR``) get their render nodes ``dri/renderD<128+id>`` (AMD with
    ``kfd``) and ROCR_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES or ZE_AFFINITY_MASK."""
    vendor = spec.env.get(VENDOR_ENV, "")
    if vendor in _DRM_ENV and gpu_ids:
        return _with_drm(spec, gpu_ids, device_dir, vendor)
    env = {k: v for k, v in spec.env.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
    devices = tuple(d for d in spec.devices if not os.path.basename(d[1]).startswith("nvidia"))
    if not gpu_ids:
        return replace(spec, env={**env, "NVIDIA_VISIBLE_DEVICES": "void"}, devices=devices)
    inside = ",".join(str(i) for i in range(len(gpu_ids)))
    env |= {
        "NVIDIA_VISIBLE_DEVICES": inside,
        "CUDA_VISIBLE_DEVICES": inside,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    env["HETFLOW_RAY_GPU_IDS"] = ",".join(str(i) for i in gpu_ids)
    real = os.path.realpath(device_dir) == "/dev"
    if real:
        cdi = cdi_device_names()
        if all(str(i) in cdi for i in gpu_ids):
            return replace(spec, env=env, devices=devices, cdi_devices=tuple(f"nvidia.com/gpu={i}" for i in gpu_ids))
    minors = [_minor(i) if real else i for i in gpu_ids]
    devices += tuple((f"{device_dir}/nvidia{m}", f"/dev/nvidia{m}") for m in minors)
    devices += tuple((f"{device_dir}/{c}", f"/dev/{c}") for c in CONTROL_DEVICES if os.path.exists(f"{device_dir}/{c}"))
    mounts = spec.mounts
    if real and (libs := driver_mounts()):
        mounts += tuple(libs)
        env["LD_LIBRARY_PATH"] = f"{DRIVER_DIR}/lib64"
    return replace(spec, env=env, devices=devices, mounts=mounts)


def _with_drm(spec: ContainerSpec, gpu_ids: Sequence[int], device_dir: str, vendor: str) -> ContainerSpec:
    inside = ",".join(str(i) for i in range(len(gpu_ids)))
    env = {k: v for k, v in spec.env.items() if k != VENDOR_ENV}  # the task's marker, not the step's
    env |= {**dict.fromkeys(_DRM_ENV[vendor], inside), "HETFLOW_RAY_GPU_IDS": ",".join(map(str, gpu_ids))}
    devices = spec.devices + tuple(
        (f"{device_dir}/dri/renderD{128 + i}", f"/dev/dri/renderD{128 + i}") for i in gpu_ids
    )
    if vendor == "amd" and os.path.exists(f"{device_dir}/kfd"):
        devices += ((f"{device_dir}/kfd", "/dev/kfd"),)
    return replace(spec, env=env, devices=devices)


def _minor(index: int) -> int:
    """A real GPU's device minor (/dev/nvidiaM) from its NVML index; they differ on some
    machines, and the driver matches nodes to GPUs by minor."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(index)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this node: the usual case, minor = index
        return index
