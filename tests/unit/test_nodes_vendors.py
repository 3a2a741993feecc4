"""`hetflow nodes` for a mixed node: each vendor's GPUs as its own tool lists them, the
sharing policy, and the JSON.  The GPUs are FAKE: built in memory, or (CLI tests) made up
by HETFLOW_FAKE_GPUS with mknod'd device nodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app, main
from hetflow.inventory import GpuSharing, MigDevice, Node
from hetflow.report.nodes import node_to_json, sharing_text, vendor_listing
from tests.unit.test_inventory_report import a_gpu, a_node, text_of

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fake GPUs mknod device nodes")
GOLDEN = Path(__file__).parent / "golden" / "nodes-vendors.txt"
MIB = 1024**2


def mixed_node() -> Node:
    mig = (
        MigDevice(index=0, uuid="MIG-one", profile="3g.40gb", slices=3, memory_bytes=40 * 1024 * MIB),
        MigDevice(index=1, uuid="MIG-two", profile="1g.10gb", slices=1, memory_bytes=10 * 1024 * MIB),
    )
    gpus = (
        a_gpu(0, model="NVIDIA H100 80GB HBM3", uuid="GPU-h100", mig=mig, mig_enabled=True),
        a_gpu(
            1,
            model="AMD Instinct MI250X",
            uuid="GPU-mi250x",
            vendor="amd",
            architecture="gfx90a",
            device_id="0x740c",
            compute_capability="",
            memory_bytes=65520 * MIB,
            rocm_version="6.2.0",
            render_path="/dev/dri/renderD128",
            card_path="/dev/dri/card0",
            device_path="/dev/dri/renderD128",
            pci_bus_id="0000:11:00.0",
            driver_version="6.8.5",
        ),
        a_gpu(
            2,
            model="Intel Data Center GPU Max 1550",
            uuid="GPU-pvc",
            vendor="intel",
            architecture="pvc",
            device_id="0x0bd5",
            compute_capability="",
            memory_bytes=131072 * MIB,
            render_path="/dev/dri/renderD129",
            card_path="/dev/dri/card1",
            device_path="/dev/dri/renderD129",
            pci_bus_id="0000:29:00.0",
            driver_version="i915",
        ),
    )
    return a_node(gpus=gpus, gpu_sharing=GpuSharing(mode="time-slicing", replicas=4))


def test_vendor_listing_matches_the_golden_file() -> None:
    """Golden: regenerate with HETFLOW_UPDATE_GOLDEN=1 after a deliberate change."""
    text = "\n".join(vendor_listing(mixed_node())) + "\n"
    if os.environ.get("HETFLOW_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_nvidia_lines_are_nvidia_smi_l() -> None:
    lines = vendor_listing(mixed_node())
    at = lines.index("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-h100)")
    assert lines[at + 1 : at + 3] == [
        "  MIG 3g.40gb Device 0: (UUID: MIG-one)",
        "  MIG 1g.10gb Device 1: (UUID: MIG-two)",
    ]


def test_render_node_shows_sharing_and_arch() -> None:
    text = text_of(mixed_node())
    assert "GPU sharing: time-slicing x4 (slowdown 0.966 per extra tenant)" in " ".join(text.split())
    assert "gfx90a" in text and "pvc" in text
    assert "TARGET_GRAPHICS_VERSION: gfx90a" in text and "PCI Device ID: 0x0bd5" in text


@pytest.mark.parametrize(
    ("sharing", "text"),
    [
        (GpuSharing(), "exclusive"),
        (GpuSharing(mode="time-slicing", replicas=2, slowdown=0.5), "time-slicing x2 (slowdown 0.5 per extra tenant)"),
        (GpuSharing(mode="mps", replicas=4, mps_memory_limit=10 * 1024**3), "mps x4 (10.00 GiB each)"),
        (GpuSharing(mode="mps", replicas=4), "mps x4"),
    ],
)
def test_sharing_text(sharing: GpuSharing, text: str) -> None:
    assert sharing_text(a_node(gpu_sharing=sharing)) == text


def test_json_carries_every_accelerator_field() -> None:
    data = node_to_json(mixed_node())
    gpus = data["gpus"]
    assert isinstance(gpus, list)
    assert gpus[0]["mig"][0]["uuid"] == "MIG-one" and gpus[0]["mig_enabled"] is True
    assert {k: gpus[1][k] for k in ("vendor", "architecture", "device_id", "rocm_version", "render_path")} == {
        "vendor": "amd",
        "architecture": "gfx90a",
        "device_id": "0x740c",
        "rocm_version": "6.2.0",
        "render_path": "/dev/dri/renderD128",
    }
    assert data["gpu_sharing"] == {"mode": "time-slicing", "replicas": 4, "slowdown": None, "mps_memory_limit": None}
    json.dumps(data)


def invoke(tmp_path: Path, *args: str, sharing: str = "mps:4") -> tuple[int, str]:
    env = {
        "HETFLOW_HOME": str(tmp_path),
        "HETFLOW_FAKE_GPUS": "h100:1:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb,mi250x:1,max1550:1",
        "HETFLOW_GPU_SHARING": sharing,
        "HETFLOW_NODE_LABELS": "",
    }
    result = CliRunner().invoke(app, ["nodes", *args], env=env)
    return result.exit_code, result.output


@needs_root
def test_cli_nodes_lists_a_mixed_fake_node(tmp_path: Path) -> None:
    code, out = invoke(tmp_path)
    assert code == 0, out
    assert "NVIDIA GPUs, as nvidia-smi -L (FAKE: made up by HETFLOW_FAKE_GPUS):" in out
    assert sum(line.startswith("  MIG ") for line in out.splitlines()) == 4
    assert "  MIG 2g.20gb Device 1: (UUID: MIG-fake-" in out
    assert "TARGET_GRAPHICS_VERSION: gfx90a" in out and "Family: pvc" in out
    code, out = invoke(tmp_path, "--json")
    (node,) = json.loads(out)
    assert [g["vendor"] for g in node["gpus"]] == ["nvidia", "amd", "intel"]
    assert node["gpu_sharing"]["mode"] == "mps" and str(tmp_path / "dev" / "kfd") in node["control_devices"]


def test_cli_nodes_bad_sharing_exits_2_with_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("HETFLOW_FAKE_GPUS", raising=False)
    monkeypatch.setenv("HETFLOW_GPU_SHARING", "slices")
    with pytest.raises(SystemExit) as caught:
        main(["nodes"])
    assert caught.value.code == 2
    out = capsys.readouterr()
    assert "HETFLOW_GPU_SHARING='slices': 'slices' is not a sharing mode" in out.out + out.err
    assert "Traceback" not in out.out + out.err
