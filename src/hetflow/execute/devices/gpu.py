"""How a container gets exactly its GPUs, and nothing more.

Three ways, in order of preference:
1. CDI (Container Device Interface): when a CDI spec for ``nvidia.com/gpu`` exists
   (``nvidia-ctk cdi generate`` writes /etc/cdi/nvidia.yaml), podman injects the
   device by its CDI name, with the driver's libraries.
2. Without CDI, the nvidia-docker 1.0 way: pass the GPU's device nodes plus the control
   nodes (nvidiactl, nvidia-uvm, ...) and bind-mount the driver's user-space libraries
   read-only under /usr/local/nvidia.
3. Fake GPUs (tests on machines with no GPU): the mknod'd nodes under hetflow's home,
   mapped to /dev/nvidiaN inside; no libraries.

Shared NVIDIA GPUs (time-slicing, MPS) are given as one whole GPU is, with the share in
HETFLOW_GPU_SHARE and, for MPS, the client's limits; a MIG instance as the NVIDIA
container toolkit gives it (``_nvidia_mig``); AMD and Intel GPUs: ``execute.devices.gpunodes``.

Whatever an image or a user sets, the container cannot widen its set: device access is
decided by the nodes we pass (the runtime's device cgroup allows only those), and
podman runs with an empty hooks directory, so no NVIDIA hook reads
NVIDIA_VISIBLE_DEVICES=all.  Inside, GPUs are numbered 0..n-1 as CUDA sees them.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from hetflow.execute.devices.gpunodes import (
    GpuAccess as GpuAccess,
)
from hetflow.execute.devices.gpunodes import (
    amd_access,
    control_nodes,
    intel_access,
    merge,
    mps_env,
    mps_pipe,
)
from hetflow.execute.engine import Mount
from hetflow.inventory import Gpu, MigDevice, Node
from hetflow.plan import Slot

CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
DRIVER_DIR = "/usr/local/nvidia"
# The user-space pieces nvidia-docker's driver volume carried (nvidia-docker 1.0,
# volumes.go): the CUDA driver API, NVML, the JIT compilers, and the tools.
DRIVER_LIBS = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-fatbinaryloader.so",
    "libnvidia-compiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-opencl.so",
    "libnvcuvid.so",
    "libnvidia-encode.so",
)
DRIVER_BINS = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced")


def near_cpus(gpus: Sequence[Gpu]) -> str:
    """The CPUs near every one of ``gpus`` (their common ``cpu_affinity``, as NVML or sysfs
    reports it), to pin the container to; "" when unknown or when they differ."""
    found = {g.cpu_affinity for g in gpus}
    return found.pop() if len(found) == 1 and gpus and gpus[0].cpu_affinity else ""


def gpu_access(
    gpus: Sequence[Gpu],
    node: Node,
    *,
    slot: Slot | None = None,
    memory: int = 0,
    cdi_dirs: Sequence[Path] = CDI_DIRS,
    ldconfig: str | None = None,
    pipe: str | None = None,
) -> GpuAccess:
    """What a container with ``gpus`` gets: whole GPUs of each vendor, or (``slot``) a
    time-sliced or MPS share of one NVIDIA GPU, or one MIG instance.  ``memory``: the
    step's ``gpu_memory`` (an MPS client's pinned-memory limit); ``pipe``: the host's MPS
    pipe directory (default ``gpunodes.mps_pipe()``)."""
    if not gpus:
        # "void": nvidia-container-runtime's word for "no GPU and no driver".
        return GpuAccess(env={"NVIDIA_VISIBLE_DEVICES": "void"})
    if slot is not None and slot.mode != "whole" and slot.gpu.vendor == "nvidia":
        if slot.mig is not None:
            return _nvidia_mig(slot.gpu, slot.mig, node, cdi_dirs, ldconfig)
        return _nvidia_shared(slot, node, memory, cdi_dirs, ldconfig, pipe)
    parts = []
    nvidia = [g for g in gpus if g.vendor == "nvidia"]
    if nvidia:
        parts.append(_nvidia_whole(nvidia, node, cdi_dirs, ldconfig))
    amd = [g for g in gpus if g.vendor == "amd"]
    if amd:
        parts.append(amd_access(amd, node))
    intel = [g for g in gpus if g.vendor == "intel"]
    if intel:
        parts.append(intel_access(intel, node))
    access = parts[0] if len(parts) == 1 else merge(parts)
    if slot is not None and slot.mode != "whole":  # a share of an AMD or Intel GPU: time-sliced by its driver
        access = replace(access, env={**access.env, "HETFLOW_GPU_SHARE": f"{slot.share:g}"})
    return access


def _nvidia_whole(gpus: Sequence[Gpu], node: Node, cdi_dirs: Sequence[Path], ldconfig: str | None) -> GpuAccess:
    inside = ",".join(str(i) for i in range(len(gpus)))
    env = {
        "NVIDIA_VISIBLE_DEVICES": inside,
        "CUDA_VISIBLE_DEVICES": inside,
        "HETFLOW_GPU_UUIDS": ",".join(g.uuid for g in gpus),
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    cdi = [[g.uuid, str(g.index)] for g in gpus]
    return _deliver(gpus, _device_nodes(gpus, node), cdi, env, cdi_dirs, ldconfig)


def _nvidia_shared(
    slot: Slot, node: Node, memory: int, cdi_dirs: Sequence[Path], ldconfig: str | None, pipe: str | None
) -> GpuAccess:
    """A time-sliced or MPS tenant: the one GPU's node (as a whole GPU gets it); MPS adds
    the client's limits and the daemon's pipe directory, bind-mounted when it exists."""
    g = slot.gpu
    env = {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
        "HETFLOW_GPU_UUIDS": g.uuid,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "HETFLOW_GPU_SHARE": f"{slot.share:g}",
        "HETFLOW_GPU_SHARING": slot.mode,
    }
    mounts: list[Mount] = []
    if slot.mode == "mps":
        where = pipe or mps_pipe()
        env |= mps_env(g, slot.share, node, memory, where)
        if os.path.isdir(where):
            mounts.append(Mount(where, where, read_only=False))
    access = _deliver([g], _device_nodes([g], node), [[g.uuid, str(g.index)]], env, cdi_dirs, ldconfig)
    return replace(access, mounts=(*access.mounts, *mounts))


def _nvidia_mig(g: Gpu, mig: MigDevice, node: Node, cdi_dirs: Sequence[Path], ldconfig: str | None) -> GpuAccess:
    """One MIG instance, as the NVIDIA container toolkit gives it: the parent GPU's node,
    the control nodes, and only the instance's /dev/nvidia-caps/nvidia-capN nodes (its GPU
    and compute instance); CUDA sees it by its MIG-... UUID."""
    env = {
        "NVIDIA_VISIBLE_DEVICES": mig.uuid,
        "CUDA_VISIBLE_DEVICES": mig.uuid,
        "HETFLOW_GPU_UUIDS": g.uuid,
        "HETFLOW_MIG_UUID": mig.uuid,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    devices = _device_nodes([g], node) + tuple((c, f"/dev/nvidia-caps/{os.path.basename(c)}") for c in mig.cap_paths)
    return _deliver([g], devices, [[mig.uuid, f"{g.index}:{mig.index}"]], env, cdi_dirs, ldconfig)


def _deliver(
    gpus: Sequence[Gpu],
    devices: tuple[tuple[str, str], ...],
    cdi_names: Sequence[Sequence[str]],
    env: dict[str, str],
    cdi_dirs: Sequence[Path],
    ldconfig: str | None,
) -> GpuAccess:
    """NVIDIA devices by the first way that works (see the module's docstring): fake nodes
    as they are; CDI when every device has a CDI name; else the nodes plus the driver."""
    if all(g.fake for g in gpus):
        return GpuAccess(devices=devices, env=env)
    names = cdi_device_names(cdi_dirs)
    if names:
        chosen = [next((f"nvidia.com/gpu={c}" for c in cands if c in names), "") for cands in cdi_names]
        if all(chosen):
            return GpuAccess(cdi_devices=tuple(chosen), env=env)
    mounts = driver_mounts(ldconfig)
    if mounts:
        env["LD_LIBRARY_PATH"] = f"{DRIVER_DIR}/lib64"
        env["PATH"] = f"{DRIVER_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return GpuAccess(devices=devices, mounts=tuple(mounts), env=env)


def _device_nodes(gpus: Sequence[Gpu], node: Node) -> tuple[tuple[str, str], ...]:
    # Inside, a GPU keeps its host device name (/dev/nvidia2), as nvidia-docker did: the
    # driver matches nodes to GPUs by minor number.
    devs = [(g.device_path, f"/dev/nvidia{g.minor}") for g in gpus]
    devs += control_nodes(node, "nvidia")
    return tuple(devs)


def cdi_device_names(dirs: Sequence[Path] = CDI_DIRS) -> set[str]:
    """Device names of every CDI spec whose kind is nvidia.com/gpu (CDI spec v0.x)."""
    names: set[str] = set()
    for d in dirs:
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                text = f.read_text()
                doc = json.loads(text) if f.suffix == ".json" else yaml.safe_load(text)
            except (OSError, ValueError, yaml.YAMLError):
                continue
            if isinstance(doc, dict) and doc.get("kind") == "nvidia.com/gpu":
                names |= {str(dev.get("name")) for dev in doc.get("devices") or [] if isinstance(dev, dict)}
    return names


def driver_mounts(ldconfig: str | None = None) -> list[Mount]:
    """Read-only mounts of the host driver's libraries and tools (the driver volume)."""
    if ldconfig is None:
        try:
            ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
        except OSError:
            ldconfig = ""
    mounts: dict[str, Mount] = {}
    for line in ldconfig.splitlines():
        # "	libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
        name, _, path = line.strip().partition(" => ")
        soname = name.split(" (")[0]
        if "x86-64" not in name and "AArch64" not in name:
            continue
        if any(soname.startswith(lib) for lib in DRIVER_LIBS) and soname not in mounts:
            mounts[soname] = Mount(os.path.realpath(path), f"{DRIVER_DIR}/lib64/{soname}")
    for b in DRIVER_BINS:
        for d in ("/usr/bin", "/usr/local/bin"):
            p = Path(d) / b
            if p.exists():
                mounts[b] = Mount(str(p.resolve()), f"{DRIVER_DIR}/bin/{b}")
                break
    return list(mounts.values())
