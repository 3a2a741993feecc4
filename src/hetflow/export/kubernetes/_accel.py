"""A step's accelerator request as Kubernetes device-plugin resources and the node labels
the GPU labellers publish (pure functions over ``spec`` and ``plan`` values); the names and
the limits are ``hetflow.kube``'s, shared with the live backend, the node affinity is the
export's own (the live backend pins the planned class's nodes by hostname).

Resources (container limits; extended resources are limits only):

- NVIDIA whole GPUs: ``nvidia.com/gpu: N`` (NVIDIA k8s-device-plugin).
- A share on a time-slicing class: ``nvidia.com/gpu: 1``, one *replica*.  The device plugin's
  config ``sharing.timeSlicing.resources: [{name: nvidia.com/gpu, replicas: R}]`` advertises
  R replicas per GPU, R being the class's ``gpu_sharing.replicas``; a pod asking for one gets
  a turn on one GPU (with ``renameByDefault: true`` the resource is ``nvidia.com/gpu.shared``:
  the export's ``shared_resource`` argument).  More than one replica would not be one GPU.
- A share on an MPS class: ``nvidia.com/gpu: 1`` under ``sharing.mps`` (the plugin runs the
  MPS control daemon and holds each replica to 1/R of the GPU's SMs and memory itself).
- A MIG instance: ``nvidia.com/mig-<profile>: 1`` (``migStrategy: mixed``).
- AMD: ``amd.com/gpu: N`` (ROCm k8s-device-plugin); Intel: ``gpu.intel.com/i915: N``
  (intel-device-plugins-for-kubernetes; ``gpu.intel.com/xe`` on nodes with the xe driver).
  Neither plugin time-slices: an AMD/Intel share asks for one whole device
  (the Intel plugin's ``-shared-dev-num`` makes one device count as several).

Node labels (node affinity ``matchExpressions``):

- GPU Feature Discovery: ``nvidia.com/gpu.product`` (blanks as dashes, ``-SHARED`` suffix
  under sharing), ``nvidia.com/gpu.sharing-strategy`` (none | time-slicing | mps),
  ``nvidia.com/gpu.replicas``, ``nvidia.com/mig.strategy``, ``nvidia.com/mig-<profile>.count``.
- AMD node labeller: ``amd.com/gpu.family`` (on every AMD GPU node), ``amd.com/gpu.product-name``
  (blanks as underscores: AMD_Instinct_MI300X_OAM).
- Intel (NFD rules shipped with the device plugin): ``intel.feature.node.kubernetes.io/gpu=true``
  and, for data-centre GPUs, ``gpu.intel.com/product`` (Max_1550, Flex_170).
"""

from __future__ import annotations

import re

from hetflow.export.kubernetes._common import Obj
from hetflow.kube import (
    AMD_FAMILY,
    AMD_PRODUCT,
    GFD_MIG_STRATEGY,
    GFD_PRODUCT,
    GFD_REPLICAS,
    GFD_SHARING,
    INTEL_GPU,
    INTEL_PRODUCT,
    label_value,
    planned_vendor,
)
from hetflow.plan import MachineClass
from hetflow.spec import GpuRequest


def gpu_expressions(req: GpuRequest, cls: MachineClass) -> list[Obj]:
    """Node requirements for a GPU step on the planned class: product, sharing, MIG layout."""
    vendor = planned_vendor(req, cls.gpu_vendor) if req.any else cls.gpu_vendor
    if vendor == "amd":
        out: list[Obj] = [{"key": AMD_FAMILY, "operator": "Exists"}]
        if cls.gpu_model:
            out.append({"key": AMD_PRODUCT, "operator": "In", "values": [amd_product(cls.gpu_model)]})
        return out
    if vendor == "intel":
        out = [{"key": INTEL_GPU, "operator": "In", "values": ["true"]}]
        product = intel_product(cls.gpu_model)
        if product:
            out.append({"key": INTEL_PRODUCT, "operator": "In", "values": [product]})
        return out
    product = label_value("-".join(cls.gpu_model.split()))
    if req.kind == "mig":
        # mixed strategy: each profile its own resource and count label (GFD)
        return [
            {"key": GFD_MIG_STRATEGY, "operator": "In", "values": ["mixed"]},
            {"key": f"nvidia.com/mig-{req.mig}.count", "operator": "Gt", "values": ["0"]},
        ]
    sharing = cls.gpu_sharing
    if req.kind == "share" and sharing.shared:
        return [
            {"key": GFD_PRODUCT, "operator": "In", "values": [product, f"{product}-SHARED"]},
            {"key": GFD_SHARING, "operator": "In", "values": [sharing.mode]},
            {"key": GFD_REPLICAS, "operator": "In", "values": [str(sharing.replicas)]},
        ]
    if req.kind != "whole":  # a CPU step on a GPU class: the class's product is enough
        return [{"key": GFD_PRODUCT, "operator": "In", "values": [product, f"{product}-SHARED"]}]
    # whole GPUs: a node that time-slices would give a replica, not a device
    return [
        {"key": GFD_PRODUCT, "operator": "In", "values": [product, f"{product}-SHARED"]},
        {"key": GFD_SHARING, "operator": "NotIn", "values": ["time-slicing", "mps"]},
    ]


def amd_product(model: str) -> str:
    """The AMD labeller's product-name value: blanks as underscores."""
    return label_value("_".join(model.split()))


def intel_product(model: str) -> str:
    """The Intel NFD rule's product value (Max_1550, Flex_170), or '' for another model."""
    m = re.search(r"\b(Max|Flex)\s+(\d+)", model, re.IGNORECASE)
    return f"{m.group(1).capitalize()}_{m.group(2)}" if m else ""
