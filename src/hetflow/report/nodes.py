"""``hetflow nodes``: a node as ``docker info`` plus ``nvidia-smi`` would show it, or as JSON;
``--topo`` adds the GPU interconnect matrix of ``nvidia-smi topo -m``.  Below the GPU table,
each vendor's GPUs are listed the way its own tool lists them (``vendor_listing``):
NVIDIA as ``nvidia-smi -L`` (MIG instances included), AMD as ``amd-smi list``/``static``,
Intel as ``xpu-smi discovery``."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hetflow.inventory import Gpu, Node, nvidia_architecture

_GIB = 1024**3
_MIB = 1024**2


def _gib(size: int) -> float:
    return round(size / _GIB, 2)


def node_to_json(node: Node) -> dict[str, object]:
    """The node as ``model_dump`` gives it, plus sizes in GiB and a GPU count for people
    reading the JSON; the byte fields stay the source of truth."""
    data = node.model_dump(mode="json")
    data["memory_gib"] = _gib(node.memory_bytes)
    data["gpu_count"] = len(node.gpus)
    data["gpus"] = [
        {
            **gpu.model_dump(mode="json"),
            "memory_gib": _gib(gpu.memory_bytes),
            # nvidia-smi -q's "Product Architecture" (Hopper); AMD's gfx target, Intel's family
            "product_architecture": nvidia_architecture(gpu.compute_capability)
            if gpu.vendor == "nvidia"
            else gpu.architecture,
        }
        for gpu in node.gpus
    ]
    return data


def _level(node: Node) -> str:
    level = node.cpu.x86_64_level
    return "n/a (not x86-64)" if level is None else f"x86-64-v{level}"


def _summary(node: Node) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    rows = [
        ("Name", node.name),
        ("OS/Kernel", f"{node.os} {node.kernel}".strip()),
        ("Architecture", node.cpu.architecture),
        ("CPU vendor", node.cpu.vendor),
        ("CPU model", node.cpu.model),
        ("Microarchitecture", node.cpu.microarchitecture),
        ("x86-64 level", _level(node)),
        ("CPUs", str(node.cpu.cores)),
        ("Total Memory", f"{_gib(node.memory_bytes):.2f} GiB"),
        ("Container engine", node.container_engine or "none found"),
        *([("Container runtime", node.container_runtime)] if node.container_runtime else []),
        *([("Checkpoints", node.checkpoints)] if node.checkpoints else []),
        *([("GPU checkpoints", node.gpu_checkpoints)] if node.gpu_checkpoints else []),
        ("GPU source", node.gpu_source),
        ("GPU sharing", sharing_text(node)),
    ]
    if node.control_devices:
        rows.append(("Control devices", ", ".join(node.control_devices)))
    rows += [("Probe note", note) for note in node.probe_notes]
    for key, value in rows:
        grid.add_row(f"{key}:", value)
    return grid


def _features(node: Node) -> Text:
    # Flags are one long line on x86 (100+ of them); rich wraps Text at spaces.
    text = Text("CPU features: ", style="bold")
    text.append(" ".join(node.cpu.features) or "none reported", style="dim")
    return text


def _memory(gpu: Gpu) -> str:
    # procfs cannot tell memory size and reports 0; nvidia-smi prints N/A for unknowns.
    return f"{gpu.memory_bytes // _MIB} MiB" if gpu.memory_bytes else "N/A"


def _capability(gpu: Gpu) -> str:
    """NVIDIA's compute capability, else the AMD gfx target or Intel family."""
    if gpu.compute_capability and gpu.compute_capability != "0.0":
        return gpu.compute_capability
    return gpu.architecture or "N/A"


def sharing_text(node: Node) -> str:
    """``exclusive``, ``time-slicing x4 (slowdown 0.966 per extra tenant)``, ``mps x4 (10.00 GiB each)``."""
    sharing = node.gpu_sharing
    text = sharing.describe()
    if sharing.mode == "time-slicing":
        text += f" (slowdown {sharing.resolved_slowdown:g} per extra tenant)"
    elif sharing.mode == "mps" and sharing.mps_memory_limit is not None:
        text += f" ({_gib(sharing.mps_memory_limit):.2f} GiB each)"
    return text


def _nvidia_lines(gpu: Gpu) -> list[str]:
    lines = [f"GPU {gpu.index}: {gpu.model} (UUID: {gpu.uuid})"]
    lines += [f"  MIG {m.profile} Device {m.index}: (UUID: {m.uuid})" for m in gpu.mig]
    return lines


def _amd_lines(gpu: Gpu) -> list[str]:
    return [
        f"GPU: {gpu.index}",
        f"    BDF: {gpu.pci_bus_id or UNKNOWN}",
        f"    UUID: {gpu.uuid}",
        f"    MARKET_NAME: {gpu.model}",
        f"    DEVICE_ID: {gpu.device_id or UNKNOWN}",
        f"    TARGET_GRAPHICS_VERSION: {gpu.architecture or UNKNOWN}",
        f"    VRAM_SIZE: {_memory(gpu)}",
        f"    RENDER: {gpu.render_path or UNKNOWN}  CARD: {gpu.card_path or UNKNOWN}",
        f"    DRIVER: {gpu.driver_version}  ROCM: {gpu.rocm_version or UNKNOWN}",
    ]


