"""The runner's cache pass (``execute.cachepass``): a rerun takes every step with a sound entry
in one turn and records it as a single hit always was (the step succeeded, no attempt, the
reason naming the run and key, one event); a damaged entry runs its step; cached and uncached
steps mix; a step looked up in vain is taken once another step of the run adds its entry."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hetflow.execute.data.cache import ResultCache
from hetflow.execute.data.fencing import NOBODY, Fenced, check, grant, holder
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.compose import compose_runner
from hetflow.execute.run.dispatching.dispatch import Decision
from hetflow.execute.run.options import ProcessSeams, RunOptions
from hetflow.execute.run.runner import Runner
from hetflow.execute.submit.record import create_run
from hetflow.spec import Resources, Step, Workflow
from hetflow.state import SUCCEEDED, CachedResult, OutputRecord
from tests.unit.builders import Outcome, World, load_steps, world

WIDE = """
a0: {image: img, command: [w, "0"], outputs: [o.txt]}
a1: {image: img, command: [w, "1"], outputs: [o.txt]}
a2: {image: img, command: [w, "2"], outputs: [o.txt]}
mid: {image: img, command: [m], inputs: {x: a0/o.txt, y: a1/o.txt}, outputs: [m.txt]}
last: {image: img, command: [l], inputs: {m: mid/m.txt}, outputs: [r.txt]}
"""
FILES = {
    "a0": {"o.txt": b"zero\n"},
    "a1": {"o.txt": b"one\n"},
    "a2": {"o.txt": b"two\n"},
    "mid": {"m.txt": b"mid\n"},
    "last": {"r.txt": b"last\n"},
}


@dataclass
class Rerun:
    w: World
    first: str
    second: str
    runner: Runner


def _runner(w: World, run_id: str, body: str, workflow: Workflow | None = None) -> Runner:
    return compose_runner(
        store=w.store,
        engine=w.engine,
        node=w.node,
        workflow=workflow or load_steps(body).workflow,
        run=w.store.run(run_id),
        options=RunOptions(config=w.config, cache=ResultCache(w.store, w.home / "cache")),
        seams=ProcessSeams(clock=w.clock, sleep=w.clock.sleep, pid=4242, alive=lambda p: False),
    )


def _two_runs(
    tmp_path: Path,
    body: str = WIDE,
    second_body: str | None = None,
    damage: str = "",
    files: dict[str, dict[str, bytes]] = FILES,
) -> Rerun:
    """Run ``body`` once for real (fake engine; step -> the files it writes), damage the object
    of the output ``damage`` names (STEP/FILE) if any, then create the second run of
    ``second_body`` (default: the same)."""
    w = world(tmp_path, body, outcomes={s: [Outcome(files=f)] for s, f in files.items()})
    w.engine.images.add("img")
    assert _runner(w, w.run.id, body).execute() == "succeeded"
    if damage:
        step, name = damage.split("/")
        record = next(o for o in w.store.outputs(w.run.id, step) if o.name == name)
        obj = ResultCache(w.store, w.home / "cache").object_path(record.sha256)
        obj.chmod(0o644)
        obj.write_bytes(b"changed\n")
    text = second_body or body
    second = create_run(w.store, load_steps(text), w.home, os.getuid(), os.getgid())
    return Rerun(w, w.run.id, second.id, _runner(w, second.id, text))


def test_a_rerun_takes_every_step_from_the_cache_in_one_turn(tmp_path: Path) -> None:
    r = _two_runs(tmp_path)
    started, now = len(r.w.script.log), r.w.clock()

    assert r.runner.execute() == "succeeded"

    assert len(r.w.script.log) == started  # no container
    assert r.w.clock() == now  # a chain (a0, a1 -> mid -> last) is taken in one pass: the runner never slept
    steps = r.w.store.steps(r.second)
    assert [(s.step, s.state, s.attempts, s.exit_code) for s in steps] == [
        (n, SUCCEEDED, 0, 0) for n in ("a0", "a1", "a2", "mid", "last")
    ]
    assert all(s.reason.startswith(f"cached: from run {r.first} (key ") for s in steps)
    succeeded = [(e.step, e.message) for e in r.w.store.events(r.second) if e.kind == "succeeded" and e.step]
    assert succeeded == [(s.step, s.reason) for s in steps]  # one event each, in the runner's order
    out = RunPaths(Path(r.w.store.run(r.second).workdir))
    assert (out.step_out("last") / "r.txt").read_bytes() == b"last\n"
    assert [(o.step, o.name, o.path) for o in r.w.store.outputs(r.second)] == sorted(
        (s, n, str(out.step_out(s) / n)) for s, f in FILES.items() for n in f
    )


def _commits_of_a_cached_rerun(tmp_path: Path, n: int) -> int:
    body = "".join(f"s{i}: {{image: img, command: [w, '{i}'], outputs: [o.txt]}}\n" for i in range(n))
    r = _two_runs(tmp_path, body, files={f"s{i}": {"o.txt": f"{i}\n".encode()} for i in range(n)})
    commits: list[str] = []
    r.w.store._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    assert r.runner.execute() == "succeeded"
    assert all(s.reason.startswith("cached") for s in r.w.store.steps(r.second))
    return len(commits)


def test_the_steps_taken_are_recorded_in_one_transaction(tmp_path: Path) -> None:
    # the store's commits do not grow with the steps (each hit used to pay two)
    assert _commits_of_a_cached_rerun(tmp_path / "3", 3) == _commits_of_a_cached_rerun(tmp_path / "12", 12)


def test_a_damaged_entry_runs_its_step_and_the_rest_stays_cached(tmp_path: Path) -> None:
    r = _two_runs(tmp_path, damage="a1/o.txt")
    started = len(r.w.script.log)

    assert r.runner.execute() == "succeeded"

    assert [s.step for s in r.w.script.log[started:]] == ["a1"]
    steps = {s.step: s for s in r.w.store.steps(r.second)}
    assert steps["a1"].attempts == 1 and not steps["a1"].reason.startswith("cached")
    # a1 ran again with the same bytes: what reads it keeps its key
    assert all(steps[s].reason.startswith("cached: from run") for s in ("a0", "a2", "mid", "last"))
    notes = [e.message for e in r.w.store.events(r.second) if e.step == "a1" and "damaged" in e.message]
    assert len(notes) == 1 and notes[0].endswith("was damaged; running")


@pytest.mark.parametrize(
    ("edit", "ran"),
    [
        pytest.param(('[w, "2"]', '[w, "two"]'), ["a2"], id="one-command-changed"),
        pytest.param(("[m]", "[m, again]"), ["mid", "last"], id="a middle step changed-its-child-reads-new-bytes"),
    ],
)
def test_cached_and_uncached_steps_mix(tmp_path: Path, edit: tuple[str, str], ran: list[str]) -> None:
    changed = WIDE.replace(*edit)
    r = _two_runs(tmp_path, second_body=changed)
    if "mid" in ran:
        r.w.script.outcomes["mid"] = [Outcome(files={"m.txt": b"other mid\n"})]
    started = len(r.w.script.log)

    assert r.runner.execute() == "succeeded"

    assert [s.step for s in r.w.script.log[started:]] == ran
    steps = r.w.store.steps(r.second)
    assert all(s.state == SUCCEEDED for s in steps)
    cached = [s.step for s in steps if s.reason.startswith(f"cached: from run {r.first}")]
    assert cached == [s for s in ("a0", "a1", "a2", "mid", "last") if s not in ran]


def test_a_step_missed_early_is_taken_once_a_sibling_adds_its_entry(tmp_path: Path) -> None:
    # a fan-out's items are keyed by their step, not their index: four items of one command share a key
    body = "s:\n  image: img\n  foreach: [a, a, a, a]\n  command: [same]\n  outputs: [o.txt]\n  resources: {cpus: 2}\n"
    w = world(tmp_path, body, outcomes={f"s.{i}": [Outcome(files={"o.txt": b"x\n"})] for i in range(4)})
    w.engine.images.add("img")

    assert _runner(w, w.run.id, body).execute() == "succeeded"

    # 4 cores, 2 a step: two run; the other two, looked up in vain then, are taken once those ended
    assert sorted(s.step for s in w.script.log) == ["s.0", "s.1"]
    reasons = {s.step: s.reason for s in w.store.steps(w.run.id)}
    assert [n for n, why in reasons.items() if why.startswith(f"cached: from run {w.run.id}")] == ["s.2", "s.3"]


def test_cache_steps_records_what_cache_step_records_for_each(tmp_path: Path) -> None:
    body = "a: {image: img, command: [x]}\nb: {image: img, command: [y]}\n"
    bulk, single = world(tmp_path / "bulk", body), world(tmp_path / "single", body)

    def outputs(x: World, step: str) -> list[OutputRecord]:
        return [OutputRecord(x.run.id, step, "o.txt", "ab" * 32, 3, f"/out/{step}/o.txt")]

    bulk.store.cache_steps(
        bulk.run.id, [CachedResult(s, "default", tuple(outputs(bulk, s)), f"cached: {s}", "", 5.0) for s in "ab"]
    )
    for s in "ab":
        single.store.cache_step(single.run.id, s, "default", outputs(single, s), f"cached: {s}")

    def seen(x: World) -> list[tuple[object, ...]]:
        steps = [(s.step, s.state, s.variant, s.exit_code, s.reason, s.attempts) for s in x.store.steps(x.run.id)]
        events = [(e.step, e.kind, e.message) for e in x.store.events(x.run.id) if e.kind == "succeeded"]
        outs = [(o.step, o.name, o.sha256, o.size, o.path) for o in x.store.outputs(x.run.id)]
        return [*steps, *events, *outs]

    assert seen(bulk) == seen(single)
    assert [s.state for s in bulk.store.steps(bulk.run.id)] == [SUCCEEDED, SUCCEEDED]


def test_an_item_whose_own_resources_never_fit_is_not_taken_with_its_siblings(tmp_path: Path) -> None:
    # the pass decides the items of a fan-out once; an item with resources of its own (a
    # settings override of one item) is decided alone: here it can never run on 4 cores
    body = "s:\n  image: img\n  foreach: [a, b, c]\n  command: [w, '{{ item }}']\n  outputs: [o.txt]\n"
    r = _two_runs(tmp_path, body, files={f"s.{i}": {"o.txt": b"x\n"} for i in range(3)})
    wf = r.runner.wf
    big = wf.steps["s.1"].model_copy(update={"resources": Resources(cpus=64)})
    runner = _runner(r.w, r.second, body, wf.model_copy(update={"steps": {**wf.steps, "s.1": big}}))

    assert runner.execute() == "failed"

    steps = {s.step: s for s in r.w.store.steps(r.second)}
    assert steps["s.1"].state == "failed" and "no variant can run on this machine" in steps["s.1"].reason
    assert all(steps[s].reason.startswith(f"cached: from run {r.first}") for s in ("s.0", "s.2"))


def test_items_waiting_for_capacity_are_asked_about_once_a_turn(tmp_path: Path) -> None:
    # 40 items, 4 run at once: the schedule asks the dispatch about each launch and once a
    # turn for all the items alike that must wait, not about every waiting item every turn
    body = "s:\n  image: img\n  foreach: {range: 40}\n  command: [w, '{{ item }}']\n  resources: {cpus: 1}\n"
    w = world(tmp_path, body)
    runner = w.runner()
    asked: list[str] = []
    decide = runner.dispatch.decide

    def counting(name: str, step: Step, view: Any = None) -> Decision:
        asked.append(name)
        return decide(name, step, view)

    runner.dispatch.decide = counting  # type: ignore[method-assign]
    runner.decisions.dispatch = runner.dispatch
    assert runner.execute() == "succeeded"
    assert len(w.script.log) == 40
    turns = len({s.at for s in w.script.log})
    assert turns == 10
    assert len(asked) <= 40 + 2 * turns  # each launch, and at most a wait or two a turn (not ~40 a turn)


def test_a_result_taken_from_the_cache_takes_the_fencing_token_from_any_attempt(tmp_path: Path) -> None:
    """A step whose earlier attempt still held the token when its executor died (lost, not yet
    given up) gets its result from the cache: that attempt's late rename is refused from then on
    (issue 37: only the accepted result is in the step's folder)."""
    r = _two_runs(tmp_path)
    out = RunPaths(Path(r.w.store.run(r.second).workdir)).step_out("a0")
    grant(out, 1)  # attempt 1 of a0 was granted in an earlier session of this run
    assert r.runner.execute() == "succeeded"
    assert holder(out) == NOBODY
    with pytest.raises(Fenced):
        check(out, out.parent.parent.parent / "attempts" / "a0" / "1" / "out", 1)
