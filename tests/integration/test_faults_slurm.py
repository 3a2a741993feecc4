"""Node faults on a local Slurm cluster of its own (issue 12): a slurmd killed while its
node runs a step.  slurmctld declares a node whose slurmd stopped answering DOWN after
SlurmdTimeout (300 s by default); the test says so at once with ``scontrol update
State=DOWN``, which is what slurmctld does then, and restarts the slurmd afterwards."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from demo.images import build_tiny_image
from demo.slurm.cluster import LocalSlurm

from hetflow.config import engine_env
from hetflow.execute.backends.slurm import SlurmBackend
from hetflow.execute.data.outputs import sha256_of
from hetflow.execute.gang.replicas import replica_name
from hetflow.spec import Gang
from hetflow.state import Store
from tests.contract.backend_contract import BUSYBOX, job, wait_done
from tests.integration.hfkit import Hetflow, remove_lost, step_out, write
from tests.integration.hfkit import podman as podman_names
from tests.integration.slurm_fixture import (
    kill_slurmd,
    local_cluster,
    restart_slurmd,
    slurm_config,
)

# the runs of this module's tests (run ids), whose containers must be gone when it ends
RUNS: list[str] = []


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    build_tiny_image(BUSYBOX)
    with local_cluster(prefix="hffault-") as c:
        yield c
        # issue 37: a killed slurmd leaves the lost job's slurmstepd and container running; once the
        # node is back, slurmctld's kill reaches them (the job script's trap stops the container)
        deadline = time.time() + 90
        while (left := leftovers(RUNS)) and time.time() < deadline:
            time.sleep(0.5)
        assert not left, f"the node-fault tests left these running: {left}"
    # and a slurmstepd still reporting its job's end to a slurmctld that is gone (seen half an
    # hour after `make test`) does not outlive its cluster
    assert not stepds(c.base), f"slurmstepd left running after the cluster stopped: {stepds(c.base)}"


def stepds(base: Path) -> list[str]:
    """The slurmstepd processes of the cluster at ``base``: their working folder is under it."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # it ended meanwhile
            if (proc / "comm").read_text().strip() == "slurmstepd" and os.readlink(proc / "cwd").startswith(str(base)):
                found.append(f"{proc.name} {(proc / 'cmdline').read_text().strip(chr(0))}")
    return found


