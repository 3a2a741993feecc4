"""GPUs in Kubernetes' words: the device plugins' resource names per vendor, the labels the
GPU labellers publish, NVIDIA's DRA driver, and what a step's request becomes as container
limits and a toleration (pure functions over ``spec.GpuRequest`` and the planned vendor).

Resources (container limits; extended resources are limits only):

- NVIDIA whole GPUs: ``nvidia.com/gpu: N`` (NVIDIA k8s-device-plugin).
- A share (time-slicing or MPS): ``nvidia.com/gpu: 1``, one *replica* of the device plugin's
  ``sharing`` config (``nvidia.com/gpu.shared`` with ``renameByDefault: true``).
- A MIG instance: ``nvidia.com/mig-<profile>: 1`` (``migStrategy: mixed``).
- AMD: ``amd.com/gpu: N`` (ROCm k8s-device-plugin); Intel: ``gpu.intel.com/i915: N``
  (intel-device-plugins-for-kubernetes).  Neither plugin time-slices: a share asks for one
  whole device.

A step with ``vendor: any`` gets the planned node class's vendor's resource: the plan put it
on that class, so that is what its nodes advertise (asking ``nvidia.com/gpu`` on an AMD node
would leave the pod pending for ever).
"""

from __future__ import annotations

from hetflow.spec import GpuRequest

NVIDIA_RESOURCE = "nvidia.com/gpu"
AMD_RESOURCE = "amd.com/gpu"
INTEL_RESOURCE = "gpu.intel.com/i915"
MIG_RESOURCE = "nvidia.com/mig-"  # + profile, e.g. nvidia.com/mig-1g.10gb (mixed strategy)
SHARED_RESOURCE = "nvidia.com/gpu.shared"  # time-slicing with renameByDefault: true
VENDOR_RESOURCE = {"nvidia": NVIDIA_RESOURCE, "amd": AMD_RESOURCE, "intel": INTEL_RESOURCE}
# Prefixes of every GPU resource above (a pod's limits, the kubelet's allocatedResourcesStatus)
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")
DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver: the attribute and capacity domain

# GPU Feature Discovery's labels (GFD README, "Generated Labels"): the product name with
# blanks as dashes (a "-SHARED" suffix under time-slicing with renameByDefault), memory in
# MiB, the compute capability in two integers, the sharing strategy and replicas, MIG.
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"
GFD_SHARING = "nvidia.com/gpu.sharing-strategy"
GFD_REPLICAS = "nvidia.com/gpu.replicas"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"
# AMD's node labeller; Intel's NFD rules shipped with its device plugin.
AMD_FAMILY = "amd.com/gpu.family"
AMD_PRODUCT = "amd.com/gpu.product-name"
INTEL_GPU = "intel.feature.node.kubernetes.io/gpu"
INTEL_PRODUCT = "gpu.intel.com/product"


def planned_vendor(req: GpuRequest, class_vendor: str | None) -> str:
    """Whose GPUs the step gets: its own vendor, or for ``any`` the planned class's (NVIDIA
    when the class is not known)."""
    return (class_vendor or "nvidia") if req.vendor == "any" else req.vendor


def gpu_limits(req: GpuRequest, class_vendor: str | None, *, shared_resource: bool = False) -> dict[str, str]:
    """The container's device-plugin limits for ``req`` on a class of ``class_vendor``'s GPUs."""
    if not req.any:
        return {}
    vendor = planned_vendor(req, class_vendor)
    if req.kind == "mig":
        return {f"{MIG_RESOURCE}{req.mig}": "1"}
    if req.kind == "share":
        name = SHARED_RESOURCE if vendor == "nvidia" and shared_resource else VENDOR_RESOURCE[vendor]
        return {name: "1"}  # one replica (NVIDIA) or one device (AMD/Intel plugins do not slice)
    return {VENDOR_RESOURCE[vendor]: str(req.count)}


def gpu_toleration(req: GpuRequest, class_vendor: str | None) -> dict[str, str]:
    """What a pod on a GPU node class tolerates: GPU nodes are commonly tainted with their
    plugin's resource name, NoSchedule (GKE, AKS, NVIDIA's and AMD's operator guides); a MIG
    node too is tainted ``nvidia.com/gpu``.  A CPU step the plan put on a GPU class needs it
    as much as a GPU step."""
    vendor = planned_vendor(req, class_vendor) if req.any else (class_vendor or "nvidia")
    key = NVIDIA_RESOURCE if req.kind == "mig" else VENDOR_RESOURCE.get(vendor, NVIDIA_RESOURCE)
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}
