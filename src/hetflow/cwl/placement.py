"""Which of a node's GPUs a CUDA job gets (cwltool:CUDARequirement): a pure choice, with the
reason for every GPU left out, so a job that cannot run says why instead of failing inside
its container."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from hetflow.cwl.requests import JobRequest
from hetflow.inventory import Gpu


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
