"""GPU interconnect topology: GpuLink and Node.link, and NVML's answers mapped through FakeNvml."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pynvml
import pytest

from hetflow.inventory import Cpu, Gpu, GpuLink, Node, profile_node
from hetflow.inventory.fakes.nvml import FakeNvml, FakeNvmlDevice
from hetflow.inventory.gpus.nvml import cpulist, probe_nvml, probe_nvml_topology, sysfs_pci_name

BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0"]
SWITCH = "00000000:C4:00.0"


def a_node(*links: GpuLink, gpus: int = 4) -> Node:
    cpu = Cpu(vendor="GenuineIntel", model="x", architecture="x86_64", microarchitecture="icelake", cores=8)
    made = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i}",
            model="NVIDIA A100-SXM4-40GB",
            memory_bytes=0,
            compute_capability="8.0",
            driver_version="550.54.15",
            device_path=f"/dev/nvidia{i}",
            minor=i,
        )
        for i in range(gpus)
    )
    return Node(name="n", cpu=cpu, memory_bytes=0, gpus=made, gpu_links=links)


# --- the models ---------------------------------------------------------------------


def test_node_link_reads_each_pair_both_ways() -> None:
    node = a_node(
        GpuLink(a=0, b=1, kind="NV", nvlinks=12),
        GpuLink(a=0, b=2, kind="PIX"),
        GpuLink(a=1, b=3, kind="SYS"),
    )

    assert node.link(0, 0) == "X"
    assert node.link(0, 1) == node.link(1, 0) == "NV12"
    assert node.link(2, 0) == "PIX"
    assert node.link(3, 1) == "SYS"
    assert node.link(2, 3) == ""  # not described: unknown


def test_node_nvlinked_only_for_nvlink_pairs() -> None:
    node = a_node(GpuLink(a=0, b=1, kind="NV", nvlinks=4), GpuLink(a=2, b=3, kind="PIX"))

    assert node.nvlinked(0, 1)
    assert node.nvlinked(1, 0)
    assert not node.nvlinked(2, 3)
    assert not node.nvlinked(0, 2)  # unknown is not NVLinked


@pytest.mark.parametrize(("a", "b"), [(1, 0), (2, 2)])
def test_gpu_link_wants_a_below_b(a: int, b: int) -> None:
    with pytest.raises(pydantic.ValidationError, match="a < b"):
        GpuLink(a=a, b=b, kind="SYS")


def test_gpu_link_refuses_unknown_kind() -> None:
    with pytest.raises(pydantic.ValidationError):
        GpuLink(a=0, b=1, kind="QPI")  # type: ignore[arg-type]


def test_node_with_links_round_trips_through_json() -> None:
    node = a_node(GpuLink(a=0, b=1, kind="NV", nvlinks=12), GpuLink(a=2, b=3, kind="NODE"))

    assert Node.model_validate_json(node.model_dump_json()) == node


# --- NVML ---------------------------------------------------------------------------


def device(i: int, **changes: object) -> FakeNvmlDevice:
    base = FakeNvmlDevice(uuid=f"GPU-{i}", minor=i, pci_bus_id=BUS[i])
    fields = {**base.__dict__, **changes}
    return FakeNvmlDevice(**fields)  # type: ignore[arg-type]


def probe(nvml: FakeNvml, pci_root: Path) -> tuple[list[Gpu], Node]:
    found = probe_nvml_topology(nvml, pci_root=pci_root)
    assert found is not None
    gpus, links = found
    return gpus, a_node(*links, gpus=len(gpus))


ANCESTOR_CASES = [
    pytest.param(pynvml.NVML_TOPOLOGY_INTERNAL, "PIX", id="internal"),
    pytest.param(pynvml.NVML_TOPOLOGY_SINGLE, "PIX", id="single"),
    pytest.param(pynvml.NVML_TOPOLOGY_MULTIPLE, "PXB", id="multiple"),
    pytest.param(pynvml.NVML_TOPOLOGY_HOSTBRIDGE, "PHB", id="hostbridge"),
    pytest.param(pynvml.NVML_TOPOLOGY_NODE, "NODE", id="node"),
    pytest.param(pynvml.NVML_TOPOLOGY_SYSTEM, "SYS", id="system"),
]


@pytest.mark.parametrize(("level", "kind"), ANCESTOR_CASES)
def test_common_ancestor_maps_to_topo_kind(tmp_path: Path, level: int, kind: str) -> None:
    nvml = FakeNvml(devices=[device(0), device(1)], ancestors={(0, 1): level})

    _, node = probe(nvml, tmp_path)

    assert node.link(0, 1) == kind
    assert not node.nvlinked(0, 1)


def test_nvlinks_are_counted_per_pair(tmp_path: Path) -> None:
    # GPU0-GPU1 by four links, GPU0-GPU2 by two (one more link down), GPU1-GPU2 none.
    devices = [
        device(0, nvlinks=(BUS[1], BUS[1], BUS[2], "", BUS[1], BUS[2], BUS[1])),
        device(1, nvlinks=(BUS[0], BUS[0], BUS[0], BUS[0])),
        device(2, nvlinks=(BUS[0], BUS[0])),
    ]
    nvml = FakeNvml(devices=devices, ancestors={(1, 2): pynvml.NVML_TOPOLOGY_SYSTEM})

    _, node = probe(nvml, tmp_path)

    assert node.gpu_links == (
        GpuLink(a=0, b=1, kind="NV", nvlinks=4),
        GpuLink(a=0, b=2, kind="NV", nvlinks=2),
        GpuLink(a=1, b=2, kind="SYS"),
    )


def test_nvlink_remote_bus_id_matches_in_any_spelling(tmp_path: Path) -> None:
    # Remote PCI info may come back in sysfs's short, lower-case form, and as bytes.
    devices = [device(0, nvlinks=("0000:0f:00.0",) * 3), device(1)]
    nvml = FakeNvml(devices=devices, as_bytes=True)

    gpus, node = probe(nvml, tmp_path)

    assert gpus[1].pci_bus_id == BUS[1]
    assert node.link(0, 1) == "NV3"


def test_gpus_on_nvswitches_are_all_nvlinked(tmp_path: Path) -> None:
    devices = [device(i, nvlinks=(SWITCH,) * 12) for i in range(3)] + [device(3, nvlinks=(SWITCH,) * 6)]
    nvml = FakeNvml(devices=devices, switches=frozenset({SWITCH}))

    _, node = probe(nvml, tmp_path)

    assert node.link(0, 2) == "NV12"
    assert node.link(1, 3) == "NV6"  # the fewer links of the two
    assert all(node.nvlinked(a, b) for a in range(4) for b in range(4) if a != b)


def test_nvlinks_to_the_cpu_are_not_gpu_links(tmp_path: Path) -> None:
    # POWER9: NVLinks to an IBM NPU (the CPU) join no two GPUs.
    npu = "00000000:FF:00.0"
    devices = [device(0, nvlinks=(npu, npu)), device(1, nvlinks=(npu, npu))]
    nvml = FakeNvml(devices=devices, ancestors={(0, 1): pynvml.NVML_TOPOLOGY_NODE})

    _, node = probe(nvml, tmp_path)

    assert node.link(0, 1) == "NODE"


def test_numa_node_and_cpu_affinity_from_nvml(tmp_path: Path) -> None:
    # CPUs 0-3 and 8 (NVML is asked for as many 64-bit words as this host needs).
    mask = (0b1_0000_1111,)
    nvml = FakeNvml(devices=[device(0, numa_node=1, cpu_affinity=mask)])

    gpus, _ = probe(nvml, tmp_path)

    assert (gpus[0].pci_bus_id, gpus[0].numa_node) == (BUS[0], 1)
    assert gpus[0].cpu_affinity == "0-3,8"


def write_sysfs(root: Path, name: str, numa: str, cpus: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "numa_node").write_text(numa + "\n")
    (root / name / "local_cpulist").write_text(cpus + "\n")


def test_numa_node_falls_back_to_sysfs_and_affinity_prefers_it(tmp_path: Path) -> None:
    write_sysfs(tmp_path, "0000:0f:00.0", "1", "16-31,48-63")
    nvml = FakeNvml(devices=[device(0), device(1, cpu_affinity=(0xFF,))])

    gpus, _ = probe(nvml, tmp_path)

    assert (gpus[1].numa_node, gpus[1].cpu_affinity) == (1, "16-31,48-63")
    assert (gpus[0].numa_node, gpus[0].cpu_affinity) == (None, "")  # nothing anywhere


def test_sysfs_numa_minus_one_is_unknown(tmp_path: Path) -> None:
    write_sysfs(tmp_path, "0000:07:00.0", "-1", "0-7")

    gpus, _ = probe(FakeNvml(devices=[device(0)]), tmp_path)

    assert gpus[0].numa_node is None
    assert gpus[0].cpu_affinity == "0-7"


def test_nvml_numa_minus_one_is_unknown(tmp_path: Path) -> None:
    gpus, _ = probe(FakeNvml(devices=[device(0, numa_node=-1)]), tmp_path)

    assert gpus[0].numa_node is None


class OldNvml(FakeNvml):
    """A pynvml from before nvmlDeviceGetNumaNodeId and the NVLink calls."""

    def __getattribute__(self, name: str) -> object:
        if name in {"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetNvLinkState"}:
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_missing_nvml_calls_leave_fields_unknown(tmp_path: Path) -> None:
    write_sysfs(tmp_path, "0000:07:00.0", "0", "0-7")
    nvml = OldNvml(devices=[device(0, nvlinks=(BUS[1],)), device(1)], ancestors={(0, 1): 40})

    gpus, node = probe(nvml, tmp_path)

    assert gpus[0].numa_node == 0  # from sysfs
    assert node.link(0, 1) == "NODE"  # no NVLink answer: the PCIe path


TOPOLOGY_CALLS = [
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetTopologyCommonAncestor",
]


@pytest.mark.parametrize("call", TOPOLOGY_CALLS)
@pytest.mark.parametrize("error", ["unsupported", "fail_on"])
def test_a_failing_topology_call_never_fails_discovery(tmp_path: Path, call: str, error: str) -> None:
    devices = [
        device(0, numa_node=0, cpu_affinity=(0xF,), nvlinks=(SWITCH, BUS[1])),
        device(1, numa_node=0, cpu_affinity=(0xF,), nvlinks=(SWITCH, BUS[0])),
        device(2, numa_node=1, cpu_affinity=(0xF0,)),
    ]
    failing: dict[str, object] = {"unsupported": frozenset({call})} if error == "unsupported" else {"fail_on": call}
    ancestors = {(0, 2): 10, (1, 2): 50}
    nvml = FakeNvml(devices=devices, switches=frozenset({SWITCH}), ancestors=ancestors, **failing)  # type: ignore[arg-type]

    found = probe_nvml(nvml, pci_root=tmp_path)

    assert found is not None and [g.uuid for g in found] == ["GPU-0", "GPU-1", "GPU-2"]
    assert call in nvml.calls
    assert nvml.calls[-1] == "nvmlShutdown"


def test_without_topology_answers_every_field_is_unknown(tmp_path: Path) -> None:
    nvml = FakeNvml(devices=[FakeNvmlDevice(), FakeNvmlDevice(minor=1)])

    gpus, node = probe(nvml, tmp_path)

    assert [(g.pci_bus_id, g.numa_node, g.cpu_affinity) for g in gpus] == [("", None, "")] * 2
    assert node.gpu_links == ()


# --- helpers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bus_id", "name"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000000:BD:00.0", "0000:bd:00.0"),
        ("00000001:0A:00.0", "0001:0a:00.0"),
        ("0000:4e:00.0", "0000:4e:00.0"),
    ],
)
def test_sysfs_pci_name(bus_id: str, name: str) -> None:
    assert sysfs_pci_name(bus_id) == name


@pytest.mark.parametrize(
    ("words", "text"),
    [
        ((0xFFFF, 0xFFFF), "0-15,64-79"),
        ((0b1011,), "0-1,3"),
        ((1 << 63, 1), "63-64"),
        ((0,), ""),
    ],
)
def test_cpulist_from_affinity_mask(words: tuple[int, ...], text: str) -> None:
    assert cpulist(words) == text


# --- named profiles -----------------------------------------------------------------


def test_multi_gpu_profiles_carry_links_and_numa() -> None:
    a100, v100 = profile_node("a100-node"), profile_node("v100-node")

    assert all(a100.link(a, b) == "NV12" for a in range(4) for b in range(4) if a != b)
    assert [v100.link(0, b) for b in range(4)] == ["X", "NV4", "SYS", "SYS"]
    assert [g.numa_node for g in v100.gpus] == [0, 0, 1, 1]
    assert [g.cpu_affinity for g in a100.gpus] == ["0-31", "0-31", "32-63", "32-63"]  # 64 cores


def test_single_gpu_profile_topology_stays_unknown() -> None:
    t4 = profile_node("t4-node")

    assert t4.gpu_links == ()
    assert (t4.gpus[0].pci_bus_id, t4.gpus[0].numa_node, t4.gpus[0].cpu_affinity) == ("", None, "")


@pytest.mark.parametrize(
    ("nodes", "cpus", "want"),
    [
        ({"node0": "0-15"}, "0-15", 0),  # the H100 under Firecracker: -1 everywhere, every CPU in node 0
        ({"node0": "0-7", "node1": "8-15"}, "8-11", 1),
        ({"node0": "0-7", "node1": "8-15"}, "0-15", None),  # spans two nodes: no one answer
        ({}, "0-15", None),  # no node list in sysfs
    ],
    ids=["vm-one-node", "second-node", "spans-nodes", "no-node-list"],
)
def test_numa_node_from_the_cpu_affinity_when_nvml_and_sysfs_say_minus_one(
    tmp_path: Path, nodes: dict[str, str], cpus: str, want: int | None
) -> None:
    # as nvidia-smi topo -m derives its NUMA Affinity column (docs/gpu-runs/2026-11-27-h100)
    pci = tmp_path / "sys" / "bus" / "pci" / "devices"
    write_sysfs(pci, "0000:07:00.0", "-1", cpus)
    for name, cpus_there in nodes.items():
        (tmp_path / "sys" / "devices" / "system" / "node" / name).mkdir(parents=True)
        (tmp_path / "sys" / "devices" / "system" / "node" / name / "cpulist").write_text(cpus_there + "\n")

    gpus, _ = probe(FakeNvml(devices=[device(0, numa_node=-1)]), pci)

    assert gpus[0].numa_node == want
