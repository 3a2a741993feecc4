"""The cluster as the planner sees it, read from the API server: Nodes (capacity,
allocatable, labels from node-feature-discovery and NVIDIA GPU Feature Discovery, taints,
readiness) and ResourceSlices (DRA devices of NVIDIA's driver, ``gpu.nvidia.com``) become
hetflow's machines (``plan.Cluster`` node types).

Nodes alike (same allocatable CPUs and memory, same GPUs, same architecture) form one node
type; a type of one node is named after it (the plan pins that node), a larger one
``k8s-<cores>c-<memory>g[-<count>x<gpu>]`` with its member nodes kept here, so an attempt
planned on the type may land on any of them (node affinity on their hostnames).  Nodes not
Ready, cordoned, or tainted against hetflow's pods (a NoSchedule or NoExecute taint other
than a GPU resource's, which GPU pods tolerate) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hetflow.execute.backends.kubernetes.api import Forbidden, KubeApi
from hetflow.execute.backends.kubernetes.settings import KubernetesSettings
from hetflow.inventory import KNOWN_MODELS
from hetflow.kube import DRA_DRIVER, VENDOR_RESOURCE

if TYPE_CHECKING:
    from hetflow.execute.backends.plugin import RunSettings

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_MAJOR, GFD_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
RESOURCES = {resource: vendor for vendor, resource in VENDOR_RESOURCE.items()}  # GPU resource -> vendor
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity (``64Gi``, ``500m``, ``8``) as a number."""
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text).strip())
    if m is None:
        return 0.0
    number, unit = float(m.group(1)), m.group(2)
    return number / 1000 if unit == "m" else number * _UNITS.get(unit, 1)


def gpu_model(label: str) -> str:
    """GFD's product label (blanks as dashes) as the product name NVML reports, where known."""
    for known in KNOWN_MODELS.values():
        if "-".join(known.product.split()) == label or "-".join(known.product.split()) + "-SHARED" == label:
            return known.product
    return label.removesuffix("-SHARED").replace("-", " ")


@dataclass(frozen=True)
class KubeNode:
    name: str
    cores: int
    memory: int
    arch: str = "amd64"
    gpus: int = 0
    vendor: str = "nvidia"
    model: str = ""
    gpu_memory: int = 0
    compute_capability: str = ""
    dra: bool = False  # its GPUs are DRA devices (ResourceSlices), not a device-plugin resource
    labels: Mapping[str, str] = field(default_factory=dict)

    def shape(self) -> tuple[Any, ...]:
        return (self.cores, self.memory, self.arch, self.gpus, self.vendor, self.model, self.gpu_memory, self.dra)


