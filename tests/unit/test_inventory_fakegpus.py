"""Fake GPUs from HETFLOW_FAKE_GPUS: spec parsing, and real 195:N device nodes."""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import pytest

from hetflow.errors import InventoryError
from hetflow.inventory import KNOWN_MODELS, make_fake_gpus, parse_fake_spec
from hetflow.inventory.fakes.gpus import (
    MAX_FAKE_GPUS,
    FakeEntry,
    ensure_device_node,
    fake_bus_id,
    fake_links,
    fake_uuid,
    half_cpulist,
    parse_fake_entries,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of device nodes needs root")

GOOD_SPECS = [
    pytest.param("a100:2,t4:1", [("a100", 2), ("t4", 1)], id="two-models"),
    pytest.param(" A100 : 2 , T4 ", [("a100", 2), ("t4", 1)], id="spaces-and-case"),
    pytest.param("h200", [("h200", 1)], id="bare-model-is-one"),
    pytest.param("a100-80g:3,", [("a100-80g", 3)], id="trailing-comma"),
    pytest.param("l4:1,l4:1", [("l4", 1), ("l4", 1)], id="repeated-model"),
    pytest.param("", [], id="empty"),
]


@pytest.mark.parametrize(("text", "expected"), GOOD_SPECS)
def test_parse_fake_spec_accepts(text: str, expected: list[tuple[str, int]]) -> None:
    assert parse_fake_spec(text) == expected


KNOWN_LIST = "a10, a100, a100-80g, flex170, h100, h200, l4, max1100, max1550, mi210, mi250x, mi300x, t4, v100"

BAD_SPECS = [
    pytest.param(
        "x100:2",
        f"HETFLOW_FAKE_GPUS: 'x100:2' names no known model; use one of {KNOWN_LIST}",
        id="unknown-model",
    ),
    pytest.param(
        "a100:1,:2",
        f"HETFLOW_FAKE_GPUS: ':2' names no known model; use one of {KNOWN_LIST}",
        id="missing-model",
    ),
    pytest.param(
        "a100:0",
        "HETFLOW_FAKE_GPUS: 'a100:0' has a bad count '0'; write a whole number of at least 1, e.g. 'a100:2'",
        id="zero-count",
    ),
    pytest.param(
        "t4:two",
        "HETFLOW_FAKE_GPUS: 't4:two' has a bad count 'two'; write a whole number of at least 1, e.g. 't4:2'",
        id="word-count",
    ),
    pytest.param(
        "t4:-1",
        "HETFLOW_FAKE_GPUS: 't4:-1' has a bad count '-1'; write a whole number of at least 1, e.g. 't4:2'",
        id="negative-count",
    ),
    pytest.param(
        "t4:200,l4:56",
        "HETFLOW_FAKE_GPUS: 't4:200,l4:56' asks for 256 GPUs; at most 255 fit in device minors 0-254",
        id="too-many",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_SPECS)
def test_parse_fake_spec_rejects_with_readable_message(text: str, message: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_fake_spec(text)

    assert str(caught.value) == message


def test_known_models_table_matches_the_documented_list() -> None:
    assert ", ".join(sorted(KNOWN_MODELS)) == KNOWN_LIST


def test_fake_uuid_is_stable_and_uuid_shaped() -> None:
    uuid = fake_uuid("a100", 0)

    assert uuid == fake_uuid("a100", 0)
    assert uuid != fake_uuid("a100", 1)
    assert uuid != fake_uuid("t4", 0)
    assert re.fullmatch(r"GPU-fake-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", uuid)


def device_numbers(path: Path) -> tuple[int, int]:
    st = path.lstat()
    assert stat.S_ISCHR(st.st_mode), f"{path} is not a character device"
    return os.major(st.st_rdev), os.minor(st.st_rdev)


@needs_root
def test_make_fake_gpus_creates_character_devices(tmp_path: Path) -> None:
    dev = tmp_path / "dev"

    gpus, control = make_fake_gpus("a100:2,t4:1", dev)

    assert [(g.index, g.minor, g.model) for g in gpus] == [
        (0, 0, "NVIDIA A100-SXM4-40GB"),
        (1, 1, "NVIDIA A100-SXM4-40GB"),
        (2, 2, "Tesla T4"),
    ]
    assert [g.device_path for g in gpus] == [str(dev / f"nvidia{i}") for i in range(3)]
    assert [device_numbers(dev / f"nvidia{i}") for i in range(3)] == [(195, 0), (195, 1), (195, 2)]
    assert control == [str(dev / "nvidiactl")]
    assert device_numbers(dev / "nvidiactl") == (195, 255)
    assert stat.S_IMODE((dev / "nvidia0").stat().st_mode) == 0o666
    assert all(g.fake and g.driver_version == "fake" for g in gpus)
    assert [g.compute_capability for g in gpus] == ["8.0", "8.0", "7.5"]
    assert gpus[2].memory_bytes == 15360 * 1024**2
    assert gpus[0].uuid == fake_uuid("a100", 0)


@needs_root
def test_make_fake_gpus_is_idempotent(tmp_path: Path) -> None:
    first, _ = make_fake_gpus("l4:2", tmp_path)
    inodes = [(tmp_path / f"nvidia{i}").lstat().st_ino for i in range(2)]

    second, _ = make_fake_gpus("l4:2", tmp_path)

    assert second == first
    assert [(tmp_path / f"nvidia{i}").lstat().st_ino for i in range(2)] == inodes


@needs_root
@pytest.mark.parametrize("wrong", ["plain-file", "wrong-minor", "dangling-link"])
def test_make_fake_gpus_replaces_wrong_nodes(tmp_path: Path, wrong: str) -> None:
    node = tmp_path / "nvidia0"
    if wrong == "plain-file":
        node.write_text("not a device")
    elif wrong == "wrong-minor":
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(195, 7))
    else:
        node.symlink_to(tmp_path / "nowhere")

    make_fake_gpus("t4:1", tmp_path)

    assert device_numbers(node) == (195, 0)


def test_make_fake_gpus_with_bad_spec_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="x100"):
        make_fake_gpus("x100:1", tmp_path / "dev")

    assert not (tmp_path / "dev").exists()


def refuse_mknod(path: Path, mode: int, device: int) -> None:
    raise PermissionError(errno.EPERM, "Operation not permitted", str(path))


def test_device_node_without_permission_says_root_is_needed(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as caught:
        ensure_device_node(tmp_path / "nvidia0", 0, mknod=refuse_mknod)

    message = str(caught.value)
    assert "fake GPUs need root (CAP_MKNOD)" in message
    assert str(tmp_path / "nvidia0") in message
    assert "unset HETFLOW_FAKE_GPUS" in message


# --- topology suffixes ------------------------------------------------------------------

ENTRY_CASES = [
    pytest.param("a100:4:nvlink", [FakeEntry("a100", 4, "nvlink")], id="nvlink"),
    pytest.param("a100:4:nvlink-pairs", [FakeEntry("a100", 4, "nvlink-pairs")], id="nvlink-pairs"),
    pytest.param("t4:4:pcie", [FakeEntry("t4", 4, "pcie")], id="pcie"),
    pytest.param(" H100 : 8 : NVLink ", [FakeEntry("h100", 8, "nvlink")], id="spaces-and-case"),
    pytest.param("t4:pcie", [FakeEntry("t4", 1, "pcie")], id="topology-without-count-is-one"),
    pytest.param("a100:2,t4", [FakeEntry("a100", 2), FakeEntry("t4", 1)], id="no-suffix-is-unknown"),
    pytest.param(
        "a100:4:nvlink,t4:2:pcie",
        [FakeEntry("a100", 4, "nvlink"), FakeEntry("t4", 2, "pcie")],
        id="two-topologies",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ENTRY_CASES)
def test_parse_fake_entries_reads_topology(text: str, expected: list[FakeEntry]) -> None:
    assert parse_fake_entries(text) == expected


def test_parse_fake_spec_keeps_its_pairs_with_a_suffix() -> None:
    assert parse_fake_spec("a100:4:nvlink,t4:2") == [("a100", 4), ("t4", 2)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "a100:4:nvswitch",
            "HETFLOW_FAKE_GPUS: 'a100:4:nvswitch' has an unknown topology 'nvswitch'; "
            "use one of nvlink, nvlink-pairs, pcie, e.g. 'a100:4:nvlink'",
            id="unknown-word",
        ),
        pytest.param(
            "t4:2,t4:2:pcie:x",
            "HETFLOW_FAKE_GPUS: 't4:2:pcie:x' has too many words; write MODEL[:COUNT[:TOPOLOGY]][:mig=LAYOUT], "
            "e.g. 'h100:1:mig=3g.40gb+4g.40gb'",
            id="extra-field",
        ),
        pytest.param(
            "t4:nvlinks",
            "HETFLOW_FAKE_GPUS: 't4:nvlinks' has a bad count 'nvlinks'; "
            "write a whole number of at least 1, e.g. 't4:2'",
            id="misspelt-word-in-count-place",
        ),
    ],
)
def test_parse_fake_entries_rejects_bad_topology(text: str, message: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_fake_entries(text)

    assert str(caught.value) == message


def matrix(spec: str) -> list[str]:
    """The links of ``spec`` as rows of ``nvidia-smi topo -m`` cells ("." unknown)."""
    count = sum(e.count for e in parse_fake_entries(spec))
    cells = {(x.a, x.b): x.label for x in fake_links(spec)}
    cells |= {(b, a): label for (a, b), label in cells.items()}
    return [" ".join("X" if a == b else cells.get((a, b), ".") for b in range(count)) for a in range(count)]


LINK_CASES = [
    pytest.param(
        "a100:4:nvlink",
        ["X NV12 NV12 NV12", "NV12 X NV12 NV12", "NV12 NV12 X NV12", "NV12 NV12 NV12 X"],
        id="nvlink-every-pair",
    ),
    pytest.param(
        "a100:4:nvlink-pairs",
        ["X NV4 SYS SYS", "NV4 X SYS SYS", "SYS SYS X NV4", "SYS SYS NV4 X"],
        id="nvlink-pairs",
    ),
    pytest.param(
        "a100:8:nvlink-pairs",
        [
            "X NV4 NODE NODE SYS SYS SYS SYS",
            "NV4 X NODE NODE SYS SYS SYS SYS",
            "NODE NODE X NV4 SYS SYS SYS SYS",
            "NODE NODE NV4 X SYS SYS SYS SYS",
            "SYS SYS SYS SYS X NV4 NODE NODE",
            "SYS SYS SYS SYS NV4 X NODE NODE",
            "SYS SYS SYS SYS NODE NODE X NV4",
            "SYS SYS SYS SYS NODE NODE NV4 X",
        ],
        id="nvlink-pairs-eight",
    ),
    pytest.param(
        "t4:4:pcie",
        ["X PIX SYS SYS", "PIX X SYS SYS", "SYS SYS X PIX", "SYS SYS PIX X"],
        id="pcie",
    ),
    pytest.param(
        "t4:3:pcie",
        ["X PIX SYS", "PIX X SYS", "SYS SYS X"],
        id="odd-count-first-half-larger",
    ),
    pytest.param(
        "a100:2:nvlink,t4:2:pcie",
        ["X NV12 NODE SYS", "NV12 X SYS NODE", "NODE SYS X SYS", "SYS NODE SYS X"],
        id="across-entries-by-numa",
    ),
    pytest.param(
        "a100:2:nvlink,t4:1",
        ["X NV12 .", "NV12 X .", ". . X"],
        id="entry-without-suffix-unknown",
    ),
    pytest.param("a100:3", ["X . .", ". X .", ". . X"], id="no-suffix-no-links"),
]


@pytest.mark.parametrize(("spec", "rows"), LINK_CASES)
def test_fake_links_per_topology(spec: str, rows: list[str]) -> None:
    assert matrix(spec) == rows


@pytest.mark.parametrize(
    ("cpus", "halves"),
    [(16, ("0-7", "8-15")), (2, ("0", "1")), (3, ("0", "1-2")), (1, ("0", "0"))],
)
def test_half_cpulist(cpus: int, halves: tuple[str, str]) -> None:
    assert (half_cpulist(cpus, 0), half_cpulist(cpus, 1)) == halves


def test_fake_bus_ids_are_nvml_shaped_and_distinct() -> None:
    ids = [fake_bus_id(i) for i in range(MAX_FAKE_GPUS)]

    assert ids[0] == "00000000:10:00.0"
    assert ids[0xF0] == "00000001:00:00.0"
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:00\.0", x) for x in ids)


@needs_root
def test_make_fake_gpus_places_topology_gpus_on_numa_halves(tmp_path: Path) -> None:
    gpus, _ = make_fake_gpus("a100:4:nvlink,t4:2", tmp_path, cpus=32)

    assert [g.numa_node for g in gpus] == [0, 0, 1, 1, None, None]
    assert [g.cpu_affinity for g in gpus] == ["0-15", "0-15", "16-31", "16-31", "", ""]
    assert [g.pci_bus_id for g in gpus] == [fake_bus_id(i) for i in range(6)]
    assert all(g.fake for g in gpus)