def leftovers(runs: list[str]) -> list[str]:
    """The containers of ``runs`` and their conmon processes."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (proc / "comm").read_text().strip() == "conmon":
                words = (proc / "cmdline").read_text().split("\0")
                name = words[words.index("-n") + 1] if "-n" in words else ""
                if any(name.startswith(f"hf-{r}-") for r in runs):
                    found.append(f"conmon {proc.name} of {name}")
    for r in runs:
        names = podman_names("ps", "-a", "--filter", f"label=hetflow.run={r}", "--format", "{{.Names}}")
        found += [f"container {n}" for n in names]
    return found


def container_runs(name: str, timeout: float = 120) -> None:
    """Wait until container ``name`` runs: a job Slurm calls RUNNING may not have made it yet,
    and one its lost job script makes after the test removed it would sleep on unnoticed."""
    deadline = time.time() + timeout
    while not podman_names("ps", "--filter", f"name=^{name}$", "--format", "{{.Names}}"):
        assert time.time() < deadline, f"container {name} not running after {timeout} s"
        time.sleep(0.2)


def step_of(data: dict[str, Any], name: str) -> dict[str, Any]:
    """Step ``name`` of ``hetflow show --json``."""
    (found,) = (s for s in data["steps"] if s["step"] == name)
    return found


def test_a_step_whose_slurmd_is_killed_ends_as_a_node_fault_and_runs_again_elsewhere(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    backend = SlurmBackend(cluster.settings())
    r = f"f{time.time_ns() % 10**9}"
    RUNS.append(r)
    first, second = f"hf-{r}-s-1", f"hf-{r}-s-2"
    backend.submit(replace(job(first, tmp_path / "1", "sleep 60; echo 1 > /out/o", run_id=r), node="hf-t4"))
    deadline = time.time() + 60
    while backend.poll(r)[first].status != "RUNNING":
        assert time.time() < deadline, backend.poll(r)
        time.sleep(0.2)
    container_runs(first)  # before its slurmd dies: a container made after the test's `podman rm` outlives it
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
        remove_lost(first)
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
    RUNS.append(run_id)
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
        remove_lost(first)


def test_a_gang_whose_node_dies_ends_whole_as_a_node_fault(cluster: LocalSlurm, tmp_path: Path) -> None:
    # a gang of two replicas, one on each node: the node of one dies; the job is a node fault
    # (hetflow runs the whole gang again) and the other replica's container is stopped
    backend = SlurmBackend(cluster.settings())
    r = f"g{time.time_ns() % 10**9}"
    RUNS.append(r)
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


# --- only the accepted attempt writes (issue 37) ---------------------------------------------

# b is planned on hf-t4 (the cheaper node); g and c on hf-a100 (their memory).  b's first attempt
# waits for a file the test writes into its /out; g (a gate) too, so that c starts, and reads b's
# outputs, only once the lost attempt has done whatever it does with them
LATE_CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: two-pinned
nodeTypes:
  - {name: hf-a100, count: 1, cores: 2, memory: 3Gi, price: 4.0}
  - {name: hf-t4, count: 1, cores: 2, memory: 1Gi, price: 0.8}
"""
LATE_WORKFLOW = f"""apiVersion: hetflow/v1
name: latewrite
steps:
  b:
    image: {BUSYBOX}
    command: [sh, -c, 'if [ "$HETFLOW_ATTEMPT" = 1 ]; then until [ -e /out/go ]; do sleep 0.2; done; fi;
      echo "b from attempt $HETFLOW_ATTEMPT" > /out/o']
    resources: {{cpus: 1, memory: 256Mi}}
    outputs: [o]
  g:
    image: {BUSYBOX}
    command: [sh, -c, 'until [ -e /out/go ]; do sleep 0.2; done']
    resources: {{cpus: 1, memory: 2Gi}}
  c:
    image: {BUSYBOX}
    needs: [g]
    inputs: {{b: b/o}}
    command: [sh, -c, 'cat /in/b/o > /out/o']
    resources: {{cpus: 1, memory: 2Gi}}
    outputs: [o]
"""


def test_a_lost_attempt_that_ends_after_its_retry_was_accepted_never_replaces_its_outputs(
    hf: Hetflow, cluster: LocalSlurm, tmp_path: Path
) -> None:
    # slurmd dies on b's node while slurmstepd and the container live on (a node that lost only
    # slurmd, or its network): hetflow runs b again elsewhere and accepts attempt 2; then attempt 1
    # ends 0 and its job script tries to move its /out over steps/b/out.  The fence refuses it:
    # c (started after that) and the recorded checksum see attempt 2's bytes, and attempt 1 is
    # recorded discarded
    config = slurm_config(tmp_path, cluster, LATE_CLUSTER)
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, LATE_WORKFLOW)).stdout.strip()
    RUNS.append(run_id)
    lost = f"hf-{run_id}-b-1"
    hf.wait_for(lambda: squeue_row(cluster, lost)[0] == "RUNNING", timeout=120)
    assert squeue_row(cluster, lost)[1] == "hf-t4"  # as planned (the cheaper node)
    work = Path(hf.show(run_id)["workdir"])
    kill_slurmd(cluster, "hf-t4")
    try:
        hf.wait_for(lambda: hf.step_states(run_id)["b"] == "succeeded", timeout=120)
        b = step_of(hf.show(run_id), "b")
        assert (b["attempts"], b["node"]) == (2, "hf-a100"), b
        (recorded,) = Store(hf.home / "state.db", read_only=True).outputs(run_id, "b")
        # attempt 1 now ends 0, its slurmd still dead: nothing can cancel it
        staging = work / "attempts" / "b" / "1" / "out"
        (staging / "go").touch()
        discarded = staging.parent / "discarded"
        hf.wait_for(lambda: not staging.exists() or discarded.exists(), timeout=120)  # its script is over
        (work / "attempts" / "g" / "1" / "out" / "go").touch()
        hf.wait_for(lambda: hf.show(run_id)["state"] in ("succeeded", "failed"), timeout=120)
        data = hf.show(run_id)
        assert data["state"] == "succeeded", data
        assert (step_out(hf, run_id, "c") / "o").read_text() == "b from attempt 2\n"
        out = step_out(hf, run_id, "b") / "o"
        assert out.read_text() == "b from attempt 2\n"
        assert sha256_of(out) == recorded.sha256, "steps/b/out is not what hetflow recorded"
        first = step_of(data, "b")["attempt_history"][0]
        assert first["state"] == "failed" and "discarded" in first["message"], first
        said = "b attempt 1: attempt 1 ended after attempt 2 holds the step: its outputs were discarded (fencing)"
        assert said in hf("show", run_id).stdout  # `hetflow show` tells
        assert (staging / "o").read_text() == "b from attempt 1\n"  # kept in its own folder
    finally:
        restart_slurmd(cluster, "hf-t4")
        subprocess.run(["podman", "rm", "-f", "--ignore", lost], env=engine_env(), capture_output=True)


