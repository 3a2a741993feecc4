"""GPU probes: NVML through FakeNvml, and the driver's procfs from a temporary tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.inventory import Gpu
from hetflow.inventory.fakes.nvml import FakeNvml, FakeNvmlDevice, MissingNvml
from hetflow.inventory.gpus.nvml import cuda_version, probe_nvml
from hetflow.inventory.gpus.procfs import (
    compute_capability_for,
    parse_driver_version,
    probe_procfs,
)

MIB = 1024**2

A100 = FakeNvmlDevice(
    name="NVIDIA A100-SXM4-40GB",
    uuid="GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f11",
    memory_bytes=40960 * MIB,
    compute_capability=(8, 0),
    minor=0,
)
H100 = FakeNvmlDevice(
    name="NVIDIA H100 80GB HBM3",
    uuid="GPU-9c0d2e71-3a4b-5c6d-7e8f-901a2b3c4d5e",
    memory_bytes=81559 * MIB,
    compute_capability=(9, 0),
    minor=3,  # minors need not follow indexes (a GPU hidden or excluded)
)


def expected_gpu(index: int, device: FakeNvmlDevice, cuda: str | None = "12.4") -> Gpu:
    major, minor = device.compute_capability
    return Gpu(
        index=index,
        uuid=device.uuid,
        model=device.name,
        memory_bytes=device.memory_bytes,
        compute_capability=f"{major}.{minor}",
        driver_version="550.54.15",
        cuda_version=cuda,
        device_path=f"/dev/nvidia{device.minor}",
        minor=device.minor,
    )


NVML_CASES = [
    pytest.param(FakeNvml(devices=[]), [], id="driver-but-no-gpus"),
    pytest.param(FakeNvml(devices=[A100]), [expected_gpu(0, A100)], id="one-a100"),
    pytest.param(
        FakeNvml(devices=[A100, H100]),
        [expected_gpu(0, A100), expected_gpu(1, H100)],
        id="a100-and-h100",
    ),
    pytest.param(FakeNvml(devices=[H100], as_bytes=True), [expected_gpu(0, H100)], id="bytes-answers"),
    pytest.param(
        FakeNvml(devices=[A100], fail_on="nvmlSystemGetCudaDriverVersion_v2"),
        [expected_gpu(0, A100, cuda=None)],
        id="old-driver-without-cuda-version",
    ),
]


@pytest.mark.parametrize(("nvml", "expected"), NVML_CASES)
def test_probe_nvml_describes_each_device(nvml: FakeNvml, expected: list[Gpu]) -> None:
    assert probe_nvml(nvml) == expected
    assert nvml.calls[0] == "nvmlInit"
    assert nvml.calls[-1] == "nvmlShutdown"


def test_probe_nvml_without_library_is_none_not_an_error() -> None:
    nvml = MissingNvml(devices=[A100])

    assert probe_nvml(nvml) is None
    assert nvml.calls == ["nvmlInit"]  # nothing to shut down after a failed init


@pytest.mark.parametrize(
    "failing",
    ["nvmlDeviceGetCount", "nvmlDeviceGetMemoryInfo", "nvmlSystemGetDriverVersion"],
)
def test_probe_nvml_query_failure_is_none_and_still_shuts_down(failing: str) -> None:
    nvml = FakeNvml(devices=[A100], fail_on=failing)

    assert probe_nvml(nvml) is None
    assert nvml.calls[-1] == "nvmlShutdown"


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_probe_nvml_real_pynvml_without_driver_is_none() -> None:
    assert probe_nvml() is None


@pytest.mark.parametrize(
    ("encoded", "text"),
    [(12040, "12.4"), (11080, "11.8"), (12000, "12.0"), (10010, "10.1")],
    ids=["12.4", "11.8", "12.0", "10.1"],
)
def test_cuda_version_decodes_nvml_integer(encoded: int, text: str) -> None:
    assert cuda_version(encoded) == text


# --- procfs -----------------------------------------------------------------------

# As the 550 driver writes them (tabs and spaces included).
A100_INFORMATION = """\
Model: \t\t NVIDIA A100-SXM4-40GB
IRQ:   \t\t 221
GPU UUID: \t GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f11
Video BIOS: \t 92.00.45.00.03
Bus Type: \t PCIe
DMA Size: \t 47 bits
DMA Mask: \t 0x7fffffffffff
Bus Location: \t 0000:07:00.0
Device Minor: \t 0
GPU Firmware: \t 550.54.15
GPU Excluded:\t No
"""
T4_INFORMATION = A100_INFORMATION.replace("NVIDIA A100-SXM4-40GB", "Tesla T4").replace(
    "GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f11", "GPU-1d5e7f90-aaaa-bbbb-cccc-0123456789ab"
)
T4_INFORMATION = T4_INFORMATION.replace("0000:07:00.0", "0000:0f:00.0").replace(
    "Device Minor: \t 0", "Device Minor: \t 1"
)
PROPRIETARY_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
OPEN_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Fri Aug 16 21:42:42 UTC 2024\n"
)


def write_procfs(root: Path, gpus: dict[str, str], version: str | None) -> Path:
    for bus, information in gpus.items():
        directory = root / "gpus" / bus
        directory.mkdir(parents=True)
        (directory / "information").write_text(information)
    if version is not None:
        (root / "version").write_text(version)
    return root


def test_probe_procfs_reads_gpus_in_bus_order(tmp_path: Path) -> None:
    # Created in reverse bus order: the index must follow the bus, not creation order.
    root = write_procfs(
        tmp_path,
        {"0000:0f:00.0": T4_INFORMATION, "0000:07:00.0": A100_INFORMATION},
        PROPRIETARY_VERSION,
    )

    assert probe_procfs(root) == [
        Gpu(
            index=0,
            uuid="GPU-2f1b6a0e-4c1d-8e3a-7b55-0a1e9c3d4f11",
            model="NVIDIA A100-SXM4-40GB",
            memory_bytes=0,
            compute_capability="8.0",
            driver_version="550.54.15",
            device_path="/dev/nvidia0",
            minor=0,
        ),
        Gpu(
            index=1,
            uuid="GPU-1d5e7f90-aaaa-bbbb-cccc-0123456789ab",
            model="Tesla T4",
            memory_bytes=0,
            compute_capability="7.5",
            driver_version="550.54.15",
            device_path="/dev/nvidia1",
            minor=1,
        ),
    ]


def test_probe_procfs_without_version_file_says_unknown_driver(tmp_path: Path) -> None:
    root = write_procfs(tmp_path, {"0000:07:00.0": A100_INFORMATION}, None)

    gpus = probe_procfs(root)

    assert gpus is not None
    assert [g.driver_version for g in gpus] == ["unknown"]


def test_probe_procfs_missing_directory_is_none(tmp_path: Path) -> None:
    assert probe_procfs(tmp_path / "no-driver") is None


def test_probe_procfs_driver_loaded_but_no_gpus_is_empty(tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()

    assert probe_procfs(tmp_path) == []


@pytest.mark.parametrize(
    ("text", "version"),
    [
        pytest.param(PROPRIETARY_VERSION, "550.54.15", id="proprietary-module"),
        pytest.param(OPEN_VERSION, "560.35.03", id="open-module"),
        pytest.param("GCC version: 12\n", None, id="no-nvrm-line"),
    ],
)
def test_parse_driver_version(text: str, version: str | None) -> None:
    assert parse_driver_version(text) == version


@pytest.mark.parametrize(
    ("model", "capability"),
    [
        pytest.param("NVIDIA A100-SXM4-40GB", "8.0", id="a100"),
        pytest.param("NVIDIA A100 80GB PCIe", "8.0", id="a100-not-a10"),
        pytest.param("NVIDIA A10", "8.6", id="a10"),
        pytest.param("NVIDIA A10G", "8.6", id="a10g"),
        pytest.param("NVIDIA H100 80GB HBM3", "9.0", id="h100"),
        pytest.param("NVIDIA H200", "9.0", id="h200"),
        pytest.param("NVIDIA L40S", "8.9", id="l40s-not-l4"),
        pytest.param("NVIDIA L4", "8.9", id="l4"),
        pytest.param("Tesla T4", "7.5", id="t4"),
        pytest.param("Tesla V100-SXM2-16GB", "7.0", id="v100"),
        pytest.param("NVIDIA GeForce RTX 4090", "0.0", id="unknown"),
    ],
)
def test_compute_capability_for_known_models(model: str, capability: str) -> None:
    assert compute_capability_for(model) == capability


def test_without_the_nvml_library_pynvml_is_not_imported_and_nvml_is_not_usable() -> None:
    """``load_pynvml`` looks for the library pynvml would load before importing pynvml
    (issue 43: a machine without NVIDIA's driver skips its import); NVML is then not usable,
    as pynvml's own ``nvmlInit`` would have said."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import hetflow.inventory.gpus.nvml as nvml\n"
        "nvml.NVML_LIBRARY = 'libhetflow-no-such-nvml.so.1'\n"
        "print(nvml.load_pynvml() is None, 'pynvml' in sys.modules, nvml.probe_nvml() is None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False", "True"]
