"""The planner's fast paths give the answers of the slow ones: a timeline's blocked runs
(``MachineTimeline.blocked``, kept up to date booking by booking) against a walk over its
segments, the class sweep (``plan.search.sweep``) against asking every machine, and whole
plans with the fast paths against plans without them."""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.plan.instance import Instance
from hetflow.plan.search import listpass
from hetflow.plan.search.compiled import Choice, Compiled
from hetflow.plan.search.heuristic import heft, plan_heuristic
from hetflow.plan.search.sweep import Tails, plain, sweep
from hetflow.plan.search.timeline import MachineTimeline
from tests.unit.test_planner_builders import instances, random_layered


def walked(tl: MachineTimeline, ready: float, duration: float, cores: float, memory: int, gpus: int) -> float:
    """The earliest start found segment by segment (the timeline's search before blocked runs)."""
    t = ready
    if duration <= 0.0:
        return t
    cap_cores, cap_memory, cap_gpus = tl.cores_cap - cores, tl.memory_cap - memory, tl.gpus_cap - gpus
    i = bisect_right(tl.times, t) - 1
    while True:
        end = t + duration
        j = i
        while j < len(tl.times) and tl.times[j] < end:
            if tl.cores[j] > cap_cores or tl.memory[j] > cap_memory or tl.gpus[j] > cap_gpus:
                break
            j += 1
        else:
            later = None if gpus == 0 else tl.gpu_retry(t, end, gpus)
            if later is None or later == math.inf:
                return t if later is None else math.inf
            t = later
            i = bisect_right(tl.times, t) - 1
            continue
        i = j + 1
        t = tl.times[i]


Booking = tuple[float, float, int, int, int]  # ready, duration, cores, memory, gpus
bookings = st.lists(
    st.tuples(
        st.integers(0, 40).map(float),
        st.sampled_from([0.5, 1.0, 2.5, 4.0, 7.0]),
        st.integers(1, 4),
        st.integers(0, 8),
        st.integers(0, 2),
    ),
    max_size=25,
)


def booked(plan: list[Booking], asks: list[tuple[int, int, int]]) -> MachineTimeline:
    """4 cores, 8 units of memory, 2 GPUs, each booking at its earliest start; the run lists of
    ``asks`` are built first, so that every booking must keep them up to date."""
    tl = MachineTimeline(4, 8, 2)
    for cores, memory, gpus in asks:
        tl.earliest_start(0.0, 1.0, cores, memory, gpus)
    for ready, duration, cores, memory, gpus in plan:
        start = tl.earliest_start(ready, duration, cores, memory, gpus)
        tl.reserve(start, start + duration, cores, memory, gpus)
    return tl


ASKS = [(1, 1, 0), (2, 4, 1), (4, 0, 0), (3, 8, 2)]


@settings(max_examples=60, deadline=None)
@given(bookings)
def test_blocked_runs_kept_booking_by_booking_are_the_runs_built_afresh(plan: list[Booking]) -> None:
    with patch.object(MachineTimeline, "ASKED_AGAIN", 10**9):  # never dropped: every booking grows them
        tl = booked(plan, ASKS)
    assert tl.runs, "the asks built no run lists"
    for key, runs in list(tl.runs.items()):
        assert runs == tl.blocked(key)


@settings(max_examples=60, deadline=None)
@given(bookings)
def test_blocked_runs_dropped_or_grown_are_the_runs_built_afresh(plan: list[Booking]) -> None:
    """With the default rule a booking drops the runs of a short, much-asked timeline and
    grows them otherwise; whatever is kept is still what a fresh walk builds."""
    tl = booked(plan, ASKS)
    for key, runs in list(tl.runs.items()):
        assert runs == tl.blocked(key)
    dropped = MachineTimeline(4, 8, 2)
    for cores, memory, gpus in ASKS:
        dropped.earliest_start(0.0, 1.0, cores, memory, gpus)
    dropped.reserve(0.0, 1.0, 1, 1, 0)  # 4 demands over a 3-segment timeline: dropped
    assert not dropped.runs


@settings(max_examples=150, deadline=None)
@given(bookings, st.integers(0, 45).map(float), st.sampled_from([0.0, 0.5, 3.0, 9.0]), st.sampled_from(ASKS))
def test_earliest_start_by_runs_is_the_segment_walk(
    plan: list[Booking], ready: float, duration: float, ask: tuple[int, int, int]
) -> None:
    tl = booked(plan, ASKS)
    cores, memory, gpus = ask
    assert tl.earliest_start(ready, duration, cores, memory, gpus) == walked(tl, ready, duration, cores, memory, gpus)


def test_a_release_forgets_the_runs() -> None:
    tl = MachineTimeline(2, 4, 0)
    tl.reserve(0, 10, 2, 1, 0)
    assert tl.earliest_start(0, 1, 1, 1, 0) == 10
    tl.release(0, 10, 2, 1, ())
    assert tl.earliest_start(0, 1, 1, 1, 0) == 0