# s and t share hf-t4 in the plan (t reads 1 GiB of s's at 10 Mbit/s): t's first job waits behind
# s's (afterok), so it is dropped when s's node dies, and submitted again
SHARED_CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: two-pinned
bandwidth: 10Mbit/s
nodeTypes:
  - {name: hf-a100, count: 1, cores: 2, memory: 3Gi, price: 4.0}
  - {name: hf-t4, count: 1, cores: 2, memory: 3Gi, price: 0.8}
"""
SHARED_WORKFLOW = f"""apiVersion: hetflow/v1
name: samenode
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, 'if [ "$HETFLOW_ATTEMPT" = 1 ]; then sleep 600; fi; echo s > /out/o']
    resources: {{cpus: 1, memory: 256Mi}}
    outputs: [o]
    sizes: {{o: 1Gi}}
    estimate: 60s
  t:
    image: {BUSYBOX}
    inputs: {{s: s/o}}
    command: [sh, -c, 'cat /in/s/o > /out/o']
    resources: {{cpus: 1, memory: 256Mi}}
    outputs: [o]
    estimate: 5s
"""


def test_a_step_planned_on_a_failed_node_is_not_submitted_there_again(
    hf: Hetflow, cluster: LocalSlurm, tmp_path: Path
) -> None:
    config = slurm_config(tmp_path, cluster, SHARED_CLUSTER)
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, SHARED_WORKFLOW)).stdout.strip()
    RUNS.append(run_id)
    first = f"hf-{run_id}-s-1"
    hf.wait_for(lambda: squeue_row(cluster, first)[0] == "RUNNING", timeout=120)
    assert squeue_row(cluster, first)[1] == "hf-t4"
    assert step_of(hf.show(run_id), "t")["node"] == "hf-t4"  # t is planned there too
    container_runs(first)  # Slurm says RUNNING as the job script starts, before its `podman run`
    kill_slurmd(cluster, "hf-t4")
    try:
        # before: t's next job was pinned to hf-t4 and waited there (ReqNodeNotAvail) until it came back
        hf.wait_for(lambda: hf.show(run_id)["state"] in ("succeeded", "failed"), timeout=180)
        data = hf.show(run_id)
        assert data["state"] == "succeeded", data
        t = step_of(data, "t")
        assert t["node"] == "hf-a100", t
        assert (step_out(hf, run_id, "t") / "o").read_text() == "s\n"
        said = [e.message for e in Store(hf.home / "state.db", read_only=True).events(run_id) if e.step == "t"]
        assert any("on hf-a100 (moved: node hf-t4 failed" in m for m in said), said
    finally:
        restart_slurmd(cluster, "hf-t4")
        remove_lost(first)
