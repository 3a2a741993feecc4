"""Real discovery code over FAKE device trees: AMD through a fake KFD topology in sysfs,
Intel through fake DRM sysfs, NVIDIA MIG through FakeNvml; and ``discover`` putting them
together.  Every tree is written into a tmp dir: no GPU, driver or /sys is read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from hetflow.inventory import discover
from hetflow.inventory.fakes.nvml import FakeMigDevice, FakeNvml, FakeNvmlDevice, MissingNvml
from hetflow.inventory.gpus.amd import amdsmi_names, gfx_target, probe_amd, rocm_version
from hetflow.inventory.gpus.intel import intel_family, probe_intel
from hetflow.inventory.gpus.nvml import probe_nvml

GIB = 1024**3


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def kfd_node(root: Path, n: int, **props: int) -> Path:
    """Node ``n`` of a fake KFD topology with ``props`` (a CPU agent when simd_count is 0)."""
    node = root / "sys/class/kfd/kfd/topology/nodes" / str(n)
    write(node / "properties", "".join(f"{k} {v}\n" for k, v in props.items()))
    return node


def mem_bank(node: Path, bank: int, size: int, heap_type: int = 1) -> None:
    write(node / "mem_banks" / str(bank) / "properties", f"heap_type {heap_type}\nsize_in_bytes {size}\nwidth 4096\n")


def amd_tree(root: Path) -> None:
    """A CPU agent and two MI250X GCDs (gfx90a: 90010) and an MI300X (gfx942: 90402)."""
    kfd_node(root, 0, cpu_cores_count=64, simd_count=0, gfx_target_version=0, drm_render_minor=0)
    for n, (minor, target, device, loc) in enumerate(
        [(128, 90010, 0x740C, 0x1100), (129, 90010, 0x740C, 0x1200), (130, 90402, 0x74A1, 0x3A00)], start=1
    ):
        node = kfd_node(
            root,
            n,
            simd_count=440,
            gfx_target_version=target,
            drm_render_minor=minor,
            vendor_id=4098,
            device_id=device,
            unique_id=0x1234ABCD00 + n,
            location_id=loc,
            domain=0,
        )
        mem_bank(node, 0, 64 * GIB)
        mem_bank(node, 1, 512 * GIB, heap_type=0)  # system memory: not the GPU's
    write(root / "opt/rocm/.info/version", "6.2.0-66\n")
    write(root / "sys/module/amdgpu/version", "6.8.5\n")
    write(root / "sys/class/drm/renderD128/device/drm/card0/dev", "226:0\n")


def intel_render(root: Path, minor: int, vendor: str, device: str, *, lmem: int = 0, tile_vram: int = 0) -> None:
    dev = root / "sys/class/drm" / f"renderD{minor}" / "device"
    write(dev / "vendor", f"{vendor}\n")
    write(dev / "device", f"{device}\n")
    card = f"card{minor - 128}"
    write(dev / "drm" / card / "dev", f"226:{minor - 128}\n")
    if lmem:
        write(root / "sys/class/drm" / card / "lmem_total_bytes", f"{lmem}\n")
    if tile_vram:
        for tile in (0, 1):
            write(dev / f"tile{tile}" / "physical_vram_size_bytes", f"{tile_vram}\n")


@pytest.mark.parametrize(
    ("version", "name"), [(90010, "gfx90a"), (90402, "gfx942"), (90400, "gfx942"), (110000, "gfx1100"), (0, "")]
)
def test_gfx_target_from_kfd_version(version: int, name: str) -> None:
    assert gfx_target(version) == name


def test_probe_amd_reads_gpu_agents_only(tmp_path: Path) -> None:
    amd_tree(tmp_path)
    gpus, notes = probe_amd(tmp_path)
    assert notes == []
    assert [(g.model, g.architecture, g.device_id) for g in gpus] == [
        ("AMD Instinct MI250X", "gfx90a", "0x740c"),
        ("AMD Instinct MI250X", "gfx90a", "0x740c"),
        ("AMD Instinct MI300X", "gfx942", "0x74a1"),
    ]
    assert [g.render_path for g in gpus] == ["/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD130"]
    assert gpus[0].card_path == "/dev/dri/card0" and gpus[1].card_path == ""
    assert {g.memory_bytes for g in gpus} == {64 * GIB}  # local heap only
    assert {g.rocm_version for g in gpus} == {"6.2.0"}
    assert {g.driver_version for g in gpus} == {"6.8.5"}
    assert gpus[0].pci_bus_id == "0000:11:00.0" and gpus[2].pci_bus_id == "0000:3a:00.0"
    assert gpus[0].uuid == "GPU-0000001234abcd01"


def test_probe_amd_without_kfd_finds_nothing_and_notes_a_missing_rocm(tmp_path: Path) -> None:
    assert probe_amd(tmp_path) == ([], [])
    amd_tree(tmp_path)
    (tmp_path / "opt/rocm/.info/version").unlink()
    gpus, notes = probe_amd(tmp_path)
    assert gpus and all(g.rocm_version is None for g in gpus)
    assert notes == ["AMD: ROCm version unknown (no /opt/rocm/.info/version)"]
    assert rocm_version(tmp_path) is None


def test_probe_amd_unreadable_node_is_a_note(tmp_path: Path) -> None:
    amd_tree(tmp_path)
    bad = tmp_path / "sys/class/kfd/kfd/topology/nodes/9"
    (bad / "properties").mkdir(parents=True)  # reading a directory fails
    gpus, notes = probe_amd(tmp_path)
    assert len(gpus) == 3
    assert len(notes) == 1 and notes[0].startswith(f"AMD: cannot read {bad / 'properties'}")


def test_probe_intel_keeps_known_families_and_reads_memory(tmp_path: Path) -> None:
    intel_render(tmp_path, 128, "0x8086", "0x0bd5", lmem=128 * GIB)  # Max 1550, i915
    intel_render(tmp_path, 129, "0x8086", "0x56c0", tile_vram=8 * GIB)  # Flex 170, xe (two tiles)
    intel_render(tmp_path, 130, "0x8086", "0x9a49")  # integrated Xe (Tiger Lake): skipped
    intel_render(tmp_path, 131, "0x1002", "0x740c")  # an AMD render node: not Intel's
    gpus, notes = probe_intel(tmp_path)
    assert [(g.model, g.architecture, g.memory_bytes) for g in gpus] == [
        ("Intel Data Center GPU Max 1550", "pvc", 128 * GIB),
        ("Intel Data Center GPU Flex 170", "dg2", 16 * GIB),
    ]
    assert [(g.render_path, g.card_path) for g in gpus] == [
        ("/dev/dri/renderD128", "/dev/dri/card0"),
        ("/dev/dri/renderD129", "/dev/dri/card1"),
    ]
    assert notes == ["Intel: renderD130 (device 0x9a49) is in no known GPU family; skipped"]
    assert intel_family("0x0bda") == "pvc" and intel_family("0xe20b") == "bmg" and intel_family("zz") == ""


# --- NVIDIA MIG through FakeNvml ---------------------------------------------------------


def mig_gpu() -> FakeNvmlDevice:
    return FakeNvmlDevice(
        name="NVIDIA H100 80GB HBM3",
        compute_capability=(9, 0),
        minor=1,
        mig_mode=1,
        mig=(
            FakeMigDevice(slot=0, uuid="MIG-aaaa", name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", gpu_instance=2),
            # slot 1 empty: NVML answers NotFound and probing goes on
            FakeMigDevice(slot=2, uuid="MIG-bbbb", name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", gpu_instance=9),
            # a name without the profile: read from nvmlDeviceGetAttributes
            FakeMigDevice(slot=3, uuid="MIG-cccc", name="MIG device", memory_bytes=20 * GIB, slice_count=2),
        ),
    )


def test_nvml_reads_mig_instances() -> None:
    (gpu,) = probe_nvml(FakeNvml(devices=[mig_gpu()])) or []
    assert gpu.mig_enabled
    assert [(m.index, m.uuid, m.profile, m.slices, m.gpu_instance) for m in gpu.mig] == [
        (0, "MIG-aaaa", "3g.40gb", 3, 2),
        (1, "MIG-bbbb", "1g.10gb", 1, 9),
        (2, "MIG-cccc", "2g.20gb", 2, 7),
    ]
    # minor 1: gpu1/gi2/access = 3 + 135 + 18 = 156, its ci0 157
    assert gpu.mig[0].cap_paths == ("/dev/nvidia-caps/nvidia-cap156", "/dev/nvidia-caps/nvidia-cap157")


@pytest.mark.parametrize(
    ("device", "unsupported"),
    [
        (FakeNvmlDevice(mig_mode=0), frozenset()),
        (FakeNvmlDevice(), frozenset()),  # NotSupported: a board without MIG
        (FakeNvmlDevice(mig_mode=1), frozenset({"nvmlDeviceGetMaxMigDeviceCount"})),
    ],
)
def test_nvml_without_mig_leaves_the_gpu_whole(device: FakeNvmlDevice, unsupported: frozenset[str]) -> None:
    (gpu,) = probe_nvml(FakeNvml(devices=[device], unsupported=unsupported)) or []
    assert gpu.mig == ()
    assert gpu.mig_enabled is (device.mig_mode == 1)


# --- discover ----------------------------------------------------------------------------


def test_discover_lists_every_vendor_in_order(tmp_path: Path) -> None:
    root, dev = tmp_path / "root", tmp_path / "dev"
    amd_tree(root)
    intel_render(root, 140, "0x8086", "0x0bd5", lmem=128 * GIB)
    (dev / "kfd").parent.mkdir(parents=True)
    (dev / "kfd").touch()
    (dev / "nvidiactl").touch()
    node = discover(tmp_path, {}, nvml=FakeNvml(devices=[mig_gpu()]), dev_root=dev, sys_root=root)
    assert [(g.index, g.vendor) for g in node.gpus] == [(0, "nvidia"), (1, "amd"), (2, "amd"), (3, "amd"), (4, "intel")]
    assert node.gpu_source == "nvml,kfd,drm"
    assert node.control_devices == (str(dev / "nvidiactl"), str(dev / "kfd"))
    assert node.gpus[0].mig_enabled and len(node.gpus[0].mig) == 3
    assert node.probe_notes == ()


def test_discover_amd_only_machine(tmp_path: Path) -> None:
    amd_tree(tmp_path / "root")
    node = discover(tmp_path, {}, nvml=MissingNvml(), procfs_root=tmp_path / "none", sys_root=tmp_path / "root")
    assert node.gpu_source == "kfd" and len(node.gpus) == 3
    assert [g.index for g in node.gpus] == [0, 1, 2]
    assert node.control_devices == ()  # no kfd node under /dev here


@dataclass
class FakeAmdSmi:
    """The few amdsmi functions ``amdsmi_names`` calls (a fake: amdsmi is not installed)."""

    fail_init: bool = False

    def amdsmi_init(self) -> None:
        if self.fail_init:
            raise RuntimeError("driver not loaded")

    def amdsmi_get_processor_handles(self) -> list[str]:
        return ["h0"]

    def amdsmi_get_gpu_device_bdf(self, handle: str) -> str:
        return "0000:11:00.0"

    def amdsmi_get_gpu_asic_info(self, handle: str) -> dict[str, str]:
        return {"market_name": "AMD Instinct MI250X/MI250"}

    def amdsmi_shut_down(self) -> None:
        pass


def test_amdsmi_names_by_bus_id_and_nothing_when_it_fails() -> None:
    assert amdsmi_names(FakeAmdSmi()) == {"0000:11:00.0": "AMD Instinct MI250X/MI250"}
    assert amdsmi_names(FakeAmdSmi(fail_init=True)) == {}
