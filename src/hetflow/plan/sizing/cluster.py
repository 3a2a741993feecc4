"""Cluster and catalog files: the machines a plan may use, by node type.

A cluster file says what exists (``kind: Cluster``); a catalog says what could be rented
(``kind: Catalog``, ``count`` = the most of that type one may rent).  Both list node types
with one schema, so the planner, and later the Slurm and Ray backends, read them alike::

    apiVersion: hetflow/v1
    kind: Cluster
    name: hetero-16
    bandwidth: 10Gbit/s            # or 1.25GB/s, or a number of bytes/s
    nodeTypes:
      - {name: cpu.std, count: 8, cores: 16, speed: 1.0, memory: 64Gi, price: 0.68}
      - name: gpu.a100
        count: 1
        cores: 48
        speed: 1.2
        memory: 384Gi
        gpus: {model: NVIDIA A100-SXM4-40GB, count: 4, memory: 40Gi, computeCapability: "8.0"}
        price: 16.39
    nodes: []                       # entries of `hetflow nodes --json`: one class each

Node types become ``MachineClass`` values (Nomad's computed node classes): machines of one
type are alike for placement, so feasibility is decided once per type.  Errors are
``SpecError`` problems with the file's line, as for workflow files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from hetflow.errors import Problem, SpecError
from hetflow.inventory import Gpu, GpuSharing, Node, node_fields
from hetflow.plan.gpuspec import GPU_SPEEDS as GPU_SPEEDS
from hetflow.plan.gpuspec import GpuSpec as GpuSpec
from hetflow.plan.gpuspec import default_gpu_speed
from hetflow.plan.instance import GpuKind, MachineClass
from hetflow.spec import (
    compose_yaml,
    did_you_mean,
    line_of,
    parse_memory,
    problem_from_error,
    read_yaml_text,
)

CLASS_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?\Z")
CLASS_NAME_HINT = "use 1-63 letters, digits, '.', '-' or '_', starting and ending alphanumeric"

# --- bandwidth --------------------------------------------------------------------------

_BW_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(\S*)\s*$")
_BIT_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BYTE_PREFIX = {
    "": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4,
}  # fmt: skip
_BW_HINT = "write e.g. 10Gbit/s, 1.25GB/s, 100Mbps or a number of bytes per second"


def parse_bandwidth(value: object) -> float:
    """Bytes per second from ``10Gbit/s``, ``10Gbps``, ``1.25GB/s``, ``800MiB/s`` or a number.

    Network rates use decimal prefixes (a 10 Gbit/s link carries 1.25e9 bytes/s); ``Ki``,
    ``Mi``... are binary, as in memory sizes."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a bandwidth; {_BW_HINT}")
    if isinstance(value, int | float):
        rate = float(value)
    else:
        m = _BW_RE.match(str(value))
        if not m:
            raise ValueError(f"{value!r} is not a bandwidth; {_BW_HINT}")
        number, unit = float(m.group(1)), m.group(2)
        scale, table, prefix = 1.0, _BYTE_PREFIX, ""
        if unit:
            per_second = next((unit[: -len(s)] for s in ("/s", "ps") if unit.endswith(s)), None)
            if per_second is None:
                raise ValueError(f"{value!r}: a bandwidth is per second; {_BW_HINT}")
            if per_second.endswith(("bit", "b")):
                prefix, scale, table = per_second.removesuffix("bit").removesuffix("b"), 1 / 8, _BIT_PREFIX
            elif per_second.endswith("B"):
                prefix = per_second.removesuffix("B")
            else:
                raise ValueError(f"{value!r}: unknown unit {unit!r}; {_BW_HINT}")
        if prefix not in table:
            raise ValueError(f"{value!r}: unknown unit {unit!r}; {_BW_HINT}")
        rate = number * table[prefix] * scale
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"a bandwidth must be positive and finite, got {value!r}")
    return rate


Bandwidth = Annotated[float, BeforeValidator(parse_bandwidth)]
Memory = Annotated[int, BeforeValidator(parse_memory)]

# --- the file's models ------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class NodeType(_Model):
    """``count`` alike machines: in a cluster, how many there are; in a catalog, the most
    that can be rented."""

    name: str
    count: int = Field(ge=0)
    cores: int = Field(ge=1, description="logical CPUs")
    speed: float = Field(default=1.0, gt=0, description="CPU steps run estimate / speed")
    memory: Memory
    gpus: GpuSpec | None = None
    price: float = Field(default=0.0, ge=0, description="dollars per hour")
    microarchitecture: str = "x86_64"
    labels: dict[str, str] = Field(default_factory=dict)
    rdma: bool = Field(default=False, description="the nodes have an RDMA device (InfiniBand / RoCE)")
    spot: bool = Field(default=False, description="spot / preemptible nodes: may vanish under a step")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not CLASS_NAME_RE.match(v):
            raise ValueError(f"node type name {v!r} is not valid: {CLASS_NAME_HINT}")
        return v

    def machine_class(self, count: int | None = None) -> MachineClass:
        g = self.gpus
        return MachineClass(
            name=self.name,
            count=self.count if count is None else count,
            cores=self.cores,
            memory=self.memory,
            speed=self.speed,
            gpus=g.count if g else 0,
            gpu_model=g.model if g else "",
            gpu_memory=g.memory if g else 0,
            gpu_cc=g.cc_tuple if g else (0, 0),
            gpu_speed=g.resolved_speed if g else 1.0,
            gpu_cuda=g.cuda if g else "",
            price_per_hour=self.price,
            microarchitecture=self.microarchitecture,
            labels=tuple(sorted(self.labels.items())),
            gpu_link=(g.link or "") if g else "",
            nvlink_gpus=(g.nvlink_gpus or g.count) if g and g.link == "nvlink" else 0,
            rdma=self.rdma,
            gpu_vendor=g.vendor if g else "nvidia",
            gpu_arch=g.architecture if g else "",
            gpu_rocm=g.rocm if g else "",
            gpu_sharing=g.sharing if g else GpuSharing(),
            mig=g.mig if g else (),
            spot=self.spot,
        )


