"""What we have: nodes, their CPUs and GPUs, and the probes that discover them.

    models     Node, Cpu, Gpu, GpuLink: frozen pydantic models, what every later stage reads
    probe      discover(home) -> Node: this machine (CPU, memory, GPUs, labels)
    cpu        /proc/cpuinfo and archspec: micro-architecture, x86-64 level, memory
    sharing    HETFLOW_GPU_SHARING: exclusive | time-slicing:N | mps:N -> GpuSharing
    profiles   PROFILES: named hardware descriptions (the registry's and `--node NAME`)
    gpus/      the GPU probes, one per source:
      nvml       GPUs through NVML; procfs: GPUs from /proc/driver/nvidia when NVML is absent
      nvmlmig    MIG instances through NVML (nvidia-smi -L's MIG lines)
      nvmlusage  what NVIDIA GPUs do now (utilisation, memory, compute processes): the executor samples it
      amd        AMD GPUs from the KFD topology in sysfs (gfx target, render node, ROCm); amdsmi when installed
      intel      Intel GPUs from DRM sysfs (device id -> family, memory)
      gpumodels  KNOWN_MODELS: the GPU model table (vendor, memory, capability/gfx/family, PCI id, MIG)
    fakes/     GPUs for machines without any:
      gpus       HETFLOW_FAKE_GPUS: made-up GPUs of every vendor, MIG layouts
      devnodes   the made-up GPUs' device nodes (nvidiaN, nvidia-caps, dri, kfd), made with mknod
      nvml       FakeNvml: a fake pynvml, the NVML probe's seam in unit tests (import it from there:
                 it loads pynvml)

Other packages import the names below from ``hetflow.inventory`` itself.  Probing does
I/O (files, NVML, podman); everything after discovery works on the returned ``Node``.
"""

from hetflow.inventory.cpu import x86_64_level
from hetflow.inventory.fakes.gpus import make_fake_gpus, parse_fake_spec
from hetflow.inventory.gpus.amd import gfx_target, probe_amd
from hetflow.inventory.gpus.gpumodels import (
    KNOWN_MODELS,
    MIG_PROFILES,
    GpuModel,
    model_by_device_id,
    nvidia_architecture,
)
from hetflow.inventory.gpus.intel import intel_family, probe_intel
from hetflow.inventory.gpus.nvmlusage import DeviceSample, NvmlUsage
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
    node_fields,
)
from hetflow.inventory.probe import discover
from hetflow.inventory.profiles import PROFILES, profile_names, profile_node
from hetflow.inventory.sharing import SHARING_VAR, parse_gpu_sharing

__all__ = [
    "DEFAULT_TIMESLICE_SLOWDOWN",
    "KNOWN_MODELS",
    "MIG_PROFILES",
    "PROFILES",
    "SHARING_VAR",
    "Cpu",
    "DeviceSample",
    "Gpu",
    "GpuLink",
    "GpuModel",
    "GpuSharing",
    "GpuVendorName",
    "MigDevice",
    "Node",
    "NvmlUsage",
    "SharingMode",
    "discover",
    "gfx_target",
    "intel_family",
    "make_fake_gpus",
    "model_by_device_id",
    "node_fields",
    "nvidia_architecture",
    "parse_fake_spec",
    "parse_gpu_sharing",
    "probe_amd",
    "probe_intel",
    "profile_names",
    "profile_node",
    "x86_64_level",
]
