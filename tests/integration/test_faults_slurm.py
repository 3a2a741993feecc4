"""Node faults on a local Slurm cluster of its own (issue 12): a slurmd killed while its
node runs a step.  slurmctld declares a node whose slurmd stopped answering DOWN after
SlurmdTimeout (300 s by default); the test says so at once with ``scontrol update
State=DOWN``, which is what slurmctld does then, and restarts the slurmd afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from demo.images import build_tiny_image
from demo.slurm_cluster import LocalSlurm

from hetflow.config import engine_env
from hetflow.execute.backends.slurm import SlurmBackend
from hetflow.execute.gang.replicas import replica_name
from hetflow.spec import Gang
from hetflow.state import Store
from tests.contract.backend_contract import BUSYBOX, job, wait_done
from tests.integration.hfkit import Hetflow, step_out, write
from tests.integration.hfkit import podman as podman_names
from tests.integration.slurm_fixture import local_cluster, slurm_config


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    build_tiny_image(BUSYBOX)
    with local_cluster(prefix="hffault-") as c:
        yield c


def scontrol(c: LocalSlurm, *args: str, check: bool = True) -> None:
    subprocess.run(["scontrol", *args], env={**os.environ, **c.env}, check=check, capture_output=True, timeout=30)


def node_state(c: LocalSlurm, node: str) -> str:
    out = subprocess.run(
        ["sinfo", "--noheader", "-n", node, "--format=%T"], env={**os.environ, **c.env}, capture_output=True, text=True
    )
    return out.stdout.strip()


def kill_slurmd(c: LocalSlurm, node: str) -> None:
    pid = int((c.base / "run" / f"slurmd-{node}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    scontrol(c, "update", f"NodeName={node}", "State=DOWN", "Reason=hetflow-test: slurmd killed")


def restart_slurmd(c: LocalSlurm, node: str) -> None:
    env = {**os.environ, **c.env}
    subprocess.run(["slurmd", "-f", str(c.conf_path), "-N", node], env=env, check=True, timeout=30)
    # ReturnToService=2 may bring it back as it registers: RESUME is then refused, harmlessly
    scontrol(c, "update", f"NodeName={node}", "State=RESUME", check=False)
    deadline = time.time() + 60
    while time.time() < deadline and node_state(c, node).rstrip("*~#") not in ("idle", "mixed", "allocated"):
        time.sleep(0.3)
    assert node_state(c, node).rstrip("*~#") in ("idle", "mixed", "allocated"), node_state(c, node)


def test_a_step_whose_slurmd_is_killed_ends_as_a_node_fault_and_runs_again_elsewhere(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    backend = SlurmBackend(cluster.settings())
    r = f"f{time.time_ns() % 10**9}"
    first, second = f"hf-{r}-s-1", f"hf-{r}-s-2"
    backend.submit(replace(job(first, tmp_path / "1", "sleep 60; echo 1 > /out/o", run_id=r), node="hf-t4"))
    deadline = time.time() + 60
    while backend.poll(r)[first].status != "RUNNING":
        assert time.time() < deadline, backend.poll(r)
        time.sleep(0.2)
    kill_slurmd(cluster, "hf-t4")
    try:
        st = wait_done(backend, r, [first], timeout=60)[first]
        # Slurm's verdict, not requeued by Slurm itself (--no-requeue): hetflow decides
        assert (st.status, st.node_failed, st.node) == ("NODE_FAIL", True, "hf-t4"), st
        assert st.exit_code not in (0, None)
        backend.submit(job(second, tmp_path / "2", "echo 2 > /out/o", run_id=r))  # the new attempt
        st2 = wait_done(backend, r, [second], timeout=60)[second]
        assert (st2.exit_code, st2.node) == (0, "hf-a100"), st2  # the other node: hf-t4 is down
        assert (tmp_path / "2" / "o").read_text() == "2\n"
        time.sleep(1)
        states = backend.poll(r)
        assert (states[first].status, states[first].node_failed) == ("NODE_FAIL", True)  # stays lost
    finally:
        restart_slurmd(cluster, "hf-t4")
        # the lost attempt's container, which outlived its slurmd on this one machine
        subprocess.run(["podman", "rm", "-f", "--ignore", first], env=engine_env(), capture_output=True)
    assert not (tmp_path / "1" / "o").exists()


CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: two-pinned
nodeTypes:
  - {name: hf-a100, count: 1, cores: 2, memory: 3Gi, price: 4.0}
  - {name: hf-t4, count: 1, cores: 2, memory: 3Gi, price: 0.8}
"""
# the first attempt waits to be lost with its node; the next one ends at once
WORKFLOW = f"""apiVersion: hetflow/v1
name: lostnode
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, 'if [ "$HETFLOW_ATTEMPT" = 1 ]; then sleep 60; fi; echo $HETFLOW_ATTEMPT > /out/o']
    resources: {{cpus: 1, memory: 256Mi}}
    outputs: [o]
"""


