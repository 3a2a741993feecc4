"""Gang steps in the format: replicas started together, validated with file:line errors."""

from __future__ import annotations

import pytest

from hetflow.errors import SpecError
from hetflow.spec.models import Gang
from tests.unit.builders import load, load_steps

V1 = "apiVersion: hetflow/v1\nname: wf\nsteps:\n"


def test_a_gang_step_keeps_its_fields_and_per_replica_resources() -> None:
    loaded = load_steps(
        """
        train:
          image: x
          command: [python3, /app/allreduce.py]
          resources: {cpus: 2, memory: 2Gi, gpus: 2}
          gang: {replicas: 4, per_node: 2, launcher: torch, gpu_link: nvlink, network: rdma}
        """
    )
    step = loaded.workflow.steps["train"]
    assert step.gang == Gang(replicas=4, per_node=2, launcher="torch", gpu_link="nvlink", network="rdma")
    assert step.replicas == 4
    assert step.gang.nodes_at_least() == 2
    assert step.resolved_variants()["default"].resources.gpus == 2  # per replica, not in total
    assert loaded.notes == ()


def test_a_step_without_a_gang_is_one_replica() -> None:
    step = load_steps("a: {image: x}").workflow.steps["a"]
    assert (step.gang, step.replicas) == (None, 1)
    assert Gang(replicas=3).nodes_at_least() == 1
    assert Gang(replicas=5, per_node=2).nodes_at_least() == 3


BAD = [
    pytest.param("  t:\n    image: x\n    gang: {replicas: 0}\n", 6, "greater than or equal to 1", id="replicas-0"),
    pytest.param(
        "  t:\n    image: x\n    gang:\n      replicas: 2\n      per_node: 3\n",
        6,
        "per_node (3) is more than replicas (2); set per_node to at most 2",
        id="per-node-over-replicas",
    ),
    pytest.param(
        "  t:\n    image: x\n    gang:\n      replicas: 2\n      launcher: slurm\n",
        8,
        "'torch', 'mpi' or 'none'",
        id="unknown-launcher",
    ),
    pytest.param(
        "  t:\n    image: x\n    gang:\n      replicas: 2\n      gpu_link: infiniband\n",
        8,
        "'nvlink', 'same-numa' or 'any'",
        id="unknown-gpu-link",
    ),
    pytest.param(
        "  t:\n    image: x\n    gang:\n      replicas: 2\n      network: ethernet\n",
        8,
        "'tcp' or 'rdma'",
        id="unknown-network",
    ),
    pytest.param(
        "  t:\n    image: x\n    gang:\n      replicas: 2\n      ranks: 4\n",
        8,
        "ranks",
        id="unknown-key",
    ),
    pytest.param(
        "  t:\n    image: x\n    resources: {gpus: 1}\n    gang:\n      replicas: 2\n      gpu_link: nvlink\n",
        9,
        "gpu_link: nvlink joins a replica's own GPUs, but variant(s) 'default' ask for fewer than 2 GPUs",
        id="nvlink-needs-two-gpus",
    ),
]


@pytest.mark.parametrize(("body", "line", "phrase"), BAD)
def test_a_bad_gang_is_an_error_on_its_line(body: str, line: int, phrase: str) -> None:
    with pytest.raises(SpecError) as info:
        load(V1 + body)
    errors = [p for p in info.value.problems if p.severity == "error"]
    assert [(p.file, p.line) for p in errors] == [("wf.yaml", line)], errors
    assert phrase in errors[0].message, errors[0].message


def test_setting_a_gang_variable_is_a_note() -> None:
    loaded = load_steps(
        """
        t:
          image: x
          env: {RANK: "3", OK: "1"}
          gang: {replicas: 2, launcher: torch}
        """
    )
    assert [(n.line, n.severity) for n in loaded.notes] == [(6, "note")]
    assert "sets RANK, which hetflow sets for every replica of its gang (launcher: torch)" in loaded.notes[0].message
