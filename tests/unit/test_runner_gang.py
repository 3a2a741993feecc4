"""Gang steps on the local runner (FakeEngine, fake clock, fake GPUs: no GPU is used).

Every replica starts at once with its own GPUs and the launch contract, on one private
network; a gang never starts partially; one failed replica stops the others and the gang
is retried whole; GPUs are picked by topology."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.execute.data.paths import RunPaths
from hetflow.execute.engine import ContainerSpec
from hetflow.execute.gang.replicas import LABEL_RANK, gang_state, layout, replica_env, replica_of
from hetflow.inventory import GpuLink
from hetflow.spec import Gang
from hetflow.state.models import FAILED, SUCCEEDED
from tests.unit.builders import Crash, Outcome, World, gpu, node, world

GANG = """
train:
  image: trainer
  resources: {cpus: 1, memory: 1Gi, gpus: 1}
  outputs: [model.txt]
  retries: 1
  gang: {replicas: 3, launcher: torch, port: 29400}
"""


def four_gpus(links: tuple[GpuLink, ...] = ()) -> World:
    return node(cpus=8, memory_gib=32, gpus=tuple(gpu(i) for i in range(4))).model_copy(update={"gpu_links": links})


def replicas(w: World, attempt: int = 1) -> list[ContainerSpec]:
    specs = [s.spec for s in w.script.starts("train") if s.attempt == attempt]
    return sorted(specs, key=lambda s: int(s.labels[LABEL_RANK]))


def test_every_replica_starts_at_once_with_its_own_gpus_and_the_torch_contract(tmp_path: Path) -> None:
    w = world(tmp_path, GANG, node_=four_gpus(), outcomes={"train": [Outcome(duration=5, files={"model.txt": b"m"})]})
    assert w.execute() == "succeeded"
    starts = [s for s in w.script.starts("train")]
    assert len(starts) == 3 and len({s.at for s in starts}) == 1  # all three in one go
    specs = replicas(w)
    job = specs[0].name
    assert [s.name for s in specs] == [job, f"{job}-r1", f"{job}-r2"]
    assert {s.network_name for s in specs} == {f"{job}-net"}
    devices = [s.devices for s in specs]
    assert len({d for dev in devices for d in dev}) == 3  # disjoint: one GPU each
    for i, s in enumerate(specs):
        assert s.env["NVIDIA_VISIBLE_DEVICES"] == "0"  # renumbered from 0 inside, as a single step
        assert {k: s.env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")} == {
            "RANK": str(i),
            "WORLD_SIZE": "3",
            "LOCAL_RANK": str(i),
            "LOCAL_WORLD_SIZE": "3",
            "NODE_RANK": "0",
        }
        assert (s.env["MASTER_ADDR"], s.env["MASTER_PORT"]) == (job, "29400")
        assert (s.env["HETFLOW_RANK"], s.env["HETFLOW_WORLD_SIZE"]) == (str(i), "3")
    outs = [next(m.source for m in s.mounts if m.target == "/out") for s in specs]
    assert len(set(outs)) == 3  # rank 0's /out is the step's; the others write scratch
    paths = RunPaths(Path(w.run.workdir))
    assert specs[1].log_path == str(paths.rank_log("train", 1, 1))
    assert (paths.step_out("train") / "model.txt").read_bytes() == b"m"
    step = w.step("train")
    assert (step.state, step.attempts) == (SUCCEEDED, 1)
    assert w.engine.networks == {}  # the network went with the containers
    assert w.engine.containers == {}


def test_a_gang_waits_until_all_its_gpus_are_free_and_never_starts_partially(tmp_path: Path) -> None:
    body = (
        GANG
        + """
hog:
  image: hog
  resources: {cpus: 1, memory: 1Gi, gpus: 2}