def _intel_lines(gpu: Gpu) -> list[str]:
    return [
        f"Device ID: {gpu.index}",
        f"    Device Name: {gpu.model}",
        f"    PCI Device ID: {gpu.device_id or UNKNOWN}",
        f"    Family: {gpu.architecture or UNKNOWN}",
        f"    Memory Physical Size: {_memory(gpu)}",
        f"    PCI BDF Address: {gpu.pci_bus_id or UNKNOWN}",
        f"    DRM Device: {gpu.card_path or UNKNOWN}, {gpu.render_path or UNKNOWN}",
        f"    Driver: {gpu.driver_version}",
    ]


_TOOLS = {"nvidia": "nvidia-smi -L", "amd": "amd-smi list/static", "intel": "xpu-smi discovery"}
_LINES = {"nvidia": _nvidia_lines, "amd": _amd_lines, "intel": _intel_lines}


def vendor_listing(node: Node) -> list[str]:
    """Each vendor's GPUs as its own tool lists them, one block per vendor present, in
    the order NVIDIA, AMD, Intel; a block's header names the tool and says FAKE when the
    GPUs are made up."""
    lines: list[str] = []
    for vendor, tool in _TOOLS.items():
        gpus = [g for g in node.gpus if g.vendor == vendor]
        if not gpus:
            continue
        fake = " (FAKE: made up by HETFLOW_FAKE_GPUS)" if any(g.fake for g in gpus) else ""
        lines += ["", f"{vendor.upper()} GPUs, as {tool}{fake}:"]
        for gpu in gpus:
            lines += _LINES[vendor](gpu)
    return lines


def _gpu_table(node: Node) -> Table:
    any_fake = any(gpu.fake for gpu in node.gpus)
    title = "GPUs (FAKE: made up by HETFLOW_FAKE_GPUS)" if any_fake else "GPUs"
    table = Table(title=title, title_justify="left")
    # Short fields never wrap; the long ones (UUIDs, fake device paths under $HOME) fold
    # instead, so a narrow terminal still shows every character of what a user copies.
    table.add_column("Index", justify="right", no_wrap=True)
    table.add_column("Name")
    table.add_column("UUID", overflow="fold")
    table.add_column("Memory", justify="right", no_wrap=True)
    table.add_column("Compute cap.", no_wrap=True)
    table.add_column("Driver", no_wrap=True)
    table.add_column("Device", overflow="fold")
    table.add_column("Fake", no_wrap=True)
    for gpu in node.gpus:
        table.add_row(
            str(gpu.index),
            gpu.model,
            gpu.uuid,
            _memory(gpu),
            _capability(gpu),
            gpu.driver_version + (f" (CUDA {gpu.cuda_version})" if gpu.cuda_version else ""),
            gpu.device_path,
            "FAKE" if gpu.fake else "no",
            style="yellow" if gpu.fake else None,
        )
    return table


# What nvidia-smi topo -m prints under its matrix, nearest connection last.
TOPOLOGY_LEGEND = (
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)
UNKNOWN = "N/A"  # what nvidia-smi prints for what it cannot tell, here a pair NVML did not answer for


def topology_rows(node: Node) -> list[list[str]]:
    """The ``nvidia-smi topo -m`` matrix as rows of cells: a header row ("", GPU0 ...
    GPUn, "CPU Affinity", "NUMA Affinity"), then one row per GPU (its name, its link to
    each GPU, the CPUs and the NUMA node near it); unknowns read ``N/A``."""
    names = [f"GPU{gpu.index}" for gpu in node.gpus]
    rows = [["", *names, "CPU Affinity", "NUMA Affinity"]]
    for name, gpu in zip(names, node.gpus, strict=True):
        cells = [node.link(gpu.index, other.index) or UNKNOWN for other in node.gpus]
        numa = UNKNOWN if gpu.numa_node is None else str(gpu.numa_node)
        rows.append([name, *cells, gpu.cpu_affinity or UNKNOWN, numa])
    return rows


def render_topology(node: Node) -> RenderableType:
    """The GPU interconnect matrix and legend, as ``nvidia-smi topo -m`` prints them."""
    header, *rows = topology_rows(node)
    fake = any(gpu.fake for gpu in node.gpus)
    title = "GPU topology (FAKE: made up by HETFLOW_FAKE_GPUS)" if fake else "GPU topology"
    table = Table(title=title, title_justify="left", box=None, padding=(0, 2, 0, 0), show_edge=False)
    for i, name in enumerate(header):
        table.add_column(name, no_wrap=True, style="bold" if i == 0 else None)
    for row in rows:
        table.add_row(*row, style="yellow" if fake else None)
    legend = Text("\n".join(("", "Legend:", "", *TOPOLOGY_LEGEND)))
    return Group(table, legend)


def render_node(node: Node, *, topo: bool = False) -> RenderableType:
    """A ``docker info``-like block, the CPU features, and an ``nvidia-smi``-like table;
    with ``topo``, then the ``nvidia-smi topo -m``-like matrix (for a node with GPUs)."""
    parts: list[RenderableType] = [_summary(node), _features(node), Text()]
    if node.gpus:
        parts.append(_gpu_table(node))
        parts.append(Text("\n".join(vendor_listing(node))))
        if topo:
            parts += [Text(), render_topology(node)]
    else:
        parts.append(Text(f"No GPUs found (GPU source: {node.gpu_source})"))
    return Group(*parts)
