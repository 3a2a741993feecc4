"""`hetflow nodes` output: node_to_json and the rich rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from hetflow.inventory import Cpu, Gpu, GpuLink, Node, node_fields
from hetflow.report.nodes import TOPOLOGY_LEGEND, node_to_json, render_node, render_topology, topology_rows

GIB = 1024**3


def a_cpu(**changes: object) -> Cpu:
    base = Cpu(
        vendor="AuthenticAMD",
        model="AMD EPYC 7763 64-Core Processor",
        architecture="x86_64",
        microarchitecture="zen3",
        x86_64_level=3,
        cores=16,
        features=("avx", "avx2", "fma"),
    )
    return base.model_copy(update=changes)


def a_gpu(index: int = 0, **changes: object) -> Gpu:
    base = Gpu(
        index=index,
        uuid=f"GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f1{index}",
        model="NVIDIA A100-SXM4-40GB",
        memory_bytes=40 * GIB,
        compute_capability="8.0",
        driver_version="550.54.15",
        cuda_version="12.4",
        device_path=f"/dev/nvidia{index}",
        minor=index,
    )
    return base.model_copy(update=changes)


def a_node(**changes: object) -> Node:
    base = Node(
        name="gpu01",
        kernel="6.1.0-18-amd64",
        cpu=a_cpu(),
        memory_bytes=64 * GIB,
        gpus=(a_gpu(0), a_gpu(1)),
        gpu_source="nvml",
        control_devices=("/dev/nvidiactl",),
        container_engine="podman",
    )
    return base.model_copy(update=changes)


def text_of(node: Node) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(render_node(node))
    return console.export_text()


def test_node_to_json_adds_human_sizes_and_stays_json() -> None:
    data = node_to_json(a_node(gpus=(a_gpu(0, memory_bytes=GIB // 2),)))

    assert data["memory_gib"] == 64.0
    assert data["memory_bytes"] == 64 * GIB
    assert data["gpu_count"] == 1
    want = {**a_gpu(0).model_dump(mode="json"), "memory_bytes": GIB // 2, "memory_gib": 0.5}
    assert data["gpus"] == [{**want, "product_architecture": "Ampere"}]  # nvidia-smi -q's name for 8.0
    assert json.loads(json.dumps(data)) == data


def test_node_to_json_round_trips_to_node() -> None:
    node = a_node()
    data = json.loads(json.dumps(node_to_json(node)))

    # The added human fields are the only ones a Node (extra="forbid") would refuse.
    del data["memory_gib"], data["gpu_count"]
    for gpu in data["gpus"]:
        del gpu["memory_gib"], gpu["product_architecture"]

    assert Node.model_validate(data) == node


SUMMARY_LINES = [
    pytest.param("Name:", "gpu01", id="name"),
    pytest.param("OS/Kernel:", "linux 6.1.0-18-amd64", id="kernel"),
    pytest.param("Architecture:", "x86_64", id="architecture"),
    pytest.param("CPU vendor:", "AuthenticAMD", id="vendor"),
    pytest.param("CPU model:", "AMD EPYC 7763 64-Core Processor", id="model"),
    pytest.param("Microarchitecture:", "zen3", id="uarch"),
    pytest.param("x86-64 level:", "x86-64-v3", id="level"),
    pytest.param("CPUs:", "16", id="cores"),
    pytest.param("Total Memory:", "64.00 GiB", id="memory"),
    pytest.param("Container engine:", "podman", id="engine"),
    pytest.param("GPU source:", "nvml", id="gpu-source"),
    pytest.param("CPU features:", "avx avx2 fma", id="features"),
]


@pytest.mark.parametrize(("key", "value"), SUMMARY_LINES)
def test_render_node_summary_line(key: str, value: str) -> None:
    lines = [line.split() for line in text_of(a_node()).splitlines()]

    assert key.split() + value.split() in lines


def test_render_node_gpu_table_shows_each_gpu() -> None:
    text = text_of(a_node())

    for header in ("Index", "Name", "UUID", "Memory", "Compute cap.", "Driver", "Device", "Fake"):
        assert header in text
    assert "GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f10" in text
    assert "GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f11" in text
    assert "40960 MiB" in text
    assert "550.54.15 (CUDA 12.4)" in text
    assert "FAKE" not in text


def test_render_node_marks_fake_gpus() -> None:
    fake = a_gpu(0, fake=True, driver_version="fake", cuda_version=None, uuid="GPU-fake-1")

    text = text_of(a_node(gpus=(fake,), gpu_source="fake"))

    assert "GPUs (FAKE: made up by HETFLOW_FAKE_GPUS)" in text
    row = next(line for line in text.splitlines() if "GPU-fake-1" in line)
    assert row.split("│")[-2].strip() == "FAKE"


def test_render_node_procfs_unknowns_read_na() -> None:
    gpu = a_gpu(0, memory_bytes=0, compute_capability="0.0", cuda_version=None)

    text = text_of(a_node(gpus=(gpu,), gpu_source="procfs"))

    row = next(line for line in text.splitlines() if gpu.uuid in line)
    assert row.count("N/A") == 2


def test_render_node_without_gpus_says_so() -> None:
    text = text_of(a_node(gpus=(), gpu_source="none", control_devices=()))

    assert "No GPUs found (GPU source: none)" in text
    assert "Index" not in text


def test_render_node_off_x86_has_no_level() -> None:
    arm = a_cpu(architecture="aarch64", microarchitecture="neoverse_n1", x86_64_level=None)

    text = text_of(a_node(cpu=arm))

    assert "x86-64-v" not in text
    assert "n/a (not x86-64)" in text


# --- --topo: the nvidia-smi topo -m matrix ----------------------------------------------


def topo_node() -> Node:
    gpus = (
        a_gpu(0, numa_node=0, cpu_affinity="0-15,32-47"),
        a_gpu(1, numa_node=0, cpu_affinity="0-15,32-47"),
        a_gpu(2, numa_node=1, cpu_affinity="16-31,48-63"),
    )
    links = (GpuLink(a=0, b=1, kind="NV", nvlinks=12), GpuLink(a=0, b=2, kind="SYS"))
    return a_node(gpus=gpus, gpu_links=links)


def topo_text(node: Node) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(render_topology(node))
    return console.export_text()


def test_topology_rows_are_the_matrix_cells() -> None:
    assert topology_rows(topo_node()) == [
        ["", "GPU0", "GPU1", "GPU2", "CPU Affinity", "NUMA Affinity"],
        ["GPU0", "X", "NV12", "SYS", "0-15,32-47", "0"],
        ["GPU1", "NV12", "X", "N/A", "0-15,32-47", "0"],
        ["GPU2", "SYS", "N/A", "X", "16-31,48-63", "1"],
    ]


def test_render_topology_prints_rows_and_legend() -> None:
    lines = [line.split() for line in topo_text(topo_node()).splitlines()]

    assert ["GPU0", "GPU1", "GPU2", "CPU", "Affinity", "NUMA", "Affinity"] in lines
    assert ["GPU0", "X", "NV12", "SYS", "0-15,32-47", "0"] in lines
    assert ["GPU1", "NV12", "X", "N/A", "0-15,32-47", "0"] in lines
    assert ["GPU2", "SYS", "N/A", "X", "16-31,48-63", "1"] in lines
    assert ["Legend:"] in lines
    for legend in TOPOLOGY_LEGEND:
        assert legend.split() in lines
    assert "FAKE" not in topo_text(topo_node())


def test_render_topology_of_fake_gpus_says_so() -> None:
    node = topo_node()
    fake = a_node(gpus=tuple(g.model_copy(update={"fake": True}) for g in node.gpus), gpu_links=node.gpu_links)

    assert "GPU topology (FAKE: made up by HETFLOW_FAKE_GPUS)" in topo_text(fake)


def test_render_topology_unknowns_read_na() -> None:
    text = topo_text(a_node(gpus=(a_gpu(0), a_gpu(1))))

    assert ["GPU0", "X", "N/A", "N/A", "N/A"] in [line.split() for line in text.splitlines()]


def test_render_node_adds_topology_only_when_asked() -> None:
    console = Console(record=True, width=200, color_system=None)
    console.print(render_node(topo_node(), topo=True))
    with_topo = console.export_text()

    assert "GPU topology" in with_topo
    assert ["GPU0", "X", "NV12", "SYS", "0-15,32-47", "0"] in [line.split() for line in with_topo.splitlines()]
    assert "GPU topology" not in text_of(topo_node())


def test_render_node_without_gpus_has_no_topology() -> None:
    console = Console(record=True, width=200, color_system=None)
    console.print(render_node(a_node(gpus=(), gpu_source="none"), topo=True))

    assert "GPU topology" not in console.export_text()


def test_node_to_json_carries_topology() -> None:
    data = node_to_json(topo_node())

    assert data["gpu_links"] == [
        {"a": 0, "b": 1, "kind": "NV", "nvlinks": 12},
        {"a": 0, "b": 2, "kind": "SYS", "nvlinks": 0},
    ]
    gpus = data["gpus"]
    assert isinstance(gpus, list)
    assert (gpus[2]["numa_node"], gpus[2]["cpu_affinity"]) == (1, "16-31,48-63")
    assert gpus[0]["pci_bus_id"] == ""


def test_what_nodes_json_printed_on_a_real_h100_reads_back_as_a_node() -> None:
    # `hetflow nodes --json` on the H100 machine (docs/gpu-runs/2026-11-27-h100), less its added fields
    data = json.loads((Path(__file__).parent / "data" / "gpu-check" / "h100" / "nodes.json").read_text())[0]
    node = Node.model_validate(node_fields(data))
    assert (node.gpus[0].model, node.gpus[0].compute_capability, node.gpus[0].fake) == (
        "NVIDIA H100 80GB HBM3",
        "9.0",
        False,
    )
    assert node_to_json(node)["gpus"][0]["product_architecture"] == "Hopper"  # as nvidia-smi -q says
    with pytest.raises(ValueError, match="memry_bytes"):
        Node.model_validate(node_fields({**data, "memry_bytes": 1}))  # a typo is still refused