"""
    )
    w = world(
        tmp_path,
        body,
        node_=four_gpus(),
        outcomes={"hog": [Outcome(duration=20)], "train": [Outcome(duration=5, files={"model.txt": b"m"})]},
    )
    assert w.execute() == "succeeded"
    hog = w.script.starts("hog")[0]
    trains = w.script.starts("train")
    if trains[0].at < hog.at:  # the gang went first: the hog must then wait for it
        assert hog.at >= trains[0].until
    else:
        assert all(t.at >= hog.until for t in trains)  # 3 GPUs were never free beside the hog
    assert len({t.at for t in trains}) == 1


def test_one_failed_replica_stops_the_others_and_the_gang_is_retried_whole(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        GANG,
        node_=four_gpus(),
        outcomes={"train": [Outcome(duration=30), Outcome(duration=5, files={"model.txt": b"m"})]},
    )
    behave = w.engine.behave

    def rank1_dies_first_time(spec: ContainerSpec) -> tuple[int, float, dict[str, bytes]]:
        code, duration, files = behave(spec)
        if spec.labels[LABEL_RANK] == "1" and spec.labels["hetflow.attempt"] == "1":
            return 7, 2.0, {}
        return code, duration, dict(files)

    w.engine.behave = rank1_dies_first_time
    assert w.execute() == "succeeded"
    first, second = replicas(w, 1), replicas(w, 2)
    assert len(first) == 3 and len(second) == 3  # the whole gang ran again
    t1 = min(s.at for s in w.script.starts("train") if s.attempt == 1)
    t2 = min(s.at for s in w.script.starts("train") if s.attempt == 2)
    assert t2 - t1 < 30  # rank 0 and 2 were stopped, not waited for (they would run 30 s)
    attempts = w.store.attempts(w.run.id, "train")
    assert [(a.attempt, a.exit_code) for a in attempts] == [(1, 7), (2, 0)]


def test_a_gang_that_fails_every_time_fails_the_step(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        GANG.replace("retries: 1", "retries: 0"),
        node_=four_gpus(),
        outcomes={"train": [Outcome(exit_code=3)]},
    )
    assert w.execute() == "failed"
    assert w.step("train").state == FAILED
    assert w.engine.networks == {}


def test_gpus_are_picked_by_nvlink_for_each_replica(tmp_path: Path) -> None:
    # NVLink only inside pairs (0,2) and (1,3): each 2-GPU replica must get one pair.
    links = tuple(
        GpuLink(
            a=a, b=b, kind="NV" if (a, b) in ((0, 2), (1, 3)) else "SYS", nvlinks=4 if (a, b) in ((0, 2), (1, 3)) else 0
        )
        for a in range(4)
        for b in range(a + 1, 4)
    )
    body = """
train:
  image: trainer
  resources: {cpus: 1, memory: 1Gi, gpus: 2}
  gang: {replicas: 2, gpu_link: nvlink}
"""
    w = world(tmp_path, body, node_=four_gpus(links))
    # a topology-blind pick (lowest indices, in chunks) would give [0, 1] and [2, 3]: no NVLink
    assert w.execute() == "succeeded"
    sets = [sorted(h for h, _ in s.devices if "nvidia" in h) for s in replicas(w)]
    assert [[p.rsplit("nvidia", 1)[1] for p in s] for s in sets] == [["0", "2"], ["1", "3"]]


def test_nvlink_that_this_machine_lacks_is_refused_before_anything_runs(tmp_path: Path) -> None:
    body = """
train:
  image: trainer
  resources: {cpus: 1, memory: 1Gi, gpus: 2}
  gang: {replicas: 2, gpu_link: nvlink}
"""
    w = world(tmp_path, body, node_=four_gpus())  # no links known: no NVLink
    assert w.execute() == "failed"
    assert "gpu_link: nvlink" in (w.step("train").reason or "")
    assert w.script.log == []


def test_per_node_below_replicas_cannot_run_on_one_machine(tmp_path: Path) -> None:
    body = """
train:
  image: trainer
  gang: {replicas: 4, per_node: 2}
