"""``discover``: put the probes together into one ``Node`` for this machine.

GPU sources are tried in order of trust: fake GPUs when configured (the user asked
for them, and then they are the only GPUs), else NVIDIA through NVML (what nvidia-smi
uses) or the driver's procfs (less detail, but there when libnvidia-ml.so is not), then
AMD through the KFD topology (``amd``) and Intel through DRM sysfs (``intel``).  GPU
indexes run NVIDIA first, then AMD, then Intel.  A probe that fails leaves a line in
``Node.probe_notes``, never an exception.  ``HETFLOW_GPU_SHARING`` sets the node's
sharing policy (``sharing``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from hetflow.config import find_engine
from hetflow.errors import EngineError, InventoryError
from hetflow.inventory.cpu import probe_cpu, probe_memory
from hetflow.inventory.fakes.gpus import ENV_VAR, fake_links, make_fake_gpus
from hetflow.inventory.gpus.amd import amdsmi_names, probe_amd
from hetflow.inventory.gpus.intel import probe_intel
from hetflow.inventory.gpus.nvml import probe_nvml_topology
from hetflow.inventory.gpus.procfs import DEFAULT_ROOT, probe_procfs
from hetflow.inventory.models import Gpu, GpuLink, Node
from hetflow.inventory.sharing import SHARING_VAR, parse_gpu_sharing

# Device nodes a CUDA program needs besides /dev/nvidiaN, as the NVIDIA Container
# Toolkit injects them: control, unified memory, and the modeset device.
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


class _Found:
    """What the GPU probes found: the GPUs, their links, sources, control devices, notes."""

    def __init__(self) -> None:
        self.gpus: list[Gpu] = []
        self.links: list[GpuLink] = []
        self.sources: list[str] = []
        self.control: list[str] = []
        self.notes: list[str] = []

    def add(self, gpus: list[Gpu], source: str) -> None:
        start = len(self.gpus)
        self.gpus += [g.model_copy(update={"index": start + i}) for i, g in enumerate(gpus)]
        if gpus:
            self.sources.append(source)


def _amd_intel(found: _Found, sys_root: Path, dev_root: Path) -> None:
    try:
        amd, notes = probe_amd(sys_root)
        found.notes += notes
        if any(g.model.startswith("AMD GPU 0x") for g in amd):
            amd = _amdsmi_named(amd)
        found.add(amd, "kfd")
        if amd and (dev_root / "kfd").exists():
            found.control.append(str(dev_root / "kfd"))
    except (OSError, ValueError) as err:
        found.notes.append(f"AMD probe failed: {err}")
    try:
        intel, notes = probe_intel(sys_root)
        found.notes += notes
        found.add(intel, "drm")
    except (OSError, ValueError) as err:
        found.notes.append(f"Intel probe failed: {err}")


def _amdsmi_named(gpus: list[Gpu]) -> list[Gpu]:
    """Names for GPUs the model table does not know, from amdsmi when it is installed."""
    try:
        import amdsmi  # type: ignore[import-not-found]  # optional: ROCm's Python bindings
    except ImportError:
        return gpus
    names = amdsmi_names(amdsmi)
    return [g.model_copy(update={"model": names.get(g.pci_bus_id.lower(), g.model)}) for g in gpus]


def _gpus(
    home: Path,
    env: Mapping[str, str],
    nvml: object | None,
    procfs_root: Path,
    dev_root: Path,
    sys_root: Path,
) -> _Found:
    """The GPUs, how they are connected, where they came from, the control devices that
    go with them, and notes on what could not be read."""
    found = _Found()
    spec = env.get(ENV_VAR, "").strip()
    if spec:
        gpus, control = make_fake_gpus(spec, home / "dev")
        found.add(gpus, "fake")
        found.links, found.control = list(fake_links(spec)), control
        return found
    nvidia = _nvidia(nvml, procfs_root, dev_root)
    if nvidia is not None:
        gpus, found.links, source, found.control = nvidia
        found.add(gpus, source)
    _amd_intel(found, sys_root, dev_root)
    return found


def _nvidia(
    nvml: object | None, procfs_root: Path, dev_root: Path
) -> tuple[list[Gpu], list[GpuLink], str, list[str]] | None:
    source = "nvml"
    links: list[GpuLink] = []
    found = None
    probed = probe_nvml_topology(nvml)
    if probed is not None:
        found, links = probed
    else:
        source = "procfs"
        found = probe_procfs(procfs_root)
    if not found:
        return None
    present = [str(dev_root / name) for name in CONTROL_DEVICES if (dev_root / name).exists()]
    return found, links, source, present


def _container_engine(env: Mapping[str, str]) -> str | None:
    # Same lookup the runner uses (HETFLOW_ENGINE, else podman, else docker), so
    # `hetflow nodes` reports the engine that steps will actually run under.
    try:
        return Path(find_engine(env)).name
    except EngineError:
        return None


def discover(
    home: Path,
    env: Mapping[str, str] | None = None,
    *,
    nvml: object | None = None,
    procfs_root: Path | None = None,
    dev_root: Path = Path("/dev"),
    sys_root: Path = Path("/"),
) -> Node:
    """Describe this machine.

    ``home`` is hetflow's state directory (fake GPU nodes go in ``home/dev``); ``env``
    defaults to ``os.environ``.  ``nvml``, ``procfs_root`` and ``dev_root`` are seams
    for tests: a fake NVML module, a fake ``/proc/driver/nvidia`` and a fake ``/dev``;
    ``sys_root`` is where ``sys/class/kfd``, ``sys/class/drm`` and ``opt/rocm`` are read
    (a fake tree in tests).  Raises ``InventoryError`` only for a malformed
    ``HETFLOW_FAKE_GPUS`` or ``HETFLOW_GPU_SHARING``, or fake device nodes that cannot be
    made; a machine without GPUs is a normal answer.
    """
    env = os.environ if env is None else env
    sharing = parse_gpu_sharing(env.get(SHARING_VAR, ""))
    found = _gpus(home, env, nvml, procfs_root or DEFAULT_ROOT, dev_root, sys_root)
    return Node(
        name=socket.gethostname(),
        kernel=os.uname().release,
        cpu=probe_cpu(),
        memory_bytes=probe_memory(),
        gpus=tuple(found.gpus),
        gpu_links=tuple(found.links),
        gpu_source=",".join(found.sources) or "none",
        control_devices=tuple(found.control),
        container_engine=_container_engine(env),
        labels=parse_labels(env.get("HETFLOW_NODE_LABELS", "")),
        gpu_sharing=sharing,
        probe_notes=tuple(found.notes),
    )


def parse_labels(text: str) -> dict[str, str]:
    """``zone=a,tier=gpu`` -> {"zone": "a", "tier": "gpu"} (the node's labels, as a
    Kubernetes node or a Slurm feature list would carry them)."""
    labels: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InventoryError(f"HETFLOW_NODE_LABELS: {item!r} is not KEY=VALUE; write e.g. zone=a,tier=gpu")
        labels[key.strip()] = value.strip()
    return labels
