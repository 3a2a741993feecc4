"""What a CWL job asks for, in hetflow's terms: a pure mapping, unit-tested.

cwltool evaluates ``ResourceRequirement`` and ``cwltool:CUDARequirement`` into the job's
``builder.resources`` (cores, ram in MiB, tmpdirSize and outdirSize in MiB, cudaDeviceCount);
the requirement itself still holds what cwltool does not evaluate (``cudaVersionMin``,
``cudaComputeCapability``).  ``job_request`` turns both into one ``JobRequest``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from hetflow.errors import UsageError

# The image a CommandLineTool without a DockerRequirement runs in (docs/guides/cwl.md): the
# conformance harness's stand-in for Debian's slim image, built locally (no registry here).
DEFAULT_IMAGE = "docker.io/debian:stable-slim"
CUDA_REQUIREMENT = "http://commonwl.org/cwltool#CUDARequirement"
MIB = 2**20
# podman refuses a memory limit under 6 MiB; a CWL ``ramMin: 1`` is a request, not a cage
MIN_MEMORY = 64 * MIB


@dataclass(frozen=True)
class JobRequest:
    """One CWL job's request: what the planner places and the container is given."""

    cpus: float
    memory: int  # bytes
    gpus: int = 0
    min_compute_capability: str | None = None  # "7.0": the lowest the job accepts
    cuda_version_min: str | None = None  # "11.4": the node's driver must support it
    tmpfs_mib: int = 1024  # the container's /tmp (CWL tmpdirMin)


def job_request(resources: Mapping[str, object], cuda: Mapping[str, object] | None) -> JobRequest:
    """``resources``: cwltool's evaluated ``builder.resources``; ``cuda``: the job's
    CUDARequirement (None: none).  A value that is not a number is refused with its name."""
    cores = _number(resources, "cores", 1)
    ram = _number(resources, "ram", 256)
    tmpdir = _number(resources, "tmpdirSize", 1024)
    if cores <= 0 or ram <= 0:
        raise UsageError(f"ResourceRequirement: cores ({cores:g}) and ram ({ram:g} MiB) must be above 0")
    gpus = 0
    cc: str | None = None
    version: str | None = None
    if cuda is not None:
        gpus = math.ceil(_number(resources, "cudaDeviceCount", 1))
        cc = _capability(cuda.get("cudaComputeCapability"))
        raw = cuda.get("cudaVersionMin")
        version = None if raw is None else str(raw)
        if version is not None and not _is_version(version):
            raise UsageError(f"CUDARequirement.cudaVersionMin: {version!r} is not a version like '11.4'")
    return JobRequest(
        cpus=float(cores),
        memory=max(MIN_MEMORY, math.ceil(ram) * MIB),
        gpus=gpus,
        min_compute_capability=cc,
        cuda_version_min=version,
        tmpfs_mib=max(16, math.ceil(tmpdir)),
    )


def _number(resources: Mapping[str, object], key: str, default: float) -> float:
    value = resources.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"ResourceRequirement: {key} is {value!r}, not a number")
    return float(value)


def _capability(raw: object) -> str | None:
    """``cudaComputeCapability`` is a version or a list of them (any of which will do): the
    lowest is the job's minimum."""
    if raw is None:
        return None
    values = [str(v) for v in raw] if isinstance(raw, list) else [str(raw)]
    bad = [v for v in values if not _is_version(v)]
    if bad or not values:
        raise UsageError(f"CUDARequirement.cudaComputeCapability: {raw!r} is not a version like '7.0' (or a list)")
    return min(values, key=lambda v: tuple(int(p) for p in v.split(".")))


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return 1 <= len(parts) <= 3 and all(p.isdigit() for p in parts)
