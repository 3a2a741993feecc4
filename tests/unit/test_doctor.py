"""`hetflow doctor` over a store and the fake engine: what a killed executor left is found,
and only that; --repair removes it and leaves the run resumable."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.execute.backends.local.orphans import Monitor
from hetflow.execute.data.paths import container_name
from hetflow.execute.doctor import diagnose, repair
from hetflow.execute.gang.replicas import network_name
from hetflow.state import Lease, RunRecord
from tests.unit.builders import Crash, Outcome, World, gpu, node, world

WORKFLOW = "a:\n  image: x\n  resources: {gpus: 1}\n  outputs: [m]\nb:\n  image: x\n  outputs: [n]\n"


def _crashed(tmp_path: Path, a_runs: float) -> World:
    w = world(
        tmp_path,
        WORKFLOW,
        node_=node(gpus=(gpu(0),)),
        outcomes={"a": [Outcome(0, a_runs, files={"m": b"x"})], "b": [Outcome(0, 1, files={"n": b"y"})]},
    )
    w.clock.crash_at = 1003.0
    with pytest.raises(Crash):
        w.execute(pid=4242)
    return w


def _gone(run: RunRecord) -> bool:
    return run.state == "running"  # pid 4242 is no process here


def _kinds(found: list[object]) -> list[tuple[str, str]]:
    return [(f.kind, f.name) for f in found]  # type: ignore[attr-defined]


def test_a_crashed_run_is_found_stale_and_its_finished_container_a_leftover(tmp_path: Path) -> None:
    w = _crashed(tmp_path, a_runs=10)  # a runs on, b's result stored before the crash
    b = container_name(w.run.id, "b", 1)
    w.engine.start(w.script.starts("b")[0].spec)  # b's container, its batch removal never ran
    w.engine.networks[network_name(container_name(w.run.id, "old", 1))] = True

    found = diagnose(w.store, w.engine, gone=_gone, alive=lambda pid: False)

    a = container_name(w.run.id, "a", 1)
    assert _kinds(found) == [("run", w.run.id), ("container", b), ("network", f"hf-{w.run.id}-old-1-net")]
    assert a in w.engine.containers  # in flight: resume adopts it; its GPU lease stays (container running)
    repair(w.store, w.engine, found, clock=w.clock)
    assert b not in w.engine.containers and a in w.engine.containers and w.engine.networks == {}
    run = w.store.run(w.run.id)
    assert (run.state, run.pid) == ("failed", None) and "hetflow resume" in run.message
    assert [x.container for x in w.store.leases()] == [a]
    assert diagnose(w.store, w.engine, gone=_gone, alive=lambda pid: False) == []


def test_a_live_run_and_another_stores_containers_are_not_touched(tmp_path: Path) -> None:
    w = _crashed(tmp_path, a_runs=10)
    w.engine.start(w.script.starts("b")[0].spec)
    other = w.script.starts("b")[0].spec
    w.engine.containers["hf-zzz-b-1"] = w.engine.containers[other.name].__class__(
        other.__class__(**{**other.__dict__, "name": "hf-zzz-b-1", "labels": {"hetflow.run": "zzz"}}), 0, 0, 0
    )
    assert diagnose(w.store, w.engine, gone=lambda run: False, alive=lambda pid: True) == []


def test_a_lease_of_a_dead_process_on_a_container_that_is_not_running_is_released(tmp_path: Path) -> None:
    w = _crashed(tmp_path, a_runs=10)
    w.store.set_run(w.run.id, state="failed", pid=None)
    w.store.acquire_gpus(["GPU-x"], Lease("", w.run.id, "c", 1, container_name(w.run.id, "c", 1), 99), [])

    found = diagnose(w.store, w.engine, gone=_gone, alive=lambda pid: False)

    assert ("lease", "GPU-x") in _kinds(found)
    repair(w.store, w.engine, found, clock=w.clock)
    assert "GPU-x" not in [x.gpu_uuid for x in w.store.leases()]


def test_only_the_dead_tenant_of_a_shared_gpu_is_released(tmp_path: Path) -> None:
    w = _crashed(tmp_path, a_runs=10)
    w.store.set_run(w.run.id, state="failed", pid=None)
    dead = container_name(w.run.id, "c", 1)
    # the dead tenant first: a GPU -> holder map would keep only the live one and release it
    tenants = [Lease("GPU-s", w.run.id, "c", 1, dead, 99, "time-slicing", 0.5)]
    tenants.append(Lease("GPU-s", "other", "d", 1, "hf-other-d-1", 77, "time-slicing", 0.5))
    for t in tenants:
        assert w.store.acquire([t], [], lambda claim, others: len(others) < 2)

    found = diagnose(w.store, w.engine, gone=_gone, alive=lambda pid: pid == 77)

    assert [f.name for f in found if f.kind == "lease"] == ["GPU-s"]
    repair(w.store, w.engine, found, clock=w.clock)
    assert [x.container for x in w.store.leases() if x.gpu_uuid == "GPU-s"] == ["hf-other-d-1"]


def test_monitors_of_containers_podman_no_longer_lists_are_found_only_for_a_dead_run_of_this_store(
    tmp_path: Path,
) -> None:
    """issue 37: a conmon left by a podman run killed mid-create, its container removed since."""
    w = _crashed(tmp_path, a_runs=10)
    logs = f"{w.run.workdir}/logs"
    lost = Monitor(101, "id1", container_name(w.run.id, "a", 9), (102,), f"{logs}/a.9.log")
    seen = [
        lost,
        Monitor(103, "id2", container_name(w.run.id, "a", 1), (), f"{logs}/a.1.log"),  # listed: a runs on
        Monitor(104, "id3", "hf-zzz-a-1", (), "/elsewhere/a.1.log"),  # another store's run
        Monitor(105, "id4", container_name(w.run.id, "a", 8), (), "/elsewhere/a.8.log"),  # its log is not the run's
        Monitor(106, "id5", "podman-infra", (), ""),  # not hetflow's
    ]

    found = diagnose(w.store, w.engine, gone=_gone, alive=lambda pid: False, watched=lambda: seen)

    assert [(f.kind, f.name) for f in found if f.kind == "process"] == [("process", lost.name)]
    assert "conmon (pid 101) and 1 process(es) under it" in next(f.why for f in found if f.kind == "process")
    assert diagnose(w.store, w.engine, gone=lambda run: False, alive=lambda pid: True, watched=lambda: seen) == []


def test_a_copy_into_the_cache_whose_process_is_gone_is_found_and_removed(tmp_path: Path) -> None:
    w = _crashed(tmp_path, a_runs=10)
    w.store.set_run(w.run.id, state="failed", pid=None)
    folder = w.store.path.parent / "cache" / "objects" / "ab"
    folder.mkdir(parents=True)
    cut, going = folder / f".{'ab' * 32}.tmp999999", folder / f".{'ab' * 32}.tmp4242"
    whole = folder / ("ab" * 32)
    for p in (cut, going, whole):
        p.write_bytes(b"x")

    found = diagnose(w.store, w.engine, gone=_gone, alive=lambda pid: pid == 4242, watched=lambda: [])

    assert [(f.kind, f.name) for f in found if f.kind == "cache"] == [("cache", str(cut))]
    repair(w.store, w.engine, found, clock=w.clock, watched=lambda: [])
    assert (cut.exists(), going.exists(), whole.exists()) == (False, True, True)
