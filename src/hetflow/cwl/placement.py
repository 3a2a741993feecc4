"""Which of a node's GPUs a CUDA job gets (cwltool:CUDARequirement): a pure choice, with the
reason for every GPU left out, so a job that cannot run says why instead of failing inside
its container.  On a cluster backend with a cluster file, where the plan puts each CWL step
(``cluster_places``): the node or node class and GPU model its Job asks the scheduler for."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hetflow.cwl.requests import JobRequest
from hetflow.inventory import Gpu
from hetflow.plan import MachineClass, Placement


@dataclass(frozen=True)
class GpuChoice:
    gpus: tuple[Gpu, ...]  # empty: none chosen (see ``why``)
    why: str


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def gpu_problem(gpu: Gpu, request: JobRequest) -> str | None:
    """Why ``gpu`` cannot serve the job; None when it can."""
    if gpu.vendor != "nvidia":
        return f"GPU {gpu.index} is {gpu.vendor}, CUDA needs NVIDIA"
    cc = request.min_compute_capability
    if cc is not None and _version(gpu.compute_capability or "0") < _version(cc):
        return f"GPU {gpu.index} ({gpu.model}) has compute capability {gpu.compute_capability}, below {cc}"
    need = request.cuda_version_min
    if need is not None and gpu.cuda_version is not None and _version(gpu.cuda_version) < _version(need):
        return f"GPU {gpu.index}'s driver supports CUDA {gpu.cuda_version}, below {need}"
    return None


def choose_gpus(gpus: Sequence[Gpu], request: JobRequest, busy: Collection[int] = ()) -> GpuChoice:
    """The first ``request.gpus`` qualifying GPUs not in ``busy`` (indices)."""
    problems = [p for g in gpus if (p := gpu_problem(g, request)) is not None]
    fit = [g for g in gpus if gpu_problem(g, request) is None]
    free = [g for g in fit if g.index not in busy]
    if len(free) >= request.gpus:
        picked = tuple(free[: request.gpus])
        unknown = [g.index for g in picked if request.cuda_version_min and g.cuda_version is None]
        note = f"; CUDA version of GPU {unknown} not known, not checked" if unknown else ""
        names = ", ".join(f"{g.index} ({g.model}, cc {g.compute_capability})" for g in picked)
        return GpuChoice(picked, f"GPUs {names}{note}")
    if len(fit) >= request.gpus:
        return GpuChoice((), f"{len(free)} of {len(fit)} qualifying GPUs free, {request.gpus} asked")
    said = "; ".join(problems) if problems else "this node has no GPU"
    return GpuChoice((), f"{request.gpus} GPU(s) asked, {len(fit)} qualify: {said}")


@dataclass(frozen=True)
class ClusterPlace:
    """Where the plan puts a CWL step on a cluster backend, in ``Job``'s words."""

    node_class: str | None  # None where the class has one node: ``node`` pins it
    node: str | None
    gpu_model: str | None  # the class's GPU model (Slurm's gres type), for a GPU step
    why: str


def cluster_places(steps: Mapping[str, Placement], classes: Sequence[MachineClass]) -> dict[str, ClusterPlace]:
    """Each planned step's place (``execute.plan_on_cluster``'s placements on the cluster file's
    classes), as hetflow's executor sends a step there: a class of one node is that node."""
    by_name = {c.name: c for c in classes}
    out: dict[str, ClusterPlace] = {}
    for step, p in steps.items():
        cls = by_name.get(p.machine_class)
        pinned = cls is not None and cls.count == 1
        out[step] = ClusterPlace(
            node_class=None if pinned else p.machine_class,
            node=p.machine_class if pinned else None,
            gpu_model=(cls.gpu_model or None) if cls is not None and cls.gpus and p.gpus else None,
            why=f"planned on {p.machine_class}",
        )
    return out


def place_of(places: Mapping[str, ClusterPlace], cwl_name: str) -> ClusterPlace | None:
    """The plan's place for a CWL job: its step's (the job's name is the step's, a scatter's
    item ``step_N`` and a subworkflow's step ``sub/step`` by their last name); None where no
    planned step, or more than one, has that name."""
    for name in (cwl_name, re.sub(r"_\d+$", "", cwl_name)):
        found = [place for step, place in places.items() if step.rsplit("/", 1)[-1] == name]
        if len(found) == 1:
            return found[0]
    return None
