"""Feasibility filters: one family for every place that asks "can this variant run there?".

After the Kubernetes scheduler framework's Filter plugins: each filter looks at one
resource of (a variant's request, a node view) and answers a ``Status``; "does not fit"
is a value with a stable code and a reason for people, never an exception.

The same filters serve three callers through one ``NodeView``:
- the planner (``plan.build``), on a node class of the cluster file: alike machines, so
  each GPU attribute (model, compute capability, memory) is its own filter and every
  failure is recorded (``class_rejections``);
- the local preflight and variant choice (``plan.onemachine.choose``), on this machine, against its
  capacity ("never") or against what is free now ("now", worded as busy): its GPUs may
  differ, so they are counted one by one (``check``: the first failure explains);
- exporters, which explain why a step's other variants were not planned on a class
  (``first_class_rejection``).

The two chains below order the same plugins the way each caller has always reported
them, as scheduler profiles order plugins: labels last for a class (every failure is
listed), first for this machine (only the first one is).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hetflow.inventory import Gpu, GpuSharing, Node
from hetflow.plan.instance import MachineClass
from hetflow.spec import GpuConstraint, GpuRequest, Variant, format_bytes, mig_memory_gb


@dataclass(frozen=True)
class Status:
    """A filter's answer: ``code`` is a stable constant; ``reason`` is for people."""

    code: str = "ok"
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.code == "ok"


OK = Status()


@dataclass(frozen=True)
class Capacity:
    """CPUs, memory and GPUs: a node's total, or what is free on it now."""

    cpus: float
    memory: int
    gpus: tuple[Gpu, ...] = field(default=())

    @classmethod
    def of(cls, node: Node) -> Capacity:
        return cls(float(node.cpu.cores), node.memory_bytes, node.gpus)


@dataclass(frozen=True)
class GpuView:
    """One GPU as the filters see it: its vendor, and its MIG layout when MIG mode is on
    (whole GPUs in MIG mode are not given out, only their instances)."""

    model: str
    memory: int
    cc: tuple[int, int]
    cc_text: str
    vendor: str = "nvidia"
    mig: tuple[str, ...] = ()

    @classmethod
    def of(cls, gpu: Gpu) -> GpuView:
        mig = tuple(d.profile for d in gpu.mig) if gpu.mig_enabled else ()
        return cls(gpu.model, gpu.memory_bytes, gpu.compute_capability_tuple, gpu.compute_capability, gpu.vendor, mig)


@dataclass(frozen=True)
class NodeView:
    """A place a variant may run, in the filters' terms.

    ``uniform``: a node class (all GPUs alike: one reason per GPU attribute); otherwise a
    live node whose GPUs are counted one by one.  ``now``: the capacity is what is free
    now, so a shortfall is worded as busy.  ``labels`` None: labels are not checked."""

    name: str
    cpus: float
    memory: int
    gpus: tuple[GpuView, ...]
    labels: tuple[tuple[str, str], ...] | None
    now: bool = False
    uniform: bool = False
    sharing: GpuSharing = field(default_factory=GpuSharing)

    @classmethod
    def of_class(cls, c: MachineClass) -> NodeView:
        gpus = []
        for i in range(c.gpus):
            k = c.gpu_kind(i)
            gpus.append(GpuView(k.model, k.memory, k.cc, f"{k.cc[0]}.{k.cc[1]}", k.vendor, k.mig))
        return cls(c.name, float(c.cores), c.memory, tuple(gpus), c.labels, uniform=True, sharing=c.gpu_sharing)

    @classmethod
    def of_capacity(cls, cap: Capacity, *, where: str, now: bool, labels: Mapping[str, str] | None) -> NodeView:
        shown = None if labels is None else tuple(sorted(labels.items()))
        return cls(where, cap.cpus, cap.memory, tuple(GpuView.of(g) for g in cap.gpus), shown, now=now)


class Filter(Protocol):
    """One extension point: does ``variant`` fit ``view`` as far as one resource goes?"""

    @property
    def name(self) -> str: ...

    def __call__(self, variant: Variant, view: NodeView, /) -> Status: ...


# --- the rules, once: each GPU attribute ------------------------------------------------


def _plural(n: float, what: str) -> str:
    return f"{n:g} {what}" if n == 1 else f"{n:g} {what}s"


def _model_ok(model: str, want: GpuConstraint) -> bool:
    return not want.models or any(m.lower() in model.lower() for m in want.models)


