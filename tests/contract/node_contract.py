"""The node-failure part of the backend contract (``tests.contract.backend_contract``): a node
that goes away under a job or a gang (Slurm: its slurmd killed and the node set DOWN; Ray: the
worker node removed; Kubernetes: the node tainted NoExecute, as the node controller taints a
NotReady one; the fake: ``FakeState.fail_node``) is reported as the node's failure
(``JobState.node_failed``, with the reason), not the step's, and the next attempt runs on a
node still up.

The backend's module provides the ``node_fault`` fixture, a ``NodeFault``: it places the
contract's jobs on nodes it may take down, takes one down, and brings every node back after
the test.  The jobs wait for a gate that the test opens at its end, so a container its engine
lost ends by itself."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from hetflow.execute.backends.base import Backend, Job, JobState
from tests.contract.backend_contract import (
    ContractPart,
    gang_job,
    gated,
    job,
    new_run_id,
    open_gate,
    wait_done,
    wait_until,
)
from tests.contract.gang_contract import WORLD


class NodeFault(Protocol):
    def place(self, job: Job) -> Job:
        """``job`` on the nodes this fault may take down (unchanged: anywhere)."""
        ...

    def fail(self, node: str) -> None:
        """``node`` goes away now (the fixture brings it back after the test)."""
        ...


def up(out: Path, files: list[str]) -> bool:
    return all((out / f).exists() for f in files)


def running_on(backend: Backend, rid: str, name: str, out: Path, files: list[str]) -> str:
    """The node ``name`` runs on once every replica has begun (wrote its file in ``files``)."""
    st = wait_until(
        backend, rid, lambda s: name in s and s[name].running and bool(s[name].node) and up(out, files), f"{name} up"
    )
    return st[name].node or ""


def failed_with_its_node(st: JobState, node: str) -> None:
    assert st.node_failed and not st.dependency_failed, st
    assert st.node == node and st.reason, f"a node failure says which node and why: {st}"


class NodeFailureContract(ContractPart):
    """A backend whose engine reports a node's failure (``JobState.node_failed``)."""

    PART = "node failure"

    def test_a_job_on_a_failed_node_ends_node_failed(
        self, backend: Backend, node_fault: NodeFault, tmp_path: Path
    ) -> None:
        rid = new_run_id()
        name, out = f"hf-{rid}-one-1", tmp_path / "one"
        backend.submit(node_fault.place(job(name, out, "touch /out/up; " + gated("exit 0"), run_id=rid)))
        node = running_on(backend, rid, name, out, ["up"])
        try:
            node_fault.fail(node)
            failed_with_its_node(wait_done(backend, rid, [name])[name], node)
        finally:
            open_gate(out)
            backend.release([name])

    def test_the_next_attempt_runs_on_a_node_still_up(
        self, backend: Backend, node_fault: NodeFault, tmp_path: Path
    ) -> None:
        rid = new_run_id()
        first, second = f"hf-{rid}-s-1", f"hf-{rid}-s-2"
        backend.submit(node_fault.place(job(first, tmp_path / "1", "touch /out/up; " + gated("exit 0"), run_id=rid)))
        node = running_on(backend, rid, first, tmp_path / "1", ["up"])
        try:
            node_fault.fail(node)
            failed_with_its_node(wait_done(backend, rid, [first])[first], node)
            backend.submit(node_fault.place(job(second, tmp_path / "2", "echo 2 > /out/o", run_id=rid)))
            st = wait_done(backend, rid, [second])[second]
            assert (st.exit_code, st.node != node) == (0, True), f"the next attempt, after {node} failed: {st}"
            assert (tmp_path / "2" / "o").read_text() == "2\n"
        finally:
            open_gate(tmp_path / "1")
            backend.release([first, second])

    def test_a_gang_on_a_failed_node_ends_node_failed_whole(
        self, backend: Backend, node_fault: NodeFault, tmp_path: Path
    ) -> None:
        rid = new_run_id()
        name, out = f"hf-{rid}-gang-1", tmp_path / "g"
        cluster = backend.capabilities.assigns_gpus
        made = gang_job(
            name, out, ["touch /out/up$HETFLOW_RANK; " + gated("exit 0")] * WORLD, run_id=rid, cluster=cluster
        )
        backend.submit(node_fault.place(made))
        node = running_on(backend, rid, name, out, [f"up{i}" for i in range(WORLD)])  # rank 0's node
        try:
            node_fault.fail(node)
            states = wait_done(backend, rid, [name])
            assert set(states) == {name}, "replicas are not jobs of their own"
            failed_with_its_node(states[name], node)
        finally:
            open_gate(out)
            backend.release([name])
