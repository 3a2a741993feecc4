"""`hetflow plan FILE` with no --cluster plans on this machine, and --cluster takes what
`hetflow nodes --json` prints (issue 25: both were refused), through the CLI on fake GPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetflow.cli.main import app, register_commands
from hetflow.errors import SpecError
from hetflow.plan import load_cluster

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fake GPUs mknod device nodes")

WORKFLOW = """apiVersion: hetflow/v1
name: here
steps:
  prep:
    image: busybox
    command: [true]
    resources: {cpus: 1, memory: 64Mi}
  train:
    needs: [prep]
    variants:
      gpu:
        image: busybox
        command: [true]
        resources: {cpus: 1, memory: 64Mi, gpus: 1}
        estimate: 10s
      cpu:
        image: busybox
        command: [true]
        resources: {cpus: 1, memory: 64Mi}
        estimate: 100s
"""


def invoke(tmp_path: Path, *args: str, code: int = 0) -> str:
    register_commands(list(args[:1]))
    env = {"HETFLOW_HOME": str(tmp_path / "home"), "HETFLOW_FAKE_GPUS": "a100:1", "HETFLOW_NODE_LABELS": ""}
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == code, result.output
    return result.output


def _placements(text: str) -> dict[str, tuple[str, str, list[int]]]:
    return {s["step"]: (s["variant"], s["node_class"], s["gpus"]) for s in json.loads(text)["steps"]}


@needs_root
def test_plan_without_a_cluster_plans_on_this_machine_and_nodes_json_is_a_cluster(tmp_path: Path) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(invoke(tmp_path, "nodes", "--json"))
    name = json.loads(nodes.read_text())[0]["name"]

    here = _placements(invoke(tmp_path, "plan", str(wf), "--json"))
    assert here == {"prep": ("default", name, []), "train": ("gpu", name, [0])}  # this machine's A100
    assert _placements(invoke(tmp_path, "plan", str(wf), "--cluster", str(nodes), "--json")) == here
    one = tmp_path / "node.json"  # one node, as an object rather than a list
    one.write_text(json.dumps(json.loads(nodes.read_text())[0]))
    assert _placements(invoke(tmp_path, "plan", str(wf), "--cluster", str(one), "--json")) == here
    assert "run times within" in invoke(tmp_path, "simulate", str(wf))


def test_a_nodes_json_with_a_bad_field_names_its_file_line_and_field(tmp_path: Path) -> None:
    node = {"name": "n1", "cpu": {"cores": 4, "architecture": "x86_64"}, "memory_bytes": "lots"}
    bad = tmp_path / "nodes.json"
    bad.write_text(json.dumps([node], indent=1))
    with pytest.raises(SpecError) as exc:
        load_cluster(bad)
    said = [p for p in exc.value.problems if "memory_bytes" in p.message]
    assert [(p.file, "'lots'" in p.message) for p in said] == [(str(bad), True)]
    assert said[0].message.startswith("nodes.0.memory_bytes")
    line = said[0].line
    assert '"memory_bytes"' in bad.read_text().splitlines()[line - 1]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[]", "YAML mapping"),
        ('[{"name": "x"}]', "YAML mapping"),
        ('{"kind": "Catalog", "apiVersion": "hetflow/v1", "name": "c", "nodeTypes": []}', "read it with load_catalog"),
    ],
    ids=["empty-list", "not-nodes", "a-catalog"],
)
def test_what_is_neither_a_cluster_nor_nodes_json_is_refused_saying_what_is_expected(
    tmp_path: Path, text: str, said: str
) -> None:
    f = tmp_path / "c.json"
    f.write_text(text)
    with pytest.raises(SpecError, match=said):
        load_cluster(f)
