"""Cluster and catalog files: good files become machine classes; bad ones name line and fix."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from hetflow.errors import SpecError
from hetflow.plan.instance import MachineClass
from hetflow.plan.sizing.cluster import (
    default_gpu_speed,
    load_catalog,
    load_cluster,
    node_class,
    parse_bandwidth,
    parse_catalog,
    parse_cluster,
)
from hetflow.report.nodes import node_to_json
from tests.unit.builders import GIB, gpu, node

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HEAD = "apiVersion: hetflow/v1\nkind: Cluster\nname: c\n"  # three lines; the body starts on line 4


def cluster_text(body: str) -> str:
    return HEAD + textwrap.dedent(body).lstrip("\n")


def problems(text: str, parse: Callable[[str, str], object] = parse_cluster) -> list[str]:
    with pytest.raises(SpecError) as exc:
        parse(text, "c.yaml")
    return [str(p) for p in exc.value.problems]


# --- the example files ------------------------------------------------------------------


def test_hetero16_example_is_the_bench_cluster() -> None:
    c = load_cluster(EXAMPLES / "hetero-16.yaml")

    assert c.name == "hetero-16"
    assert c.bandwidth_bytes == 1.25e9
    assert c.classes() == (
        MachineClass("cpu.std", 8, 16, 64 * GIB, speed=1.0, price_per_hour=0.68),
        MachineClass("cpu.fast", 4, 16, 64 * GIB, speed=1.4, price_per_hour=0.95),
        MachineClass(
            "gpu.t4",
            3,
            8,
            32 * GIB,
            gpus=1,
            gpu_model="Tesla T4",
            gpu_memory=16 * GIB,
            gpu_cc=(7, 5),
            gpu_speed=3.0 / 8.5,
            price_per_hour=0.75,
        ),
        MachineClass(
            "gpu.a100",
            1,
            48,
            384 * GIB,
            speed=1.2,
            gpus=4,
            gpu_model="NVIDIA A100-SXM4-40GB",
            gpu_memory=40 * GIB,
            gpu_cc=(8, 0),
            gpu_speed=1.0,
            price_per_hour=16.39,
        ),
    )
    assert sum(k.count for k in c.classes()) == 16


def test_catalog_example_rents_up_to_its_counts() -> None:
    cat = load_catalog(EXAMPLES / "catalog.yaml")

    maxima = {k.name: k.count for k in cat.classes()}
    assert maxima["cpu.std"] == 64 and maxima["gpu.a100"] == 4
    virtual = cat.cluster({"cpu.std": 3, "gpu.t4": 2})
    assert [(k.name, k.count) for k in virtual.classes()] == [("cpu.std", 3), ("gpu.t4", 2)]
    assert virtual.bandwidth_bytes == cat.bandwidth_bytes
    with pytest.raises(ValueError, match=r"node type 'gpu\.t4': 99 asked, the catalog rents 0 to 16"):
        cat.cluster({"gpu.t4": 99})
    with pytest.raises(ValueError, match=r"no node type 'gpu\.t5'.*did you mean 'gpu\.t4'"):
        cat.cluster({"gpu.t5": 1})


# --- a good file, field by field --------------------------------------------------------


def test_optional_fields_reach_the_class() -> None:
    c = parse_cluster(
        cluster_text(
            """
            bandwidth: 100Mbps
            nodeTypes:
              - name: arm
                count: 2
                cores: 64
                memory: 256Gi
                microarchitecture: neoverse_n1
                labels: {zone: b, arch: arm64}
              - name: h100
                count: 1
                cores: 96
                memory: 1Ti
                gpus: {model: NVIDIA H100 80GB HBM3, count: 8, memory: 80Gi, computeCapability: 9, speed: 2.1}
            """
        )
    )

    arm, h100 = c.classes()
    assert c.bandwidth_bytes == 12.5e6
    assert (arm.microarchitecture, arm.labels, arm.speed, arm.price_per_hour) == (
        "neoverse_n1",
        (("arch", "arm64"), ("zone", "b")),
        1.0,
        0.0,
    )
    assert (h100.gpus, h100.gpu_cc, h100.gpu_speed, h100.gpu_memory) == (8, (9, 0), 2.1, 80 * GIB)


def test_a_type_with_count_zero_is_listed_but_has_no_class() -> None:
    c = parse_cluster(
        cluster_text(
            """
            nodeTypes:
              - {name: a, count: 0, cores: 4, memory: 8Gi}
              - {name: b, count: 1, cores: 4, memory: 8Gi}
            """
        )
    )
    assert [k.name for k in c.classes()] == ["b"]
    assert c.bandwidth_bytes == 1.25e9  # the default: 10 Gbit/s


BANDWIDTHS = [
    pytest.param("10Gbit/s", 1.25e9, id="gbit"),
    pytest.param("10Gbps", 1.25e9, id="gbps"),
    pytest.param("1.25GB/s", 1.25e9, id="gigabytes"),
    pytest.param("1.25 GB/s", 1.25e9, id="space"),
    pytest.param("100Mbit/s", 12.5e6, id="mbit"),
    pytest.param("800MiB/s", 800 * 1024**2, id="binary"),
    pytest.param(1e9, 1e9, id="number"),
    pytest.param("5e8", 5e8, id="number-text"),
]


@pytest.mark.parametrize(("text", "rate"), BANDWIDTHS)
def test_bandwidth_units(text: object, rate: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(rate)


BAD_BANDWIDTHS = [
    pytest.param("10G", "a bandwidth is per second", id="no-per-second"),
    pytest.param("10Gibit/s", "unknown unit 'Gibit/s'", id="binary-bits"),
    pytest.param("10 furlongs/s", "unknown unit", id="unit"),
    pytest.param("fast", "not a bandwidth", id="word"),
    pytest.param(0, "must be positive", id="zero"),
    pytest.param(-5, "must be positive", id="negative"),
    pytest.param(True, "not a bandwidth", id="bool"),
]


@pytest.mark.parametrize(("text", "message"), BAD_BANDWIDTHS)
def test_bad_bandwidth(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_bandwidth(text)


# --- GPU speeds -------------------------------------------------------------------------

GPU_MODELS = [
    pytest.param("NVIDIA A100-SXM4-40GB", 1.0, id="a100"),
    pytest.param("NVIDIA A100 80GB PCIe", 1.0, id="a100-pcie"),
    pytest.param("Tesla T4", 3.0 / 8.5, id="t4"),
    pytest.param("NVIDIA H100 80GB HBM3", 1.8, id="h100"),
    pytest.param("Tesla V100-SXM2-16GB", 0.55, id="v100"),
    pytest.param("NVIDIA L4", 0.5, id="l4"),
    pytest.param("NVIDIA RTX A1000", None, id="a1000-is-not-a100"),
    pytest.param("NVIDIA GeForce RTX 4090", None, id="unknown"),
]


@pytest.mark.parametrize(("model", "speed"), GPU_MODELS)
def test_gpu_speed_defaults(model: str, speed: float | None) -> None:
    assert default_gpu_speed(model) == (None if speed is None else pytest.approx(speed))


def test_unknown_gpu_model_needs_a_speed() -> None:
    text = cluster_text(
        """
        nodeTypes:
          - name: rtx
            count: 1
            cores: 16
            memory: 64Gi
            gpus: {model: NVIDIA GeForce RTX 4090, count: 1, memory: 24Gi, computeCapability: "8.9"}
        """
    )
    (message,) = problems(text)
    assert message.startswith("c.yaml:9: error: nodeTypes.0.gpus: GPU model 'NVIDIA GeForce RTX 4090' has no default")
    assert "set 'speed'" in message

    fixed = parse_cluster(text.replace('"8.9"}', '"8.9", speed: 0.9}'))
    assert fixed.classes()[0].gpu_speed == 0.9


# --- bad files: every problem with its line ---------------------------------------------

BAD = [
    pytest.param(
        """
        nodeTypes:
          - {name: a, count: 1, cores: 4, memory: 8Gx}
        """,
        "c.yaml:5: error: nodeTypes.0.memory: '8Gx' is not a memory size; write e.g. 512Mi, 2Gi or 4096 (bytes)",
        id="bad-memory-unit",
    ),
    pytest.param(
        """
        bandwidth: 10 gigs
        nodeTypes:
          - {name: a, count: 1, cores: 4, memory: 8Gi}
        """,
        "c.yaml:4: error: bandwidth: '10 gigs': a bandwidth is per second; write e.g. 10Gbit/s, 1.25GB/s, "
        "100Mbps or a number of bytes per second",
        id="bad-bandwidth-unit",
    ),
    pytest.param(
        """
        nodeTypes:
          - name: a
            count: 1
            cors: 4
            memory: 8Gi
        """,
        "c.yaml:5: error: nodeTypes.0: required key 'cores' is missing\n"
        "c.yaml:7: error: unknown key 'cors' in nodeTypes.0 (did you mean 'cores'?); allowed keys: name, count, "
        "cores, speed, memory, gpus, price, microarchitecture, labels, rdma, spot",
        id="unknown-key",
    ),
    pytest.param(
        """
        nodeTypes:
          - name: g
            count: 1
            cores: 4
            memory: 8Gi
            gpus:
              model: Tesla T4
              count: 1
              memory: 16Gi
              computeCapabilty: "7.5"
        """,
        "c.yaml:13: error: unknown key 'computeCapabilty' in nodeTypes.0.gpus (did you mean "
        "'computeCapability'?); allowed keys: model, count, memory, vendor, computeCapability, architecture, "
        "rocm, driver, cuda, speed, link, nvlink_gpus, sharing, mig",
        id="unknown-gpu-key",
    ),
    pytest.param(
        """
        nodeTypes:
          - {name: a, count: 1, cores: 4, memory: 8Gi}
        nodez: []
        """,
        "c.yaml:6: error: unknown key 'nodez' in the top level (did you mean 'nodes'?); allowed keys: apiVersion, "
        "name, bandwidth, nodeTypes, kind, nodes",
        id="unknown-top-key",
    ),
    pytest.param(
        """
        nodeTypes:
          - {name: a, count: -1, cores: 4, memory: 8Gi}
        """,
        "c.yaml:5: error: nodeTypes.0.count: Input should be greater than or equal to 0 (got -1)",
        id="negative-count",
    ),
    pytest.param(
        """
        nodeTypes:
          - {name: a, count: 1, memory: 8Gi}
        """,
        "c.yaml:5: error: nodeTypes.0: required key 'cores' is missing",
        id="missing-cores",
    ),
    pytest.param(
        """
        nodeTypes:
          - {name: a b, count: 1, cores: 4, memory: 8Gi}
        """,
        "c.yaml:5: error: nodeTypes.0.name: node type name 'a b' is not valid: use 1-63 letters, digits, '.', "
        "'-' or '_', starting and ending alphanumeric",
        id="bad-name",
    ),
    pytest.param(
        """
        nodeTypes:
          - {name: a, count: 1, cores: 4, memory: 8Gi}
          - {name: a, count: 2, cores: 8, memory: 8Gi}
        """,
        "c.yaml:4: error: nodeTypes: node type name(s) 'a' used twice; names must be unique",
        id="duplicate-name",
    ),
    pytest.param(
        """
        nodeTypes:
          - {name: a, count: 0, cores: 4, memory: 8Gi}
        """,
        "c.yaml:1: error: the cluster has no machines; give a nodeType with count >= 1 or a node",
        id="no-machines",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD)
def test_bad_cluster_files(body: str, message: str) -> None:
    assert problems(cluster_text(body)) == message.split("\n")


def test_every_problem_is_reported_at_once() -> None:
    text = cluster_text(
        """
        nodeTypes:
          - {name: a, count: 1, cores: 4, memory: lots}
          - {name: b, count: 1, cores: 0, memory: 8Gi}
        """
    )
    assert [m.split(": error: ")[0] for m in problems(text)] == ["c.yaml:5", "c.yaml:6"]


HEADERS = [
    pytest.param("", "c.yaml:1: error: the file is empty; a cluster file is a YAML mapping", id="empty"),
    pytest.param("- a\n- b\n", "c.yaml:1: error: a cluster file is a YAML mapping", id="a-list"),
    pytest.param("kind: [\n", "c.yaml:2: error: not valid YAML", id="not-yaml"),
    pytest.param(
        "apiVersion: hetflow/v1\nkind: Catalog\nname: c\nnodeTypes: []\n",
        "c.yaml:2: error: kind 'Catalog' is not 'Cluster' (this is a Catalog; read it with load_catalog)",
        id="a-catalog",
    ),
    pytest.param("apiVersion: hetflow/v1\nname: c\n", "c.yaml:1: error: kind None is not 'Cluster'", id="no-kind"),
    pytest.param(
        "apiVersion: v2\nkind: Cluster\nname: c\nnodeTypes: [{name: a, count: 1, cores: 1, memory: 1Gi}]\n",
        "c.yaml:1: error: apiVersion 'v2' is not supported; write 'apiVersion: hetflow/v1'",
        id="api-version",
    ),
]


@pytest.mark.parametrize(("text", "start"), HEADERS)
def test_bad_headers(text: str, start: str) -> None:
    (message,) = problems(text)
    assert message.startswith(start)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file; give the path of a cluster YAML"):
        load_cluster(tmp_path / "nope.yaml")


def test_catalog_problems_have_lines_too() -> None:
    text = (
        "apiVersion: hetflow/v1\nkind: Catalog\nname: k\nnodeTypes:\n  - {name: a, count: 1, cores: 4, memroy: 8Gi}\n"
    )
    missing, message = problems(text, parse_catalog)
    assert missing == "c.yaml:5: error: nodeTypes.0: required key 'memory' is missing"
    assert message.startswith("c.yaml:5: error: unknown key 'memroy' in nodeTypes.0 (did you mean 'memory'?)")


# --- probed nodes -----------------------------------------------------------------------


def test_nodes_from_hetflow_nodes_json_become_classes_of_one() -> None:
    probed = node(cpus=32, memory_gib=128, gpus=(gpu(0, model="Tesla T4", memory_gib=15, cc="7.5"), gpu(1)))
    entry = node_to_json(probed)  # what `hetflow nodes --json` prints, derived fields included
    assert "memory_gib" in entry and "gpu_count" in entry

    import yaml

    text = cluster_text("nodeTypes: []\n") + yaml.safe_dump({"nodes": [entry]})
    (cls,) = parse_cluster(text).classes()

    assert cls == node_class(probed)
    assert (cls.name, cls.count, cls.cores, cls.memory, cls.gpus) == ("test-node", 1, 32, 128 * GIB, 2)
    # mixed GPUs: the class is described by the weakest of them
    assert (cls.gpu_model, cls.gpu_memory, cls.gpu_cc, cls.gpu_speed) == ("Tesla T4", 15 * GIB, (7, 5), 3.0 / 8.5)
    assert cls.microarchitecture == "skylake"


def test_a_node_with_an_unknown_key_is_an_error() -> None:
    entry = {**node_to_json(node()), "rack": 7}
    import yaml

    text = cluster_text("nodeTypes: []\n") + yaml.safe_dump({"nodes": [entry]})
    (message,) = problems(text)
    line = text.splitlines().index("  rack: 7") + 1  # moves as Node gains fields
    expected = f"c.yaml:{line}: error: unknown key 'rack' in nodes.0; allowed keys: name, os, kernel, cpu,"
    assert message.startswith(expected)
