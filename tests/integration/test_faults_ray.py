"""Node faults on Ray (issue 12): a worker node removed while it runs a step.  A cluster
of its own (``ray.cluster_utils.Cluster``: a head and two workers of one node type), so
removing a node leaves the other modules' clusters alone.  With CRIU checkpoints (issue 27):
a checkpointed step whose node is removed continues on another node from its last
checkpoint, and a dump that stops a step is reported as such, then restored."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from demo.images import build_tiny_image
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group_table

from hetflow.config import engine_env
from hetflow.execute import criu_support
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.local import cgroups
from hetflow.execute.backends.ray import RayBackend, RaySettings
from hetflow.execute.checkpoint import Restore
from hetflow.execute.data.outputs import sha256_of
from hetflow.execute.gang.replicas import replica_name
from hetflow.spec import Gang
from hetflow.state import Store
from tests.contract.backend_contract import BUSYBOX, job, wait_done
from tests.integration.hfkit import Hetflow, counter_workflow, remove_lost, step_out, write
from tests.integration.hfkit import podman as podman_names
from tests.integration.ray_fixture import _node_args, connect, run_state, step_log

NODES = (("fault-head", 2, 0, None, None, "fault-head"), ("fault-w1", 2, 0, None, None, "fault-w"))
SPARE = ("fault-w2", 2, 0, None, None, "fault-w")


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, dict[str, Any]]]:
    build_tiny_image(BUSYBOX)
    head, worker = NODES
    c = Cluster(initialize_head=True, head_node_args=_node_args(*head, head=True))
    workers = {worker[0]: c.add_node(**_node_args(*worker, head=False))}
    c.wait_for_nodes()
    connect(c.address, namespace="hetflow-fault-tests")  # a driver of another module's cluster is closed first
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()  # type: ignore[no-untyped-call]


def test_a_step_whose_worker_node_is_removed_ends_as_a_node_fault_and_runs_again_on_another(
    cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    c, workers = cluster
    backend = RayBackend(RaySettings(address=c.address, stop_timeout=2))
    r = f"f{time.time_ns() % 10**9}"
    first, second = f"hf-{r}-s-1", f"hf-{r}-s-2"
    backend.submit(replace(job(first, tmp_path / "1", "sleep 60; echo 1 > /out/o", run_id=r), node_class="fault-w"))
    deadline = time.time() + 60
    while (st := backend.poll(r)[first]).status != "RUNNING":
        assert time.time() < deadline, st
        time.sleep(0.2)
    assert st.node == "fault-w1"
    running(first)
    spare = c.add_node(**_node_args(*SPARE, head=False))  # where the next attempt can go
    c.wait_for_nodes()
    try:
        c.remove_node(workers.pop("fault-w1"))
        st = wait_done(backend, r, [first], timeout=90)[first]
        assert (st.node_failed, st.node, st.status) == (True, "fault-w1", "NODE_LOST"), st
        backend.submit(replace(job(second, tmp_path / "2", "echo 2 > /out/o", run_id=r), node_class="fault-w"))
        st2 = wait_done(backend, r, [second], timeout=90)[second]
        assert (st2.exit_code, st2.node) == (0, "fault-w2"), st2
        assert (tmp_path / "2" / "o").read_text() == "2\n"
    finally:
        workers["fault-w2"] = spare
        backend.release([first, second])
        # the lost attempt's container, which outlived its Ray worker on this one machine
        remove_lost(first)
    assert not (tmp_path / "1" / "o").exists()


def running(name: str) -> None:
    """Wait until the job's container runs (Ray says RUNNING as the task starts, before podman):
    a node removed while its podman run was still creating the container killed podman run
    there and left the container's ``runc init`` waiting for a start that never came, which
    ``podman rm -f`` could not remove (seen on a loaded machine)."""
    filt = f"name=^{name}$"
    deadline = time.time() + 240
    while not podman_names("ps", "--filter", filt, "--format", "{{.Names}}"):
        assert time.time() < deadline, f"{name}'s container never ran"
        time.sleep(0.2)


PINNED = (("fault-p1", 2, 0, None, None, "fault-p"), ("fault-p2", 2, 0, None, None, "fault-p"))
CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: two-pinned
nodeTypes:
  - {name: fault-p1, count: 1, cores: 2, memory: 1Gi, price: 1.0}
  - {name: fault-p2, count: 1, cores: 2, memory: 1Gi, price: 1.0}
"""
# the first attempt waits to be lost with its node; the next one ends at once
WORKFLOW = f"""apiVersion: hetflow/v1
name: lostnode
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, 'if [ "$HETFLOW_ATTEMPT" = 1 ]; then sleep 60; fi; echo $HETFLOW_ATTEMPT > /out/o']
    resources: {{cpus: 1, memory: 128Mi}}
    outputs: [o]
"""


