"""What we have: nodes, their CPUs and GPUs, and the probes that discover them.

    models     Node, Cpu, Gpu, GpuLink: frozen pydantic models, what every later stage reads
    probe      discover(home) -> Node: this machine (CPU, memory, GPUs, labels)
    cpu        /proc/cpuinfo and archspec: micro-architecture, x86-64 level, memory
    nvml       GPUs through NVML; procfs: GPUs from /proc/driver/nvidia when NVML is absent
    fake       HETFLOW_FAKE_GPUS: fake GPUs for machines without any (tests, demos)
    fakes      FakeNvml: the fake beside NVML for unit tests (import it from there: it loads pynvml)
    gpumodels  KNOWN_MODELS: the GPU model table (memory, compute capability, speed)
    profiles   PROFILES: named hardware descriptions (the registry's and `--node NAME`)

Other packages import the names below from ``hetflow.inventory`` itself.  Probing does
I/O (files, NVML, podman); everything after discovery works on the returned ``Node``.
"""

from hetflow.inventory.cpu import x86_64_level
from hetflow.inventory.fake import make_fake_gpus, parse_fake_spec
from hetflow.inventory.gpumodels import KNOWN_MODELS
from hetflow.inventory.models import (
    DEFAULT_TIMESLICE_SLOWDOWN,
    Cpu,
    Gpu,
    GpuLink,
    GpuSharing,
    GpuVendorName,
    MigDevice,
    Node,
    SharingMode,
)
from hetflow.inventory.probe import discover
from hetflow.inventory.profiles import PROFILES, profile_names, profile_node

__all__ = [
    "DEFAULT_TIMESLICE_SLOWDOWN",
    "KNOWN_MODELS",
    "PROFILES",
    "Cpu",
    "Gpu",
    "GpuLink",
    "GpuSharing",
    "GpuVendorName",
    "MigDevice",
    "Node",
    "SharingMode",
    "discover",
    "make_fake_gpus",
    "parse_fake_spec",
    "profile_names",
    "profile_node",
    "x86_64_level",
]