def _cc_ok(cc: tuple[int, int], want: GpuConstraint, vendor: str = "nvidia") -> bool:
    """Compute capability is NVIDIA's: other vendors' GPUs are matched by architecture."""
    return vendor != "nvidia" or cc >= want.cc_tuple


def vendor_ok(gpu_vendor: str, want: str) -> bool:
    """``want`` ``any`` matches every vendor."""
    return want in ("any", gpu_vendor)


def _memory_ok(memory: int, want: GpuConstraint) -> bool:
    return memory >= want.min_memory


def _why_not(gpu: GpuView, want: GpuConstraint | None) -> str | None:
    if want is None:
        return None
    if not _memory_ok(gpu.memory, want):
        return f"{gpu.model} has {format_bytes(gpu.memory)}, needs {format_bytes(want.min_memory)}"
    if not _cc_ok(gpu.cc, want, gpu.vendor):
        return f"{gpu.model} has compute capability {gpu.cc_text}, needs {want.min_compute_capability}"
    if not _model_ok(gpu.model, want):
        return f"{gpu.model} is not one of {', '.join(want.models)}"
    return None


def gpu_qualifies(gpu: Gpu, want: GpuConstraint | None) -> str | None:
    """None when ``gpu`` meets ``want``, else why not."""
    return _why_not(GpuView.of(gpu), want)


def qualifying_gpus(variant: Variant, gpus: Sequence[Gpu]) -> list[Gpu]:
    """The GPUs of ``gpus`` the variant may be given: its vendor's (``any``: all), meeting
    its ``gpu`` constraints (compute capability for NVIDIA only)."""
    vendor = variant.gpu_request.vendor
    return [g for g in gpus if vendor_ok(g.vendor, vendor) and gpu_qualifies(g, variant.gpu) is None]


def _usable(g: GpuView, v: Variant) -> str | None:
    """None when ``v`` may use GPU ``g`` (vendor, constraints), else why not."""
    want = v.gpu_request.vendor
    if not vendor_ok(g.vendor, want):
        return f"{g.model} is {g.vendor}, not {want}"
    return _why_not(g, v.gpu)


# --- the plugins ------------------------------------------------------------------------


class _Labels:
    """``node_selector``: every label must be on the node, as Kubernetes' nodeSelector."""

    name = "labels"

    def __call__(self, v: Variant, view: NodeView) -> Status:
        if view.labels is None:
            return OK
        have = dict(view.labels)
        missing = [f"{k}={val}" for k, val in sorted(v.node_selector.items()) if have.get(k) != val]
        if not missing:
            return OK
        shown = ", ".join(f"{k}={val}" for k, val in view.labels) or "none"
        return Status("labels", f"needs node labels {', '.join(missing)}; {view.name} has {shown}")


@dataclass(frozen=True)
class _Amount:
    """A quantity the variant asks for (CPUs, memory) against what the view has."""

    name: str
    want: Callable[[Variant], float]
    have: Callable[[NodeView], float]
    busy: Callable[[float, float], str]  # (want, free) -> reason, for a view of what is free now
    never: Callable[[float, float, str], str]  # (want, capacity, place) -> reason

    def __call__(self, v: Variant, view: NodeView) -> Status:
        want, have = self.want(v), self.have(view)
        if want <= have:
            return OK
        if view.now:
            return Status(f"{self.name}_busy", self.busy(want, have))
        return Status(self.name, self.never(want, have, view.name))


CPUS = _Amount(
    "cpus",
    lambda v: v.resources.cpus,
    lambda view: view.cpus,
    lambda want, free: f"needs {want:g} CPUs; {free:g} free now",
    lambda want, cap, where: f"asks for {_plural(want, 'CPU')}; {where} has {cap:g}",
)
MEMORY = _Amount(
    "memory",
    lambda v: v.resources.memory,
    lambda view: view.memory,
    lambda want, free: f"needs {format_bytes(int(want))}; {format_bytes(int(free))} free now",
    lambda want, cap, where: f"asks for {format_bytes(int(want))} of memory; {where} has {format_bytes(int(cap))}",
)


