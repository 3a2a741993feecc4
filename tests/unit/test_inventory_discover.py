"""discover(): which GPU source wins, control devices, engine, and host facts."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from hetflow.errors import InventoryError
from hetflow.inventory import discover
from hetflow.inventory.fakes.nvml import FakeNvml, FakeNvmlDevice, MissingNvml

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fake GPUs mknod device nodes")

PROCFS_INFORMATION = """\
Model: \t\t Tesla V100-SXM2-16GB
GPU UUID: \t GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0
Bus Location: \t 0000:3b:00.0
Device Minor: \t 0
"""


def write_procfs(root: Path) -> Path:
    (root / "gpus" / "0000:3b:00.0").mkdir(parents=True)
    (root / "gpus" / "0000:3b:00.0" / "information").write_text(PROCFS_INFORMATION)
    (root / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08\n")
    return root


@dataclass(frozen=True)
class SourceCase:
    fake_spec: str | None  # HETFLOW_FAKE_GPUS, None for unset
    nvml_works: bool
    procfs_present: bool
    source: str
    models: list[str]


SOURCE_CASES = [
    pytest.param(
        SourceCase("t4:2", True, True, "fake", ["Tesla T4", "Tesla T4"]),
        id="fake-beats-nvml-and-procfs",
        marks=needs_root,
    ),
    pytest.param(SourceCase(None, True, True, "nvml", ["NVIDIA H100 80GB HBM3"]), id="nvml-beats-procfs"),
    pytest.param(
        SourceCase(None, False, True, "procfs", ["Tesla V100-SXM2-16GB"]),
        id="procfs-when-nvml-missing",
    ),
    pytest.param(SourceCase(None, False, False, "none", []), id="none-without-driver"),
    pytest.param(SourceCase("  ", False, False, "none", []), id="blank-fake-setting-is-unset"),
]


@pytest.mark.parametrize("case", SOURCE_CASES)
def test_discover_picks_gpu_source_in_order(tmp_path: Path, case: SourceCase) -> None:
    env = {"HETFLOW_FAKE_GPUS": case.fake_spec} if case.fake_spec is not None else {}
    device = FakeNvmlDevice(name="NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
    nvml = FakeNvml(devices=[device]) if case.nvml_works else MissingNvml()
    procfs = write_procfs(tmp_path / "proc") if case.procfs_present else tmp_path / "absent"

    node = discover(tmp_path / "home", env, nvml=nvml, procfs_root=procfs, dev_root=tmp_path)

    assert node.gpu_source == case.source
    assert [g.model for g in node.gpus] == case.models


@needs_root
def test_discover_fake_gpus_live_under_home_dev(tmp_path: Path) -> None:
    home = tmp_path / "home"

    node = discover(home, {"HETFLOW_FAKE_GPUS": "a100:1"}, nvml=MissingNvml(), dev_root=tmp_path)

    assert [g.device_path for g in node.gpus] == [str(home / "dev" / "nvidia0")]
    assert node.control_devices == (str(home / "dev" / "nvidiactl"),)
    assert all(g.fake for g in node.gpus)


@needs_root
def test_discover_fake_gpus_with_topology_have_links(tmp_path: Path) -> None:
    node = discover(tmp_path / "home", {"HETFLOW_FAKE_GPUS": "a100:2:nvlink,t4:1"}, nvml=MissingNvml())

    assert node.link(0, 1) == "NV12"
    assert node.link(0, 2) == ""  # t4 has no topology word
    assert [g.numa_node for g in node.gpus] == [0, 1, None]


def test_discover_takes_links_from_nvml(tmp_path: Path) -> None:
    devices = [
        FakeNvmlDevice(pci_bus_id="00000000:07:00.0", nvlinks=("00000000:0F:00.0",) * 2),
        FakeNvmlDevice(minor=1, pci_bus_id="00000000:0F:00.0"),
        FakeNvmlDevice(minor=2, pci_bus_id="00000000:87:00.0"),
    ]
    nvml = FakeNvml(devices=devices, ancestors={(0, 2): 50, (1, 2): 50})

    node = discover(tmp_path, {}, nvml=nvml, dev_root=tmp_path)

    assert node.gpu_source == "nvml"
    assert [node.link(0, 1), node.link(0, 2), node.link(1, 2)] == ["NV2", "SYS", "SYS"]
    assert [g.pci_bus_id for g in node.gpus] == ["00000000:07:00.0", "00000000:0F:00.0", "00000000:87:00.0"]


def test_discover_procfs_gpus_have_no_links(tmp_path: Path) -> None:
    procfs = write_procfs(tmp_path / "proc")

    node = discover(tmp_path, {}, nvml=MissingNvml(), procfs_root=procfs, dev_root=tmp_path)

    assert node.gpu_source == "procfs"
    assert node.gpu_links == ()


def test_discover_bad_fake_setting_raises(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="'b200:1' names no known model"):
        discover(tmp_path, {"HETFLOW_FAKE_GPUS": "b200:1"}, nvml=FakeNvml())


def test_discover_lists_only_control_devices_that_exist(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-modeset"):
        (dev / name).touch()  # existence is all discover checks

    node = discover(tmp_path, {}, nvml=FakeNvml(devices=[FakeNvmlDevice()]), dev_root=dev)

    assert node.control_devices == (
        str(dev / "nvidiactl"),
        str(dev / "nvidia-uvm"),
        str(dev / "nvidia-modeset"),
    )


def test_discover_without_gpus_lists_no_control_devices(tmp_path: Path) -> None:
    (tmp_path / "nvidiactl").touch()

    node = discover(tmp_path, {}, nvml=MissingNvml(), procfs_root=tmp_path / "absent", dev_root=tmp_path)

    assert node.control_devices == ()


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_discover_reports_engine_found(tmp_path: Path) -> None:
    podman = executable(tmp_path / "podman")

    node = discover(tmp_path, {"HETFLOW_ENGINE": str(podman)}, nvml=MissingNvml())

    assert node.container_engine == "podman"


def test_discover_reports_no_engine(tmp_path: Path) -> None:
    node = discover(tmp_path, {"HETFLOW_ENGINE": str(tmp_path / "docker")}, nvml=MissingNvml())

    assert node.container_engine is None


def test_discover_describes_this_host(tmp_path: Path) -> None:
    node = discover(tmp_path, {}, nvml=MissingNvml(), procfs_root=tmp_path / "absent")

    assert node.name == socket.gethostname()
    assert node.kernel == os.uname().release
    assert node.cpu.cores == len(os.sched_getaffinity(0))
    assert node.memory_bytes > 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", {}), ("zone=a", {"zone": "a"}), (" zone=a , tier=gpu ", {"zone": "a", "tier": "gpu"})],
    ids=["none", "one", "two-with-spaces"],
)
def test_node_labels_from_the_environment(text: str, expected: dict[str, str]) -> None:
    from hetflow.inventory.probe import parse_labels

    assert parse_labels(text) == expected


def test_malformed_node_labels_name_the_item() -> None:
    from hetflow.errors import InventoryError
    from hetflow.inventory.probe import parse_labels

    with pytest.raises(InventoryError, match="'tier' is not KEY=VALUE"):
        parse_labels("zone=a,tier")
