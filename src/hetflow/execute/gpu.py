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
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hetflow.execute.engine import Mount
from hetflow.inventory import Gpu, Node

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


@dataclass(frozen=True)
class GpuAccess:
    devices: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def near_cpus(gpus: Sequence[Gpu]) -> str:
    """The CPUs near every one of ``gpus`` (their common ``cpu_affinity``, as NVML or sysfs
    reports it), to pin the container to; "" when unknown or when they differ."""
    found = {g.cpu_affinity for g in gpus}
    return found.pop() if len(found) == 1 and gpus and gpus[0].cpu_affinity else ""


def gpu_access(
    gpus: Sequence[Gpu],
    node: Node,
    *,
    cdi_dirs: Sequence[Path] = CDI_DIRS,
    ldconfig: str | None = None,
) -> GpuAccess:
    if not gpus:
        # "void": nvidia-container-runtime's word for "no GPU and no driver".
        return GpuAccess(env={"NVIDIA_VISIBLE_DEVICES": "void"})
    inside = ",".join(str(i) for i in range(len(gpus)))
    env = {
        "NVIDIA_VISIBLE_DEVICES": inside,
        "CUDA_VISIBLE_DEVICES": inside,
        "HETFLOW_GPU_UUIDS": ",".join(g.uuid for g in gpus),
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    if all(g.fake for g in gpus):
        return GpuAccess(devices=_device_nodes(gpus, node), env=env)
    names = cdi_device_names(cdi_dirs)
    if names:
        chosen = []
        for g in gpus:
            for candidate in (g.uuid, str(g.index)):
                if candidate in names:
                    chosen.append(f"nvidia.com/gpu={candidate}")
                    break
            else:
                break
        if len(chosen) == len(gpus):
            return GpuAccess(cdi_devices=tuple(chosen), env=env)
    mounts = driver_mounts(ldconfig)
    if mounts:
        env["LD_LIBRARY_PATH"] = f"{DRIVER_DIR}/lib64"
        env["PATH"] = f"{DRIVER_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return GpuAccess(devices=_device_nodes(gpus, node), mounts=tuple(mounts), env=env)


def _device_nodes(gpus: Sequence[Gpu], node: Node) -> tuple[tuple[str, str], ...]:
    # Inside, a GPU keeps its host device name (/dev/nvidia2), as nvidia-docker did: the
    # driver matches nodes to GPUs by minor number.
    devs = [(g.device_path, f"/dev/nvidia{g.minor}") for g in gpus]
    devs += [(c, f"/dev/{os.path.basename(c)}") for c in node.control_devices]
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