@pytest.mark.parametrize("gpus", [0, 1], ids=["cpu", "gpu"])
@pytest.mark.parametrize("seed", range(6))
def test_sweep_is_every_machine_asked_in_turn(seed: int, gpus: int) -> None:
    rng = random.Random(seed)
    tls = [MachineTimeline(4, 8, 2) for _ in range(6)]
    for tl in tls:
        for _ in range(rng.randint(0, 12)):
            d = rng.choice([1.0, 2.0, 5.0])
            c, g = rng.randint(1, 4), rng.randint(0, 2)
            s = tl.earliest_start(float(rng.randint(0, 20)), d, c, 1, g)
            tl.reserve(s, s + d, c, 1, g)
    ch = Choice(0, 0, rng.choice([1.0, 3.0, 6.0]), 2.0, 2, gpus, 0.0, False)
    assert plain(ch)
    ready = float(rng.randint(0, 15))
    skip = {rng.randrange(6)}
    got, probes = sweep(tls, range(6), skip, ch, 0, ready, None)
    every = [
        (s + ch.runtime, 0, m, 0, s, ch)
        for m, tl in enumerate(tls)
        if m not in skip and (s := tl.earliest_start(ready, ch.runtime, 2.0, 2, gpus)) != math.inf
    ]
    assert got == min(every)
    assert 1 <= probes <= 5  # it stops once a machine can start the task at ready


def test_the_least_tail_follows_the_bookings() -> None:
    tls = [MachineTimeline(4, 8, 0) for _ in range(3)]
    tails = Tails(tls, 1)
    for m, finish in ((0, 5.0), (1, 3.0), (2, 9.0)):
        tails.booking(0, m)
        tls[m].reserve(0, finish, 1, 1, 0)
    assert tails.least(0, range(3)) == 3.0
    tails.booking(0, 1)
    tls[1].reserve(3, 12, 1, 1, 0)
    assert tails.least(0, range(3)) == 5.0


def slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner without its fast paths: no class sweep, every start walked segment by segment."""
    monkeypatch.setattr(listpass, "plain", lambda ch: False)
    monkeypatch.setattr(
        MachineTimeline,
        "earliest_start",
        lambda tl, ready, duration, cores, memory, gpus, limit=math.inf, slot=None: (
            s if (s := walked(tl, ready, duration, cores, memory, gpus)) + max(duration, 0.0) <= limit else math.inf
        ),
    )


def placements(inst: Instance, planner: str) -> dict[str, tuple[str, str, float, tuple[int, ...]]]:
    plan = heft(inst) if planner == "heft" else plan_heuristic(inst, seed=3, effort=60)
    return {k: (p.variant, p.machine, p.start, p.gpus) for k, p in plan.placements.items()}


@pytest.mark.parametrize("planner", ["heft", "heuristic"])
@pytest.mark.parametrize(("steps", "machines", "seed"), [(120, 16, 1), (200, 64, 2)], ids=["16-nodes", "64-nodes"])
def test_plans_are_the_plans_without_the_fast_paths(
    monkeypatch: pytest.MonkeyPatch, steps: int, machines: int, seed: int, planner: str
) -> None:
    inst = random_layered(steps, machines, seed=seed)
    fast = placements(inst, planner)
    with monkeypatch.context() as m:
        slow(m)
        assert placements(inst, planner) == fast


@settings(max_examples=30, deadline=None)
@given(instances(one_task_per_machine=False, max_tasks=7))
def test_small_plans_are_the_plans_without_the_fast_paths(inst: Instance) -> None:
    fast = placements(inst, "heft")
    with pytest.MonkeyPatch.context() as m:
        slow(m)
        assert placements(inst, "heft") == fast
    assert Compiled(inst).n == len(fast)


def oct_by_option(problem: Compiled) -> list[tuple[float, ...]]:
    """PEFT's table as the paper writes it: per edge and class, the least over every option."""
    k = len(problem.classes)
    table: list[tuple[float, ...]] = [()] * problem.n
    for t in reversed(problem.order()):
        row = [0.0] * k
        for s, comm in problem.children[t]:
            for c in range(k):
                best = min(table[s][ch.cls] + ch.runtime + (comm if ch.cls != c else 0.0) for ch in problem.choices[s])
                row[c] = max(row[c], best)
        table[t] = tuple(row)
    return table


@pytest.mark.parametrize(("steps", "machines", "seed"), [(60, 16, 1), (300, 64, 2), (40, 4, 3)])
def test_the_optimistic_cost_table_is_the_per_option_formula(steps: int, machines: int, seed: int) -> None:
    from hetflow.plan.search.ranks import optimistic_cost

    problem = Compiled(random_layered(steps, machines, seed=seed))
    assert optimistic_cost(problem) == oct_by_option(problem)


ALIKE = """
apiVersion: hetflow/v1
name: alike
steps:
  a: {image: busybox, command: [x], resources: {cpus: 1, memory: 1Gi}, estimate: 10s}
  b: {image: busybox, command: [x], resources: {cpus: 1, memory: 1Gi}, estimate: 10s}
  c: {image: busybox, command: [x], resources: {cpus: 1, memory: 1Gi}, estimate: 10s, needs: [a, b]}
"""


def test_alike_steps_share_options_but_not_a_measured_run_time() -> None:
    """plan.build builds the options of alike steps once; a profile's measured time for one of
    them must stay that step's own."""
    from hetflow.plan.build import build_instance
    from hetflow.plan.instance import MachineClass
    from hetflow.spec import parse_workflow

    wf = parse_workflow(ALIKE, "alike.yaml").workflow
    gib8 = 8 * 2**30
    classes = (MachineClass("slow", count=1, cores=4, memory=gib8), MachineClass("fast", 1, 4, gib8, speed=2.0))
    inst = build_instance(wf, classes, bandwidth=1e9, profile={("b", "default", "fast"): 1.5})
    runtimes = {t.name: {o.machine_class: o.runtime for o in t.options} for t in inst.tasks}
    estimated = {"slow": 10.0, "fast": 5.0}
    assert runtimes == {"a": estimated, "b": {"slow": 10.0, "fast": 1.5}, "c": estimated}