def test_a_retry_after_its_pinned_node_died_runs_on_the_other_node(
    hf: Hetflow, cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    # both node types are one named node: the plan pins the step (NodeAffinity); the retry
    # after that node died must not be pinned there again (Ray would refuse it as unknown)
    c, workers = cluster
    for node in PINNED:
        workers[node[0]] = c.add_node(**_node_args(*node, head=False))
    c.wait_for_nodes()
    settings = {"backend": "ray", "cluster": write(tmp_path, CLUSTER, "cluster.yaml"), "ray": {"address": c.address}}
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, WORKFLOW)).stdout.strip()
    first = f"hf-{run_id}-s-1"
    backend = RayBackend(RaySettings(address=c.address, stop_timeout=2))
    hf.wait_for(lambda: (st := backend.poll(run_id).get(first)) is not None and st.status == "RUNNING", timeout=120)
    running(first)
    lost = backend.poll(run_id)[first].node
    assert lost in ("fault-p1", "fault-p2")
    other = ({"fault-p1", "fault-p2"} - {lost}).pop()
    try:
        c.remove_node(workers.pop(lost))
        hf.wait_for(lambda: run_state(hf, run_id) in ("succeeded", "failed"), timeout=120)
        data = hf.show(run_id)
        assert data["state"] == "succeeded", data
        (step,) = data["steps"]
        assert (step["node"], step["attempts"]) == (other, 2), step
        assert (step_out(hf, run_id, "s") / "o").read_text() == "2\n"
        said = [e.message for e in Store(hf.home / "state.db", read_only=True).events(run_id) if e.step == "s"]
        assert any(f"on {other} (moved: node {lost} failed under it)" in m for m in said), said
    finally:
        remove_lost(first)


GANG_NODES = (("fault-g1", 2, 0, None, None, "fault-g"), ("fault-g2", 2, 0, None, None, "fault-g"))