def node_class(node: Node) -> MachineClass:
    """A probed machine as a class of one, named after the node.

    A node description has no CPU speed or price: they are 1.0 and 0.  Its GPUs' speed
    comes from ``GPU_SPEEDS`` (1.0 for a model not in the table).  The class-wide ``gpu_*``
    fields describe its weakest GPU (the least memory, compute capability and speed); when
    its GPUs are unlike (vendors, models, MIG layouts) ``gpu_kinds`` lists each one, so a
    vendor-amd step is given only the AMD GPUs of a machine that also has an NVIDIA one."""
    gpus = node.gpus
    kinds = tuple(_gpu_kind(g) for g in gpus)
    first = kinds[0] if kinds else GpuKind()
    return MachineClass(
        name=node.name,
        count=1,
        cores=node.cpu.cores,
        memory=node.memory_bytes,
        speed=1.0,
        gpus=len(gpus),
        gpu_model=gpus[0].model if gpus else "",
        gpu_memory=min((g.memory_bytes for g in gpus), default=0),
        gpu_cc=min((g.compute_capability_tuple for g in gpus), default=(0, 0)),
        gpu_speed=min((_gpu_speed(g) for g in gpus), default=1.0),
        gpu_cuda=min((g.cuda_version or "" for g in gpus), default="", key=_version_key),
        microarchitecture=node.cpu.microarchitecture,
        labels=tuple(sorted(node.labels.items())),
        gpu_link="nvlink" if _nvlink_domain(node) >= 2 else ("pcie" if node.gpu_links else ""),
        nvlink_gpus=_nvlink_domain(node) if _nvlink_domain(node) >= 2 else 0,
        gpu_vendor=first.vendor,
        gpu_arch=first.arch,
        gpu_rocm=min((k.rocm for k in kinds), default="", key=_version_key),
        gpu_sharing=node.gpu_sharing,
        mig=first.mig,
        gpu_kinds=kinds if len(set(kinds)) > 1 else (),
    )


def _gpu_kind(g: Gpu) -> GpuKind:
    return GpuKind(
        vendor=g.vendor,
        model=g.model,
        memory=g.memory_bytes,
        cc=g.compute_capability_tuple,
        arch=g.architecture,
        speed=_gpu_speed(g),
        cuda=g.cuda_version or "",
        rocm=g.rocm_version or "",
        mig=tuple(d.profile for d in g.mig) if g.mig_enabled else (),
    )


def _nvlink_domain(node: Node) -> int:
    """The most GPUs of ``node`` that NVLink joins pairwise (greedy; 0 without NVLink)."""
    best = 0
    for seed in node.gpus:
        group = [seed.index]
        for g in node.gpus:
            if g.index not in group and all(node.nvlinked(g.index, h) for h in group):
                group.append(g.index)
        best = max(best, len(group) if len(group) > 1 else 0)
    return best


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit()) if v else (0,)


def _gpu_speed(gpu: Gpu) -> float:
    speed = default_gpu_speed(gpu.model)
    return 1.0 if speed is None else speed


ProbedNode = Annotated[Node, BeforeValidator(node_fields)]


class _Machines(_Model):
    api_version: Literal["hetflow/v1"] = Field(alias="apiVersion")
    name: str = Field(min_length=1)
    bandwidth: Bandwidth = Field(default=1.25e9, description="bytes/s between two machines")
    node_types: tuple[NodeType, ...] = Field(default=(), alias="nodeTypes")

    @field_validator("node_types")
    @classmethod
    def _unique(cls, v: tuple[NodeType, ...]) -> tuple[NodeType, ...]:
        names = [t.name for t in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"node type name(s) {', '.join(map(repr, dup))} used twice; names must be unique")
        return v

    @property
    def bandwidth_bytes(self) -> float:
        """Bytes per second between two machines (data on one machine moves for free)."""
        return self.bandwidth


