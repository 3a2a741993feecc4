"""The gang part of the backend contract (``tests.contract.backend_contract``): a gang job
(``Job.ranks``) starts all its replicas or none, each sees the launch contract's rank and
world size, one name reports them, and one replica failing fails the gang and stops the
others.

Every replica runs the same script, as a step's replicas do (the Kubernetes backend runs
rank 0's command on every index of its Indexed Job): what a replica does depends on its
``$HETFLOW_RANK``, or on a file the test wrote for that rank."""

from __future__ import annotations

from pathlib import Path

from hetflow.execute.backends.base import Backend
from tests.contract.backend_contract import GATE, ContractPart, gang_job, new_run_id, wait_done

WORLD = 2  # replicas: a gang of two fits every test cluster's one node (two CPUs)


def contract_gang(backend: Backend, name: str, out: Path, script: str, run_id: str) -> None:
    """Submit a gang of ``WORLD`` replicas of ``script`` as the launcher would for ``backend``."""
    cluster = backend.capabilities.assigns_gpus
    backend.submit(gang_job(name, out, [script] * WORLD, run_id=run_id, cluster=cluster))


class GangContract(ContractPart):
    """For backends that start a gang: all replicas or none, reported as the job's one name,
    failed whole."""

    PART = "gang"

    def test_every_replica_runs_sees_its_rank_and_one_name_reports_the_gang(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        rid = new_run_id()
        name, out = f"hf-{rid}-gang-1", tmp_path / "g"
        contract_gang(backend, name, out, 'echo "$HETFLOW_RANK $HETFLOW_WORLD_SIZE" > /out/r$HETFLOW_RANK', rid)
        states = wait_done(backend, rid, [name])
        assert set(states) == {name}, "replicas are not jobs of their own"
        assert states[name].exit_code == 0, states[name]
        assert [(out / f"r{i}").read_text() for i in range(WORLD)] == [f"{i} {WORLD}\n" for i in range(WORLD)]
        backend.release([name])
        after = backend.poll(rid)  # as ``release`` promises: forgotten, or kept as it ended (base part)
        assert set(after) <= {name} and (name not in after or (not after[name].running and after[name].exit_code == 0))

    def test_a_failing_replica_fails_the_gang_and_stops_the_others(self, backend: Backend, tmp_path: Path) -> None:
        rid = new_run_id()
        name, out = f"hf-{rid}-gang-1", tmp_path / "g"
        out.mkdir()
        (out / "fail1").write_text("")  # replica 1 fails at once; the gate never opens for replica 0
        contract_gang(backend, name, out, f"test -f /out/fail$HETFLOW_RANK && exit 5; {GATE}", rid)
        states = wait_done(backend, rid, [name])  # only a stop ends replica 0
        assert (states[name].exit_code, "replica 1" in states[name].reason) == (5, True), states[name]
        backend.release([name])