def test_a_gang_whose_node_is_removed_ends_whole_as_a_node_fault(
    cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    # two replicas, one per node of a type: one node goes; the gang is a node fault (hetflow
    # runs it again whole) and the other replica is stopped, not left running
    c, workers = cluster
    for node in GANG_NODES:
        workers[node[0]] = c.add_node(**_node_args(*node, head=False))
    c.wait_for_nodes()
    backend = RayBackend(RaySettings(address=c.address, stop_timeout=2))
    r = f"g{time.time_ns() % 10**9}"
    name = f"hf-{r}-gang-1"
    script = "echo up > /out/up; sleep 60"
    ranks = tuple(
        replace(job(replica_name(name, i), tmp_path / f"rank{i}", script, run_id=r).container, network_name="host")
        for i in range(2)
    )
    lead = job(name, tmp_path / "rank0", script, run_id=r)
    gang = Gang(replicas=2, per_node=1, port=29790)
    backend.submit(replace(lead, container=ranks[0], ranks=ranks, gang=gang, node_class="fault-g", nodes=2))
    deadline = time.time() + 60
    while not all((tmp_path / f"rank{i}" / "up").exists() for i in range(2)):
        assert time.time() < deadline, backend.poll(r)
        time.sleep(0.2)
    (pg,) = [g for g in placement_group_table().values() if g["name"] == name and g["state"] == "CREATED"]
    names = {n["NodeID"]: (n.get("Labels") or {}).get("hetflow/node") for n in ray.nodes()}
    on = {i: names[pg["bundles_to_node_id"][i]] for i in range(2)}
    lost, survivor = on[1], 0
    try:
        c.remove_node(workers.pop(lost))
        st = wait_done(backend, r, [name], timeout=90)[name]
        assert (st.status, st.node_failed) == ("NODE_LOST", True), st
        assert f"replica 1 lost with its node {lost}" in st.reason, st.reason
        # reported only once the others ended: the survivor's container is gone (or going)
        filt = f"name=^{replica_name(name, survivor)}$"
        deadline = time.time() + 30
        while podman_names("ps", "--filter", filt, "--format", "{{.Names}}"):
            assert time.time() < deadline, f"replica {survivor} still runs after its gang's node was removed"
            time.sleep(0.2)
    finally:
        backend.release([name])
        for i in range(2):
            gone = replica_name(name, i)
            subprocess.run(["podman", "rm", "-f", "--ignore", gone], env=engine_env(), capture_output=True)


TICKS = 24
COUNTER = counter_workflow(TICKS, "{every: 2s}")


def _two_nodes(c: Cluster, workers: dict[str, Any], tmp_path: Path, prefix: str) -> str:
    """Workers PREFIX1 and PREFIX2 added to the module's cluster, each the one node of its
    own node type in the cluster file (so a step is pinned to one); the config to run on them."""
    for name in (f"{prefix}1", f"{prefix}2"):
        workers[name] = c.add_node(**_node_args(name, 2, 0, None, None, name, head=False))
    c.wait_for_nodes()
    text = CLUSTER.replace("fault-p", prefix).replace("two-pinned", f"two-{prefix}")
    settings = {"backend": "ray", "cluster": write(tmp_path, text, "cluster.yaml"), "ray": {"address": c.address}}
    return write(tmp_path, yaml.safe_dump(settings), "config.yaml")


@pytest.mark.skipif(not criu_support().ok, reason=f"CRIU checkpoints do not work here ({criu_support().reason})")
def test_a_checkpointed_step_whose_node_is_removed_continues_on_another_from_its_checkpoint(
    hf: Hetflow, cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    # checkpointed every 2 s on its node (a dump task pinned there); the node goes: the next
    # attempt is restored from the last checkpoint on the other node, not started from zero
    c, workers = cluster
    config = _two_nodes(c, workers, tmp_path, "fault-c")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, COUNTER)).stdout.strip()
    first, second = f"hf-{run_id}-count-1", f"hf-{run_id}-count-2"
    folder = hf.home / "runs" / run_id / "checkpoints" / "count"

    def kept() -> int:  # the counter in the outputs kept with attempt 1's checkpoint; 0: none yet
        meta = folder / "1.json"
        return int((Path(json.loads(meta.read_text())["outputs"]) / "n").read_text()) if meta.is_file() else 0

    try:
        hf.wait_for(lambda: kept() >= 4, timeout=120)
        lost = RayBackend(RaySettings(address=c.address)).poll(run_id)[first].node
        assert lost in ("fault-c1", "fault-c2")
        other = ({"fault-c1", "fault-c2"} - {lost}).pop()
        c.remove_node(workers.pop(lost))
        at_removal = kept()  # the attempt is gone: no checkpoint after this one
        hf.wait_for(lambda: run_state(hf, run_id) in ("succeeded", "failed"), timeout=180)
        data = hf.show(run_id)
        assert data["state"] == "succeeded", data
        (step,) = data["steps"]
        assert (step["node"], step["attempts"]) == (other, 2), step
        logs = hf("logs", run_id, "count", "--attempt", "2").stdout
        ticks = [int(line.rsplit(" ", 1)[1]) for line in logs.splitlines() if "tick " in line]
        # kept outputs are copied once the dump's result is back, which may be a tick after it
        assert ticks and at_removal <= ticks[0] <= at_removal + 2, (at_removal, logs[:400])
        assert ticks == list(range(ticks[0], TICKS + 1))
        assert (step_out(hf, run_id, "count") / "n").read_text().strip() == str(TICKS)
        said = [e.message for e in Store(hf.home / "state.db", read_only=True).events(run_id) if e.step == "count"]
        assert any(f"{second} restored from attempt 1's checkpoint" in m for m in said), said
    finally:
        # the lost attempt's container, which outlived its Ray worker on this one machine
        for name in (first, second):
            subprocess.run(["podman", "rm", "-f", "--ignore", name], env=engine_env(), capture_output=True)
        if (layout := cgroups.detect()) is not None:
            cgroups.remove(layout, first)  # its task never measured it: the node went