class _Gpus:
    """Enough GPUs: on a class, by count (its attributes are the filters below); on a
    node, by counting the devices that meet the variant's ``gpu`` constraints."""

    name = "gpus"

    def __call__(self, v: Variant, view: NodeView) -> Status:
        request = v.resources.gpu_request
        want = request.devices
        if want == 0:
            return OK
        has = len(view.gpus)
        if view.uniform or (not view.gpus and not view.now):
            mine = [g for g in view.gpus if vendor_ok(g.vendor, request.vendor)]
            if request.whole and mine and all(g.mig for g in mine):
                return Status(
                    "gpus",
                    f"asks for {_plural(want, 'whole GPU')}; the GPUs of {view.name} are in MIG mode "
                    f"(layout {', '.join(mine[0].mig)}); ask for gpu_mig instead",
                )
            if request.share is not None and mine and all(g.mig for g in mine):
                return Status(
                    "gpu_share",
                    f"asks for gpu_share: {request.share:g}; the GPUs of {view.name} are in MIG mode "
                    f"(layout {', '.join(mine[0].mig)}); ask for gpu_mig instead",
                )
            if want <= len(mine) or (view.gpus and not mine) or (not view.gpus and want <= has):
                return OK  # (no GPU of the vendor: GPU_VENDOR says so)
            if view.gpus and len(mine) < len(view.gpus):
                return Status("gpus", f"asks for {request.describe()}; {view.name} has {len(mine)} ({_vendors(view)})")
            return Status("gpus", f"asks for {_plural(want, 'GPU')}; {view.name} has {has or 'none'}")
        good = [g for g in view.gpus if _usable(g, v) is None]
        if len(good) >= want:
            return OK
        plural = _plural(want, "GPU").split(" ", 1)[1]
        if view.now:
            return Status("gpus_busy", f"needs {want} qualifying {plural}; {len(good)} free now")
        if has < want:
            return Status("gpus", f"asks for {want} {plural}; {view.name} has {has}")
        why = "; ".join(sorted({r for g in view.gpus if (r := _usable(g, v))}))
        return Status(
            "gpu_constraint",
            f"asks for {want} {plural} meeting its 'gpu' constraints; {view.name} has {len(good)} ({why})",
        )


def _class_gpu(v: Variant, view: NodeView) -> tuple[GpuConstraint, GpuView] | None:
    """The constraint and the class's GPU (its first of the variant's vendor), when a GPU
    attribute filter applies: a class view whose nodes have GPUs, and a variant that uses
    them with constraints."""
    if not view.uniform or not view.gpus or not v.uses_gpu or v.gpu is None:
        return None
    want = v.gpu_request.vendor
    mine = [g for g in view.gpus if vendor_ok(g.vendor, want)]
    return (v.gpu, mine[0]) if mine else None


def _vendors(view: NodeView) -> str:
    """``2 nvidia GPUs (NVIDIA A100) and 1 amd GPU (AMD Instinct MI250X)``."""
    seen: dict[tuple[str, str], int] = {}
    for g in view.gpus:
        seen[(g.vendor, g.model)] = seen.get((g.vendor, g.model), 0) + 1
    return " and ".join(f"{_plural(n, vendor + ' GPU')} ({model})" for (vendor, model), n in seen.items()) or "none"


class _Vendor:
    """``gpu_vendor``: some GPU of the node is the vendor's (``any``: every vendor)."""

    name = "gpu_vendor"

    def __call__(self, v: Variant, view: NodeView) -> Status:
        request = v.gpu_request
        if view.now or not request.any or not view.gpus or any(vendor_ok(g.vendor, request.vendor) for g in view.gpus):
            return OK  # (now: the free GPUs; one of the vendor may be busy, which GPUS words)
        return Status("gpu_vendor", f"asks for gpu_vendor: {request.vendor}; {view.name} has {_vendors(view)}")


class _Mig:
    """``gpu_mig``: some GPU of the node has an instance of that profile in its layout."""

    name = "gpu_mig"

    def __call__(self, v: Variant, view: NodeView) -> Status:
        request = v.gpu_request
        if request.mig is None or not view.gpus or view.now:
            return OK
        if any(request.mig in g.mig for g in view.gpus if vendor_ok(g.vendor, request.vendor)):
            return OK
        layouts = sorted({", ".join(g.mig) for g in view.gpus if g.mig})
        has = f"MIG layout {' / '.join(layouts)}" if layouts else "no GPU in MIG mode"
        return Status("gpu_mig", f"asks for gpu_mig: {request.mig}; {view.name} has {has}")


def device_memory(request: GpuRequest, gpu: GpuView, sharing: GpuSharing) -> int:
    """The device memory a step of ``request`` gets on ``gpu``: its MIG instance's, an MPS
    client's pinned limit (when the node sets one), else the GPU's."""
    if request.mig is not None:
        return mig_memory_gb(request.mig) * 1024**3
    if request.share is not None and sharing.mode == "mps" and sharing.mps_memory_limit is not None:
        return sharing.mps_memory_limit
    return gpu.memory


