"""Feasibility filters, in the style of the Kubernetes scheduler framework's Filter
plugins: each looks at one resource and returns a Status; "does not fit" is a value
with a reason, never an exception.

Two questions are asked with the same filters: can this variant *ever* run on this node
(against its capacity), and can it run *now* (against what is free).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hetflow.inventory.models import Gpu, Node
from hetflow.spec.models import GpuConstraint, Variant
from hetflow.spec.units import format_bytes


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


def gpu_qualifies(gpu: Gpu, want: GpuConstraint | None) -> str | None:
    """None when ``gpu`` meets ``want``, else why not."""
    if want is None:
        return None
    if gpu.memory_bytes < want.min_memory:
        return f"{gpu.model} has {format_bytes(gpu.memory_bytes)}, needs {format_bytes(want.min_memory)}"
    if gpu.compute_capability_tuple < want.cc_tuple:
        return f"{gpu.model} has compute capability {gpu.compute_capability}, needs {want.min_compute_capability}"
    if want.models and not any(m.lower() in gpu.model.lower() for m in want.models):
        return f"{gpu.model} is not one of {', '.join(want.models)}"
    return None


def qualifying_gpus(variant: Variant, gpus: Sequence[Gpu]) -> list[Gpu]:
    return [g for g in gpus if gpu_qualifies(g, variant.gpu) is None]


def check(variant: Variant, cap: Capacity, *, where: str, now: bool, labels: Mapping[str, str] | None = None) -> Status:
    """Chain the filters; the first failure explains itself.

    ``where`` names the place ("this machine", "node gpu-a100-1"); ``now`` words the
    reason as busy-now rather than never."""
    res = variant.resources
    if labels is not None:
        missing = [f"{k}={v}" for k, v in sorted(variant.node_selector.items()) if labels.get(k) != v]
        if missing:
            have = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
            return Status("labels", f"needs node labels {', '.join(missing)}; {where} has {have}")
    if res.cpus > cap.cpus:
        if now:
            return Status("cpus_busy", f"needs {res.cpus:g} CPUs; {cap.cpus:g} free now")
        return Status("cpus", f"asks for {res.cpus:g} CPUs; {where} has {cap.cpus:g}")
    if res.memory > cap.memory:
        if now:
            return Status(
                "memory_busy",
                f"needs {format_bytes(res.memory)}; {format_bytes(cap.memory)} free now",
            )
        return Status(
            "memory",
            f"asks for {format_bytes(res.memory)} of memory; {where} has {format_bytes(cap.memory)}",
        )
    if res.gpus == 0:
        return OK
    plural = "GPU" if res.gpus == 1 else "GPUs"
    if not cap.gpus and not now:
        return Status("gpus", f"asks for {res.gpus} {plural}; {where} has none")
    good = qualifying_gpus(variant, cap.gpus)
    if len(good) >= res.gpus:
        return OK
    if now:
        return Status("gpus_busy", f"needs {res.gpus} qualifying {plural}; {len(good)} free now")
    if len(cap.gpus) < res.gpus:
        return Status("gpus", f"asks for {res.gpus} {plural}; {where} has {len(cap.gpus)}")
    why = "; ".join(sorted({r for g in cap.gpus if (r := gpu_qualifies(g, variant.gpu))}))
    return Status(
        "gpu_constraint",
        f"asks for {res.gpus} {plural} meeting its 'gpu' constraints; {where} has {len(good)} ({why})",
    )