def squeue_row(c: LocalSlurm, name: str) -> tuple[str, str]:
    """(state, node) of job ``name`` as squeue lists it, ("", "") when it does not."""
    out = subprocess.run(
        ["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%T %N"],
        env={**os.environ, **c.env},
        capture_output=True,
        text=True,
    ).stdout.split()
    return (out[0], out[1]) if len(out) == 2 else ("", "")


def test_a_retry_after_its_pinned_node_died_runs_on_the_other_node(
    hf: Hetflow, cluster: LocalSlurm, tmp_path: Path
) -> None:
    # both node types are one named node: the plan pins the step (--nodelist); the retry that
    # follows the node's death must not be pinned there again (Slurm would hold it pending)
    config = slurm_config(tmp_path, cluster, CLUSTER)
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, WORKFLOW)).stdout.strip()
    first = f"hf-{run_id}-s-1"
    hf.wait_for(lambda: squeue_row(cluster, first)[0] == "RUNNING", timeout=120)
    lost = squeue_row(cluster, first)[1]
    other = ({"hf-a100", "hf-t4"} - {lost}).pop()
    kill_slurmd(cluster, lost)
    try:
        hf.wait_for(lambda: hf.show(run_id)["state"] in ("succeeded", "failed"), timeout=120)
        data = hf.show(run_id)
        assert data["state"] == "succeeded", data
        (step,) = data["steps"]
        assert (step["node"], step["attempts"]) == (other, 2), step
        assert (step_out(hf, run_id, "s") / "o").read_text() == "2\n"
        assert squeue_row(cluster, f"hf-{run_id}-s-2") == ("COMPLETED", other)
        # the run's events say where the retry went and why
        said = [e.message for e in Store(hf.home / "state.db", read_only=True).events(run_id) if e.step == "s"]
        assert any(f"on {other} (moved: node {lost} failed under it)" in m for m in said), said
    finally:
        restart_slurmd(cluster, lost)
        subprocess.run(["podman", "rm", "-f", "--ignore", first], env=engine_env(), capture_output=True)


def test_a_gang_whose_node_dies_ends_whole_as_a_node_fault(cluster: LocalSlurm, tmp_path: Path) -> None:
    # a gang of two replicas, one on each node: the node of one dies; the job is a node fault
    # (hetflow runs the whole gang again) and the other replica's container is stopped
    backend = SlurmBackend(cluster.settings())
    r = f"g{time.time_ns() % 10**9}"
    name = f"hf-{r}-gang-1"
    script = "echo up > /out/up; sleep 60"
    ranks = tuple(
        replace(job(replica_name(name, i), tmp_path / f"rank{i}", script, run_id=r).container, network_name="host")
        for i in range(2)
    )
    lead = job(name, tmp_path / "rank0", script, run_id=r)
    gang = replace(lead, container=ranks[0], ranks=ranks, gang=Gang(replicas=2, per_node=1, port=29590), nodes=2)
    backend.submit(gang)
    jobdir = cluster.workdir / r
    hf_up = [tmp_path / f"rank{i}" / "up" for i in range(2)]
    deadline = time.time() + 60
    while not all(p.exists() for p in hf_up):
        assert time.time() < deadline, backend.poll(r)
        time.sleep(0.2)
    where = {i: (jobdir / f"{name}.r{i}.host").read_text().split()[1] for i in range(2)}
    lost = "hf-t4"
    survivor = next(i for i, n in where.items() if n != lost)
    kill_slurmd(cluster, lost)
    try:
        st = wait_done(backend, r, [name], timeout=90)[name]
        assert (st.status, st.node_failed) == ("NODE_FAIL", True), st
        # the replica on the surviving node does not keep running (its task's TERM trap stops it)
        filt = f"name=^{replica_name(name, survivor)}$"
        deadline = time.time() + 30
        while podman_names("ps", "--filter", filt, "--format", "{{.Names}}"):
            assert time.time() < deadline, f"replica {survivor} still runs after its gang's node failed"
            time.sleep(0.2)
    finally:
        restart_slurmd(cluster, lost)
        for i in range(2):
            gone = replica_name(name, i)
            subprocess.run(["podman", "rm", "-f", "--ignore", gone], env=engine_env(), capture_output=True)