class _DeviceMemory:
    """``gpu_memory`` (or ``gpu.min_memory``): against the device, MIG instance or MPS limit."""

    name = "gpu_memory"

    def __call__(self, v: Variant, view: NodeView) -> Status:
        request = v.gpu_request
        if not request.any or not request.memory or not view.gpus or not view.uniform:
            return OK
        mine = [g for g in view.gpus if vendor_ok(g.vendor, request.vendor)]
        if request.mig is not None:
            mine = [g for g in mine if request.mig in g.mig]
        if not mine or (request.mig is None and v.gpu is not None and not _memory_ok(mine[0].memory, v.gpu)):
            return OK  # the vendor / MIG filters, or GPU_MEMORY for gpu.min_memory, say why
        have = max(device_memory(request, g, view.sharing) for g in mine)
        if have >= request.memory:
            return OK
        what = f"MIG {request.mig} instance" if request.mig else "GPU"
        return Status(
            "gpu_memory",
            f"asks for gpu_memory: {format_bytes(request.memory)}; {view.name}'s {what} has {format_bytes(have)} "
            f"({mine[0].model})",
        )


@dataclass(frozen=True)
class _GpuAttribute:
    """One attribute of a class's GPUs against the variant's ``gpu`` constraints."""

    name: str
    meets: Callable[[GpuView, GpuConstraint], bool]
    words: Callable[[GpuConstraint, GpuView, str], str]  # (want, the class's GPU, class name) -> reason

    def __call__(self, v: Variant, view: NodeView) -> Status:
        found = _class_gpu(v, view)
        if found is None or self.meets(found[1], found[0]):
            return OK
        want, gpu = found
        return Status(self.name, self.words(want, gpu, view.name))


GPU_MODEL = _GpuAttribute(
    "gpu_model",
    lambda g, want: _model_ok(g.model, want),
    lambda want, g, where: f"needs a GPU model among {', '.join(want.models)}; {where} has {g.model}",
)
GPU_CC = _GpuAttribute(
    "gpu_cc",
    lambda g, want: _cc_ok(g.cc, want, g.vendor),
    lambda want, g, where: (
        f"needs compute capability {want.min_compute_capability}; {where} has {g.cc_text} ({g.model})"
    ),
)
GPU_MEMORY = _GpuAttribute(
    "gpu_memory",
    lambda g, want: _memory_ok(g.memory, want),
    lambda want, g, where: (
        f"needs {format_bytes(want.min_memory)} of GPU memory; {where} has {format_bytes(g.memory)} ({g.model})"
    ),
)

LABELS, GPUS, GPU_VENDOR, GPU_MIG, DEVICE_MEMORY = _Labels(), _Gpus(), _Vendor(), _Mig(), _DeviceMemory()

CLASS_CHAIN: tuple[Filter, ...] = (
    CPUS, MEMORY, GPU_VENDOR, GPUS, GPU_MIG, GPU_MODEL, GPU_CC, GPU_MEMORY, DEVICE_MEMORY, LABELS,
)  # fmt: skip
NODE_CHAIN: tuple[Filter, ...] = (LABELS, CPUS, MEMORY, GPU_VENDOR, GPU_MIG, GPUS)


def run_chain(chain: Sequence[Filter], variant: Variant, view: NodeView, *, first: bool) -> tuple[Status, ...]:
    """Every failing filter's Status, in chain order (only the first with ``first``)."""
    found: list[Status] = []
    for f in chain:
        status = f(variant, view)
        if not status.ok:
            found.append(status)
            if first:
                break
    return tuple(found)


def class_rejections(variant: Variant, c: MachineClass) -> tuple[Status, ...]:
    """Why ``variant`` can never run on node class ``c``: every failing filter."""
    return run_chain(CLASS_CHAIN, variant, NodeView.of_class(c), first=False)


def first_class_rejection(variant: Variant, c: MachineClass) -> Status:
    """The first reason ``variant`` cannot run on ``c``, or OK."""
    found = run_chain(CLASS_CHAIN, variant, NodeView.of_class(c), first=True)
    return found[0] if found else OK


def check(variant: Variant, cap: Capacity, *, where: str, now: bool, labels: Mapping[str, str] | None = None) -> Status:
    """Can ``variant`` run on this machine: ever (``now`` False, against its capacity) or
    now (against what is free)?  The first failure explains; ``where`` names the place
    ("this machine", "node gpu-a100-1")."""
    view = NodeView.of_capacity(cap, where=where, now=now, labels=labels)
    found = run_chain(NODE_CHAIN, variant, view, first=True)
    return found[0] if found else OK
