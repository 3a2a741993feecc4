"""Named machine types: a small built-in table of hardware descriptions.

A machine type is a ``Node`` (the JSON of ``hetflow nodes``) that stands for every
machine alike enough to run the same image builds.  Sites that have not run
``hetflow registry login`` on their nodes yet can predeclare types by these names.

CPU feature lists come from archspec's target table (the one Spack and
``hetflow.inventory.cpu`` use), so a profile's flags are the ones a real CPU of that
microarchitecture reports; GPU facts come from the fake-GPU table of
``hetflow.inventory.fakes.gpus``, which records what NVML says for each model.  A profile with
several GPUs has a topology word of ``HETFLOW_FAKE_GPUS`` (``nvlink``, ``nvlink-pairs``,
``pcie``), so its GPUs get NUMA nodes, CPU affinity and links the same way fake GPUs do.
"""

from __future__ import annotations

from dataclasses import dataclass

import archspec.cpu

from hetflow.inventory.cpu import x86_64_level
from hetflow.inventory.fakes.gpus import FakeEntry, entry_links, entry_placements
from hetflow.inventory.gpus.gpumodels import KNOWN_MODELS
from hetflow.inventory.models import Cpu, Gpu, GpuLink, Node

__all__ = ["PROFILES", "Profile", "profile_names", "profile_node"]

_GIB = 1024**3


@dataclass(frozen=True)
class Profile:
    """One row of the table: a CPU (archspec target) and optional GPUs."""

    uarch: str  # archspec target name
    vendor: str
    model: str
    cores: int
    memory_gib: int
    gpu_model: str | None = None  # a key of hetflow.inventory.gpus.gpumodels.KNOWN_MODELS
    gpu_count: int = 0
    driver_version: str = "550.54.15"
    cuda_version: str = "12.4"
    gpu_topology: str | None = None  # a word of hetflow.inventory.fakes.gpus.TOPOLOGIES; None: unknown


PROFILES: dict[str, Profile] = {
    "x86-64-v2": Profile("x86_64_v2", "GenuineIntel", "generic x86-64-v2 CPU", 8, 32),
    "x86-64-v3": Profile("x86_64_v3", "GenuineIntel", "generic x86-64-v3 CPU", 8, 32),
    "x86-64-v4": Profile("x86_64_v4", "GenuineIntel", "generic x86-64-v4 CPU", 8, 32),
    "haswell-cpu": Profile("haswell", "GenuineIntel", "Intel(R) Xeon(R) CPU E5-2680 v3", 24, 128),
    "skylake-avx512-cpu": Profile("skylake_avx512", "GenuineIntel", "Intel(R) Xeon(R) Gold 6148", 40, 192),
    "zen3-cpu": Profile("zen3", "AuthenticAMD", "AMD EPYC 7763 64-Core Processor", 128, 512),
    "neoverse-n1-cpu": Profile("neoverse_n1", "ARM", "ARM neoverse_n1", 80, 256),
    "t4-node": Profile(
        "cascadelake", "GenuineIntel", "Intel(R) Xeon(R) Gold 6230", 40, 192, "t4", 1, "535.161.08", "12.2"
    ),
    "v100-node": Profile(
        "skylake_avx512", "GenuineIntel", "Intel(R) Xeon(R) Gold 6148", 40, 384, "v100", 4, gpu_topology="nvlink-pairs"
    ),
    "a100-node": Profile(
        "icelake", "GenuineIntel", "Intel(R) Xeon(R) Platinum 8358", 64, 1024, "a100", 4, gpu_topology="nvlink"
    ),
    "h100-node": Profile(
        "sapphirerapids", "GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+", 112, 2048, "h100", 8, gpu_topology="nvlink"
    ),
}


def profile_names() -> list[str]:
    return sorted(PROFILES)


def _cpu(p: Profile) -> Cpu:
    target = archspec.cpu.TARGETS[p.uarch]
    return Cpu(
        vendor=p.vendor,
        model=p.model,
        architecture=str(target.family),
        microarchitecture=p.uarch,
        x86_64_level=x86_64_level(target),
        cores=p.cores,
        features=tuple(sorted(target.features)),
    )


def _entries(p: Profile) -> list[FakeEntry]:
    return [] if p.gpu_model is None else [FakeEntry(p.gpu_model, p.gpu_count, p.gpu_topology)]


def _gpus(p: Profile) -> tuple[Gpu, ...]:
    if p.gpu_model is None:
        return ()
    model = KNOWN_MODELS[p.gpu_model]
    places = entry_placements(_entries(p), p.cores)
    known = p.gpu_topology is not None
    nvidia = model.vendor == "nvidia"
    return tuple(
        Gpu(
            index=i,
            uuid=f"GPU-profile-{p.gpu_model}-{i}",
            model=model.product,
            memory_bytes=model.memory_bytes,
            compute_capability=model.compute_capability,
            vendor="amd" if model.vendor == "amd" else "intel" if model.vendor == "intel" else "nvidia",
            architecture=model.architecture,
            device_id=model.device_id,
            render_path="" if nvidia else f"/dev/dri/renderD{128 + i}",
            card_path="" if nvidia else f"/dev/dri/card{i}",
            driver_version=p.driver_version,
            cuda_version=p.cuda_version if nvidia else None,
            device_path=f"/dev/nvidia{i}" if nvidia else f"/dev/dri/renderD{128 + i}",
            minor=i if nvidia else 128 + i,
            pci_bus_id=places[i].pci_bus_id if known else "",
            numa_node=places[i].numa_node,
            cpu_affinity=places[i].cpu_affinity,
        )
        for i in range(p.gpu_count)
    )


def _links(p: Profile) -> tuple[GpuLink, ...]:
    return entry_links(_entries(p))


def profile_node(name: str) -> Node:
    """The Node a profile name stands for; ``KeyError`` names the known profiles."""
    if name not in PROFILES:
        raise KeyError(f"no built-in machine-type profile {name!r}; known: {', '.join(profile_names())}")
    p = PROFILES[name]
    gpus = _gpus(p)
    return Node(
        name=name,
        cpu=_cpu(p),
        memory_bytes=p.memory_gib * _GIB,
        gpus=gpus,
        gpu_links=_links(p),
        gpu_source="profile" if gpus else "none",
        control_devices=("/dev/nvidiactl", "/dev/nvidia-uvm") if gpus else (),
    )