"""
    w = world(tmp_path, body, node_=four_gpus())
    assert w.execute() == "failed"
    assert "per_node: 2 spreads the gang's 4 replicas over 2 nodes, and this machine is one" in (
        w.step("train").reason or ""
    )


def test_the_contract_by_node_and_the_folded_state() -> None:
    ranks = layout(["a", "b", "c", "d"], ["n1", "n1", "n2", "n2"])
    env = replica_env(Gang(replicas=4, launcher="torch"), ranks, 3)
    assert (env["NODE_RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_ADDR"]) == ("1", "1", "2", "a")
    assert "MASTER_ADDR" not in replica_env(Gang(replicas=4), ranks, 0)  # launcher none: hetflow's own only
    assert replica_of("hf-ab12cd34-train-2-r3") == ("hf-ab12cd34-train-2", 3)
    assert replica_of("hf-ab12cd34-train-r3-2") is None
    assert gang_state({0: (True, None, "running"), 1: (False, 0, "exited")}, 2).running
    failed = gang_state({0: (True, None, "running"), 1: (False, 9, "exited")}, 2)
    assert (failed.running, failed.exit_code, failed.failed_rank) == (False, 9, 1)
    assert gang_state({0: (False, 0, "exited")}, 2).exit_code == 137  # a replica gone: never healthy


# --- resume: per gang --------------------------------------------------------------------


def crash_at(w: World, when: float) -> None:
    w.clock.crash_at = when
    with pytest.raises(Crash):
        w.execute(pid=4242)


def test_a_gang_still_whole_after_a_crash_is_adopted_not_started_again(tmp_path: Path) -> None:
    w = world(tmp_path, GANG, node_=four_gpus(), outcomes={"train": [Outcome(duration=10, files={"model.txt": b"m"})]})
    crash_at(w, 1003.0)
    assert w.execute(pid=4343) == "succeeded"
    assert len(w.script.starts("train")) == 3  # the three replicas, once
    assert [(a.attempt, a.exit_code) for a in w.store.attempts(w.run.id, "train")] == [(1, 0)]


def test_a_gang_that_lost_a_replica_while_down_is_stopped_and_rerun_whole(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        GANG,
        node_=four_gpus(),
        outcomes={"train": [Outcome(duration=60), Outcome(duration=5, files={"model.txt": b"m"})]},
    )
    crash_at(w, 1003.0)
    lost = next(n for n in w.engine.containers if n.endswith("-r2"))
    w.engine.remove([lost])  # replica 2 vanished while hetflow was down
    assert w.execute(pid=4343) == "succeeded"
    first = [s for s in w.script.starts("train") if s.attempt == 1]
    second = [s for s in w.script.starts("train") if s.attempt == 2]
    assert len(first) == 3 and len(second) == 3  # rerun whole
    assert min(s.at for s in second) < 1000 + 60  # the partial gang was stopped, not waited for
    assert [(a.attempt, a.exit_code) for a in w.store.attempts(w.run.id, "train")] == [(1, 137), (2, 0)]


def test_a_gang_that_finished_while_down_is_not_rerun(tmp_path: Path) -> None:
    w = world(tmp_path, GANG, node_=four_gpus(), outcomes={"train": [Outcome(duration=4, files={"model.txt": b"m"})]})
    crash_at(w, 1002.0)
    w.clock.now = 1010.0  # the replicas ended while no executor ran
    assert w.execute(pid=4343) == "succeeded"
    assert len(w.script.starts("train")) == 3
    assert w.step("train").attempts == 1


def test_a_gpu_container_is_pinned_to_the_cpus_near_its_gpus(tmp_path: Path) -> None:
    near = [
        gpu(i).model_copy(update={"numa_node": i // 2, "cpu_affinity": "0-3" if i < 2 else "4-7"}) for i in range(4)
    ]
    n = node(cpus=8, memory_gib=32, gpus=tuple(near))
    body = """
train:
  image: trainer
  resources: {cpus: 1, memory: 1Gi, gpus: 2}
  gang: {replicas: 2, gpu_link: same-numa}
"""
    w = world(tmp_path, body, node_=n)
    assert w.execute() == "succeeded"
    assert [s.cpuset for s in replicas(w)] == ["0-3", "4-7"]  # each replica on its GPUs' NUMA node
