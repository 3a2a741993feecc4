"""``discover``: put the probes together into one ``Node`` for this machine.

GPU sources are tried in order of trust: fake GPUs when configured (the user asked
for them), then NVML (what nvidia-smi uses), then the driver's procfs (less detail,
but there when libnvidia-ml.so is not), else none.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from hetflow.config import find_engine
from hetflow.errors import EngineError, InventoryError
from hetflow.inventory.cpu import probe_cpu, probe_memory
from hetflow.inventory.fake import ENV_VAR, fake_links, make_fake_gpus
from hetflow.inventory.models import Gpu, GpuLink, Node
from hetflow.inventory.nvml import probe_nvml_topology
from hetflow.inventory.procfs import DEFAULT_ROOT, probe_procfs

# Device nodes a CUDA program needs besides /dev/nvidiaN, as the NVIDIA Container
# Toolkit injects them: control, unified memory, and the modeset device.
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def _gpus(
    home: Path,
    env: Mapping[str, str],
    nvml: object | None,
    procfs_root: Path,
    dev_root: Path,
) -> tuple[list[Gpu], list[GpuLink], str, list[str]]:
    """The GPUs, how they are connected, where they came from, and the control devices
    that go with them."""
    spec = env.get(ENV_VAR, "").strip()
    if spec:
        gpus, control = make_fake_gpus(spec, home / "dev")
        return gpus, list(fake_links(spec)), "fake", control
    source = "nvml"
    links: list[GpuLink] = []
    found = None
    probed = probe_nvml_topology(nvml)
    if probed is not None:
        found, links = probed
    else:
        source = "procfs"
        found = probe_procfs(procfs_root)
    if found is None:
        return [], [], "none", []
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
) -> Node:
    """Describe this machine.

    ``home`` is hetflow's state directory (fake GPU nodes go in ``home/dev``); ``env``
    defaults to ``os.environ``.  ``nvml``, ``procfs_root`` and ``dev_root`` are seams
    for tests: a fake NVML module, a fake ``/proc/driver/nvidia`` and a fake ``/dev``.
    Raises ``InventoryError`` only for a malformed ``HETFLOW_FAKE_GPUS`` or fake
    device nodes that cannot be made; a machine without GPUs is a normal answer.
    """
    env = os.environ if env is None else env
    gpus, links, source, control = _gpus(home, env, nvml, procfs_root or DEFAULT_ROOT, dev_root)
    return Node(
        name=socket.gethostname(),
        kernel=os.uname().release,
        cpu=probe_cpu(),
        memory_bytes=probe_memory(),
        gpus=tuple(gpus),
        gpu_links=tuple(links),
        gpu_source=source,
        control_devices=tuple(control),
        container_engine=_container_engine(env),
        labels=parse_labels(env.get("HETFLOW_NODE_LABELS", "")),
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