def read_nodes(nodes: Sequence[Mapping[str, Any]], slices: Sequence[Mapping[str, Any]]) -> list[KubeNode]:
    """Schedulable, Ready nodes with what they offer (pure: the API's JSON in)."""
    devices: dict[str, list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s.get("spec", {})
        if spec.get("driver") == DRA_DRIVER and spec.get("nodeName"):
            devices.setdefault(spec["nodeName"], []).extend(spec.get("devices") or ())
    out = []
    for n in nodes:
        meta, spec, status = n["metadata"], n.get("spec", {}), n.get("status", {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
        if not ready or spec.get("unschedulable") or _repelled(spec.get("taints") or ()):
            continue
        labels = meta.get("labels") or {}
        alloc = status.get("allocatable") or status.get("capacity") or {}
        kw: dict[str, Any] = {}
        gpus = {RESOURCES[k]: int(quantity(v)) for k, v in alloc.items() if k in RESOURCES and quantity(v) > 0}
        if gpus:
            vendor, count = next(iter(gpus.items()))
            kw = {
                "gpus": count,
                "vendor": vendor,
                "model": gpu_model(labels.get(GFD_PRODUCT, "")) if vendor == "nvidia" else "",
            }
            kw["gpu_memory"] = int(quantity(labels.get(GFD_MEMORY, "0"))) * 2**20
            if labels.get(GFD_MAJOR):
                kw["compute_capability"] = f"{labels[GFD_MAJOR]}.{labels.get(GFD_MINOR, '0')}"
        elif devices.get(meta["name"]):
            kw = _dra_gpus(devices[meta["name"]])
        out.append(
            KubeNode(
                name=meta["name"],
                cores=int(quantity(alloc.get("cpu", "1"))),
                memory=int(quantity(alloc.get("memory", "0"))),
                arch=labels.get("kubernetes.io/arch", "amd64"),
                labels=labels,
                **kw,
            )
        )
    return out


def _repelled(taints: Sequence[Mapping[str, Any]]) -> bool:
    """A taint hetflow's pods do not tolerate keeps them off the node: any NoSchedule or
    NoExecute taint but the GPU resources' own (GPU pods tolerate those, ``translate``)."""
    return any(t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") not in RESOURCES for t in taints)


def _dra_gpus(devices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    first = devices[0]
    attrs = first.get("attributes") or {}
    capacity = first.get("capacity") or {}
    cc = str((attrs.get("cudaComputeCapability") or {}).get("version", ""))
    return {
        "gpus": len(devices),
        "vendor": "nvidia",
        "model": str((attrs.get("productName") or {}).get("string", "")),
        "gpu_memory": int(quantity((capacity.get("memory") or {}).get("value", "0"))),
        "compute_capability": ".".join(cc.split(".")[:2]),
        "dra": True,
    }


def node_types(nodes: Sequence[KubeNode]) -> tuple[list[dict[str, Any]], dict[str, tuple[str, ...]]]:
    """Node types for ``plan.Cluster`` (dicts in the cluster file's spelling) and each
    type's member nodes."""
    groups: dict[tuple[Any, ...], list[KubeNode]] = {}
    for n in sorted(nodes, key=lambda n: n.name):
        groups.setdefault(n.shape(), []).append(n)
    types, members = [], {}
    for group in groups.values():
        n = group[0]
        name = n.name if len(group) == 1 else _type_name(n)
        members[name] = tuple(m.name for m in group)
        t: dict[str, Any] = {
            "name": name,
            "count": len(group),
            "cores": max(1, n.cores),
            "memory": max(n.memory, 2**20),
        }
        t["microarchitecture"] = {"amd64": "x86_64", "arm64": "aarch64"}.get(n.arch, n.arch)
        if n.gpus:
            gpu: dict[str, Any] = {"model": n.model or "unknown", "count": n.gpus, "vendor": n.vendor}
            if n.gpu_memory:
                gpu["memory"] = n.gpu_memory
            if n.compute_capability:
                gpu["computeCapability"] = n.compute_capability
            t["gpus"] = gpu
        types.append(t)
    return types, members


def _type_name(n: KubeNode) -> str:
    name = f"k8s-{n.cores}c-{round(n.memory / 2**30)}g"
    if n.gpus:
        model = re.sub(r"[^a-z0-9]+", "-", n.model.lower()).strip("-") or n.vendor
        name += f"-{n.gpus}x{model}{'-dra' if n.dra else ''}"
    return name


class Inventory:
    """The cluster's nodes, read once per backend (a run plans once)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._nodes: list[KubeNode] | None = None
        self._members: dict[str, tuple[str, ...]] = {}

    @property
    def title(self) -> str:
        """The cluster, as messages name it: its API server and kubeconfig."""
        return f"the Kubernetes cluster at {self.api.where}"

    def nodes(self) -> list[KubeNode]:
        if self._nodes is None:
            try:
                served = self.api.served("resource.k8s.io/v1")
                slices = self.api.items("/apis/resource.k8s.io/v1/resourceslices") if served else []
                self._nodes = read_nodes(self.api.items("/api/v1/nodes"), slices)
            except Forbidden as exc:
                raise Forbidden(
                    f"{exc}. hetflow plans on the cluster's nodes: grant list on nodes and resourceslices "
                    "(a ClusterRole), or plan on a cluster file (--cluster FILE)"
                ) from None
            self._members = node_types(self._nodes)[1]
        return self._nodes

    def types(self) -> tuple[list[dict[str, Any]], dict[str, tuple[str, ...]]]:
        """The node types and each one's member nodes (``node_types``)."""
        return node_types(self.nodes())

    def cluster(self, name: str = "kubernetes") -> dict[str, Any]:
        """The cluster file's mapping (``plan.load_cluster``'s input) for these nodes."""
        types, _ = node_types(self.nodes())
        return {"apiVersion": "hetflow/v1", "kind": "Cluster", "name": name, "nodeTypes": types}

    def members(self, node_type: str) -> tuple[str, ...]:
        self.nodes()
        return self._members.get(node_type, (node_type,))

    def dra(self, names: Sequence[str]) -> bool:
        """Whether the GPUs of these nodes (any node, when none is named) are DRA devices."""
        nodes = [n for n in self.nodes() if n.gpus and (not names or n.name in names)]
        return bool(nodes) and all(n.dra for n in nodes)


def list_nodes(settings: RunSettings) -> Inventory:
    """The nodes of the cluster the run's ``kubernetes:`` section names (kubeconfig, context):
    the plugin's ``nodes`` (``backends.plugin.ListsNodes``)."""
    return Inventory(KubeApi(KubernetesSettings.from_backend(settings)))
