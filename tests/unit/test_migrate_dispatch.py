"""``hetflow migrate --to NODE`` on a cluster run (issue 27): the next attempt of the moved
step goes to that node's class, off the planned one; without --to, off the node it left."""

from __future__ import annotations

from hetflow.execute.run.dispatching.dispatch import ClusterDispatch
from hetflow.execute.run.retries import NextAttempt
from hetflow.plan.instance import MachineClass, Placement
from hetflow.spec import parse_workflow
from tests.unit.builders import node as make_node

STEP = parse_workflow(
    "apiVersion: hetflow/v1\nname: m\nsteps:\n  s:\n    image: busybox\n    command: [x]\n    checkpoint: true\n",
    "wf.yaml",
).workflow.steps["s"]


def _dispatch(nexts: dict[str, NextAttempt]) -> ClusterDispatch:
    classes = [MachineClass(name=n, count=1, cores=4, memory=2**33) for n in ("node1", "node2", "node3")]
    placed = Placement("s", "default", "node1-0", "node1", 0.0, 1.0, 1.0, 2**20)
    return ClusterDispatch(make_node(), {"s": placed}, classes, nexts=nexts)


def test_migrate_to_a_node_moves_the_next_attempt_there() -> None:
    nexts: dict[str, NextAttempt] = {}
    d = _dispatch(nexts)
    assert d.decide("s", STEP).variant == "default" and d.where("s").pinned_node == "node1"  # as planned
    nexts["s"] = NextAttempt(move_to="node3")
    decided = d.decide("s", STEP)
    assert decided.variant == "default" and decided.why == "default on node3 (moved there by hetflow migrate)"
    assert d.where("s").pinned_node == "node3"


def test_migrate_without_to_leaves_the_node_it_ran_on() -> None:
    d = _dispatch({"s": NextAttempt(lost_nodes=frozenset({"node1"}))})
    assert d.decide("s", STEP).variant == "default" and d.where("s").pinned_node == "node2"


def test_migrate_to_the_planned_node_keeps_it() -> None:
    d = _dispatch({"s": NextAttempt(move_to="node1")})
    assert d.decide("s", STEP).why.startswith("default on node1 (planned") and d.where("s").pinned_node == "node1"