class Cluster(_Machines):
    """The machines that exist: node types, plus probed nodes as classes of one."""

    kind: Literal["Cluster"]
    nodes: tuple[ProbedNode, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Cluster:
        names = [t.name for t in self.node_types] + [n.name for n in self.nodes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"name(s) {', '.join(map(repr, dup))} used by a node type and a node, or by two nodes")
        if sum(t.count for t in self.node_types) + len(self.nodes) == 0:
            raise ValueError("the cluster has no machines; give a nodeType with count >= 1 or a node")
        return self

    def classes(self) -> tuple[MachineClass, ...]:
        """Node types in file order (those with count 0 left out), then the probed nodes."""
        return tuple(t.machine_class() for t in self.node_types if t.count > 0) + tuple(
            node_class(n) for n in self.nodes
        )


class Catalog(_Machines):
    """Node types that can be rented, ``count`` being the most of each one may rent."""

    kind: Literal["Catalog"]

    @model_validator(mode="after")
    def _check(self) -> Catalog:
        if not self.node_types:
            raise ValueError("the catalog lists no node types")
        return self

    def classes(self) -> tuple[MachineClass, ...]:
        """Every node type at its maximum count."""
        return tuple(t.machine_class() for t in self.node_types if t.count > 0)

    def cluster(self, counts: Mapping[str, int], name: str | None = None) -> Cluster:
        """A virtual cluster renting ``counts[type]`` machines of each type (others: none).

        Raises ``ValueError`` naming the type when a count is unknown or above the maximum."""
        known = {t.name: t for t in self.node_types}
        for tname, n in counts.items():
            if tname not in known:
                raise ValueError(f"the catalog has no node type {tname!r}{did_you_mean(tname, known)}")
            if not 0 <= n <= known[tname].count:
                raise ValueError(f"node type {tname!r}: {n} asked, the catalog rents 0 to {known[tname].count}")
        return Cluster(
            apiVersion="hetflow/v1",
            kind="Cluster",
            name=name or self.name,
            bandwidth=self.bandwidth,
            nodeTypes=tuple(t.model_copy(update={"count": counts.get(t.name, 0)}) for t in self.node_types),
        )


# --- loading ----------------------------------------------------------------------------

_Kind = TypeVar("_Kind", "Cluster", "Catalog")  # the file kinds read here
_Loc = tuple[str | int, ...]  # a place in a YAML document (spec.yamlfile)


def load_cluster(path: str | Path) -> Cluster:
    """Read a ``kind: Cluster`` file; raise SpecError listing every problem with its line."""
    return _load(path, Cluster)


def parse_cluster(text: str, file: str = "<cluster>") -> Cluster:
    return _parse(text, file, Cluster)


def load_catalog(path: str | Path) -> Catalog:
    return _load(path, Catalog)


def parse_catalog(text: str, file: str = "<catalog>") -> Catalog:
    return _parse(text, file, Catalog)


def _load(path: str | Path, kind: type[_Kind]) -> _Kind:
    p = Path(path)
    return _parse(read_yaml_text(p, f"a {kind.__name__.lower()} YAML"), str(p), kind)


def _probed_nodes(data: object) -> bool:
    """Whether ``data`` is what ``hetflow nodes --json`` prints (a list of node descriptions,
    or one): machines described by discovery rather than a cluster file."""
    entries = data if isinstance(data, list) else [data]
    return bool(entries) and all(isinstance(e, dict) and "cpu" in e and "kind" not in e for e in entries)


def _as_cluster(data: object, lines: Mapping[_Loc, int], file: str) -> tuple[dict[str, object], dict[_Loc, int]]:
    """``hetflow nodes --json`` output as a cluster of those nodes (each a class of one), its
    lines kept for the problems' sake."""
    entries = data if isinstance(data, list) else [data]
    prefix: _Loc = ("nodes",) if isinstance(data, list) else ("nodes", 0)
    moved = {(*prefix, *loc): line for loc, line in lines.items()}
    cluster: dict[str, object] = {
        "apiVersion": "hetflow/v1",
        "kind": "Cluster",
        "name": Path(file).stem or "nodes",
        "nodes": entries,
    }
    return cluster, moved


def _parse(text: str, file: str, kind: type[_Kind]) -> _Kind:
    want = kind.__name__
    shape = f"a {want.lower()} file is a YAML mapping with apiVersion, kind: {want}, name and nodeTypes"
    if not text.strip():
        raise SpecError([Problem(file, 1, f"the file is empty; {shape}")])
    data, lines, problems = compose_yaml(text, file)
    if problems:
        raise SpecError(problems)
    if kind is Cluster and _probed_nodes(data):
        data, lines = _as_cluster(data, lines, file)
    if not isinstance(data, dict):
        raise SpecError([Problem(file, 1, shape + ", or what `hetflow nodes --json` prints")])
    got = data.get("kind")
    if got != want:
        other = "load_catalog" if got == "Catalog" else "load_cluster" if got == "Cluster" else None
        hint = f" (this is a {got}; read it with {other})" if other else ""
        raise SpecError([Problem(file, line_of(lines, ("kind",)), f"kind {got!r} is not {want!r}{hint}")])
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        raise SpecError([problem_from_error(err, file, lines, kind) for err in exc.errors()]) from None
