"""`hetflow nodes --topo` and `--json` on fake GPUs with a topology, through the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fake GPUs mknod device nodes")

SPEC = "a100:4:nvlink,t4:2:pcie"


def invoke(tmp_path: Path, *args: str) -> str:
    env = {"HETFLOW_HOME": str(tmp_path), "HETFLOW_FAKE_GPUS": SPEC, "HETFLOW_NODE_LABELS": ""}
    result = CliRunner().invoke(app, ["nodes", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


@needs_root
def test_nodes_topo_prints_the_matrix(tmp_path: Path) -> None:
    lines = [line.split() for line in invoke(tmp_path, "--topo").splitlines()]

    assert ["GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "CPU", "Affinity", "NUMA", "Affinity"] in lines
    rows = {line[0]: line[1:7] + line[8:] for line in lines if len(line) == 9 and line[0].startswith("GPU")}
    assert rows == {
        "GPU0": ["X", "NV12", "NV12", "NV12", "NODE", "SYS", "0"],
        "GPU1": ["NV12", "X", "NV12", "NV12", "NODE", "SYS", "0"],
        "GPU2": ["NV12", "NV12", "X", "NV12", "SYS", "NODE", "1"],
        "GPU3": ["NV12", "NV12", "NV12", "X", "SYS", "NODE", "1"],
        "GPU4": ["NODE", "NODE", "SYS", "SYS", "X", "SYS", "0"],
        "GPU5": ["SYS", "SYS", "NODE", "NODE", "SYS", "X", "1"],
    }
    assert ["Legend:"] in lines
    assert ["NV#", "=", "Connection", "traversing", "a", "bonded", "set", "of", "#", "NVLinks"] in lines


@needs_root
def test_nodes_topo_keeps_fake_gpus_marked(tmp_path: Path) -> None:
    text = invoke(tmp_path, "--topo")

    assert "GPUs (FAKE: made up by HETFLOW_FAKE_GPUS)" in text
    assert "GPU topology (FAKE: made up by HETFLOW_FAKE_GPUS)" in text


@needs_root
def test_nodes_without_topo_has_no_matrix(tmp_path: Path) -> None:
    text = invoke(tmp_path)

    assert "GPUs (FAKE" in text
    assert "GPU topology" not in text
    assert "Legend:" not in text


@needs_root
def test_nodes_json_has_links_and_gpu_topology(tmp_path: Path) -> None:
    (node,) = json.loads(invoke(tmp_path, "--json"))

    links = {(x["a"], x["b"]): (x["kind"], x["nvlinks"]) for x in node["gpu_links"]}
    assert len(links) == 15  # every pair of six GPUs
    assert links[(0, 3)] == ("NV", 12)
    assert links[(4, 5)] == ("SYS", 0)
    assert links[(1, 4)] == ("NODE", 0)
    assert [g["numa_node"] for g in node["gpus"]] == [0, 0, 1, 1, 0, 1]
    assert all(g["fake"] and g["pci_bus_id"] and g["cpu_affinity"] for g in node["gpus"])