# twelve ticks, then on only while its /out holds a file "hold" (an attempt that must still be running
# when it is cancelled, however late the dump caught the first attempt)
SHORT = (
    "i=0; while [ $i -lt 12 ]; do i=$((i+1)); echo tick $i; echo $i > /out/n; sleep 0.5; done;"
    " while [ -e /out/hold ]; do sleep 0.2; done"
)


def _tick(n: Path) -> int:
    """The counter's last tick in its /out (0 before its first, or mid-write)."""
    text = n.read_text().strip() if n.is_file() else ""
    return int(text) if text.isdigit() else 0


def _log_lines(log: Path) -> list[str]:
    return [line.split(" ", 3)[3] for line in log.read_text().splitlines() if line.count(" ") >= 3]


@pytest.mark.skipif(not criu_support().ok, reason=f"CRIU checkpoints do not work here ({criu_support().reason})")
def test_a_ray_step_stopped_by_a_dump_is_checkpointed_not_failed_and_a_new_attempt_continues_from_it(
    cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    c, _ = cluster
    backend = RayBackend(RaySettings(address=c.address, stop_timeout=2))
    r = f"k{time.time_ns() % 10**9}"
    names = [f"hf-{r}-k-{i}" for i in (1, 2, 3, 4)]

    def counter(i: int, restore: Restore | None = None) -> Job:
        j = job(names[i - 1], tmp_path / str(i), SHORT, run_id=r)
        return replace(j, container=replace(j.container, passwd=False), restore=restore)  # as build_spec makes them

    try:
        (tmp_path / "1").mkdir()
        (tmp_path / "1" / "hold").touch()  # the first attempt is still there when its dump comes, however late
        backend.submit(counter(1))
        n = tmp_path / "1" / "n"
        deadline = time.time() + 60
        while _tick(n) < 3:
            assert time.time() < deadline, backend.poll(r)
            time.sleep(0.2)
        image = tmp_path / "1.tar"
        assert backend.checkpoint(names[0], image, leave_running=False) > 0 and image.stat().st_size > 0
        st = wait_done(backend, r, [names[0]])[names[0]]
        assert (st.status, st.node_failed) == ("CHECKPOINTED", False), st
        at = int(n.read_text())  # stopped by the dump: nothing written since
        shutil.copytree(tmp_path / "1", tmp_path / "1.out")
        (tmp_path / "1.out" / "hold").unlink()  # restored without it, attempt 2 ends after tick 12
        restore = Restore(str(image), str(tmp_path / "1.out"), str(tmp_path / "1"), 1, time.time())
        backend.submit(counter(2, restore))
        st2 = wait_done(backend, r, [names[1]])[names[1]]
        assert st2.exit_code == 0, st2
        assert _log_lines(tmp_path / "2" / "log") == [f"tick {i}" for i in range(at + 1, 13)]
        # the same image again (attempt 2 has none of its own), cancelled: stopped as a run is.  Its
        # kept /out holds "hold", so it is still running when cancelled even if the dump caught
        # attempt 1 at tick 11 (seen in CI, on a loaded machine: it ran to its end inside the stop timeout)
        held = tmp_path / "4.out"
        shutil.copytree(tmp_path / "1.out", held)
        (held / "hold").touch()
        backend.submit(counter(4, replace(restore, outputs=str(held))))
        n4 = tmp_path / "4" / "n"
        deadline = time.time() + 60
        # restored, and counting on from its image where there was anything left to count
        while not (
            podman_names("ps", "--filter", f"name=^{names[3]}$", "--format", "{{.Names}}") and _tick(n4) > min(at, 11)
        ):
            assert time.time() < deadline, backend.poll(r)
            time.sleep(0.2)
        assert int((tmp_path / "2" / "n").read_text()) == 12  # attempt 4 writes its own /out, not 2's
        backend.cancel([names[3]])
        st4 = wait_done(backend, r, [names[3]])[names[3]]
        assert (st4.status, st4.exit_code) == ("CANCELLED", 137), st4
        assert not podman_names("ps", "-a", "--filter", f"name=^{names[3]}$", "--format", "{{.Names}}")
        # an image that cannot be restored: the attempt runs from zero and its log says why
        (tmp_path / "bad.tar").write_bytes(b"damaged")
        backend.submit(counter(3, replace(restore, image=str(tmp_path / "bad.tar"))))
        st3 = wait_done(backend, r, [names[2]])[names[2]]
        assert st3.exit_code == 0, st3
        said = _log_lines(tmp_path / "3" / "log")
        assert said[0].startswith("hetflow: restore from") and said[0].endswith("this attempt starts from zero"), said
        assert said[1:] == [f"tick {i}" for i in range(1, 13)]
    finally:
        backend.release(names)
        for name in names:
            subprocess.run(["podman", "rm", "-f", "--ignore", name], env=engine_env(), capture_output=True)


@pytest.mark.skipif(not criu_support().ok, reason=f"CRIU checkpoints do not work here ({criu_support().reason})")
def test_migrate_to_the_other_node_restores_the_step_there(
    hf: Hetflow, cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    # hetflow migrate --to: the dump task stops the step on its node; the next attempt, pinned
    # to the other node, is restored there from that dump (nothing redone)
    c, workers = cluster
    config = _two_nodes(c, workers, tmp_path, "fault-m")
    wf = write(tmp_path, counter_workflow(TICKS, "true"))
    run_id = hf("run", "--detach", "--config", config, wf).stdout.strip()
    first = f"hf-{run_id}-count-1"

    def ticks(attempt: int) -> list[int]:
        logs = hf("logs", run_id, "count", "--attempt", str(attempt)).stdout
        return [int(line.rsplit(" ", 1)[1]) for line in logs.splitlines() if "tick " in line]

    try:
        hf.wait_for(lambda: step_log(hf, run_id, "count").count("tick ") >= 4, timeout=120)
        ran = RayBackend(RaySettings(address=c.address)).poll(run_id)[first].node
        other = ({"fault-m1", "fault-m2"} - {ran}).pop()
        said = hf("migrate", run_id, "count", "--to", other).stdout
        assert f"{first} checkpointed" in said and f"migrated to {other}" in said
        moved_at = max(ticks(1))
        hf.wait_for(lambda: run_state(hf, run_id) in ("succeeded", "failed"), timeout=180)
        (step,) = hf.show(run_id)["steps"]
        assert (step["state"], step["node"], step["attempts"]) == ("succeeded", other, 2), step
        assert ticks(2) == list(range(moved_at + 1, TICKS + 1))
    finally:
        for name in (first, f"hf-{run_id}-count-2"):
            subprocess.run(["podman", "rm", "-f", "--ignore", name], env=engine_env(), capture_output=True)


# --- only the accepted attempt writes (issue 37) ---------------------------------------------

# s and t share a node in the plan (t reads 1 GiB of s's at 10 Mbit/s); s's first attempt waits for
# a file the test writes into its /out, then writes its own bytes
SAME_NODE = f"""apiVersion: hetflow/v1
name: samenode
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, 'if [ "$HETFLOW_ATTEMPT" = 1 ]; then until [ -e /out/go ]; do sleep 0.2; done; fi;
      echo "s from attempt $HETFLOW_ATTEMPT" > /out/o']
    resources: {{cpus: 1, memory: 128Mi}}
    outputs: [o]
    sizes: {{o: 1Gi}}
    estimate: 60s
  t:
    image: {BUSYBOX}
    inputs: {{s: s/o}}
    command: [sh, -c, 'cat /in/s/o > /out/o']
    resources: {{cpus: 1, memory: 128Mi}}
    outputs: [o]
    estimate: 5s
"""


def test_a_step_planned_on_a_removed_node_runs_on_another_and_the_lost_attempt_never_writes(
    hf: Hetflow, cluster: tuple[Cluster, dict[str, Any]], tmp_path: Path
) -> None:
    # s runs on its node when the node is removed; t, planned on that node too, is launched
    # after s's retry: pinned there, Ray refused it ("no alive node") and t failed.  The lost
    # attempt's container outlives its worker on this one machine and ends later, writing only
    # its own folder: the step's outputs and their checksum stay the accepted attempt's
    c, workers = cluster
    for name in ("fault-q1", "fault-q2"):
        workers[name] = c.add_node(**_node_args(name, 2, 0, None, None, name, head=False))
    c.wait_for_nodes()
    text = CLUSTER.replace("fault-p", "fault-q").replace("nodeTypes:", "bandwidth: 10Mbit/s\nnodeTypes:")
    settings = {"backend": "ray", "cluster": write(tmp_path, text, "cluster.yaml"), "ray": {"address": c.address}}
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    run_id = hf("run", "--detach", "--config", config, write(tmp_path, SAME_NODE)).stdout.strip()
    first = f"hf-{run_id}-s-1"
    backend = RayBackend(RaySettings(address=c.address, stop_timeout=2))
    hf.wait_for(lambda: (st := backend.poll(run_id).get(first)) is not None and st.status == "RUNNING", timeout=120)
    filt = f"name=^{first}$"  # its container runs (Ray says RUNNING as the task starts, before podman)
    hf.wait_for(lambda: bool(podman_names("ps", "--filter", filt, "--format", "{{.Names}}")), timeout=120)
    lost = backend.poll(run_id)[first].node
    assert lost in ("fault-q1", "fault-q2")
    other = ({"fault-q1", "fault-q2"} - {lost}).pop()
    staging = Path(hf.show(run_id)["workdir"]) / "attempts" / "s" / "1" / "out"
    try:
        c.remove_node(workers.pop(lost))
        hf.wait_for(lambda: run_state(hf, run_id) in ("succeeded", "failed"), timeout=180)
        data = hf.show(run_id)
        assert data["state"] == "succeeded", data
        t = next(s for s in data["steps"] if s["step"] == "t")
        assert t["node"] == other, t
        said = [e.message for e in Store(hf.home / "state.db", read_only=True).events(run_id) if e.step == "t"]
        assert any(f"on {other} (moved: node {lost} failed in this run)" in m for m in said), said
        # the lost attempt now ends, its worker long gone
        (recorded,) = Store(hf.home / "state.db", read_only=True).outputs(run_id, "s")
        (staging / "go").touch()
        hf.wait_for(lambda: not podman_names("ps", "--filter", filt, "--format", "{{.Names}}"), timeout=60)
        assert (staging / "o").read_text() == "s from attempt 1\n"
        out = step_out(hf, run_id, "s") / "o"
        assert out.read_text() == "s from attempt 2\n" and sha256_of(out) == recorded.sha256
        assert (step_out(hf, run_id, "t") / "o").read_text() == "s from attempt 2\n"
    finally:
        remove_lost(first)
        if (layout := cgroups.detect()) is not None:
            cgroups.remove(layout, first)  # its task never measured it: the node went
