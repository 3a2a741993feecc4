"""The SQLite store: round trips, step transitions, GPU leases, run ids, two processes."""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from hetflow.errors import StateError
from hetflow.state.models import (
    FAILED,
    LAUNCHING,
    PENDING,
    RUNNING,
    SKIPPED,
    STEP_TRANSITIONS,
    STOPPED,
    SUCCEEDED,
    WAITING,
    AttemptRecord,
    Lease,
    OutputRecord,
    StepRecord,
)
from hetflow.state.store import Store

STATES = [PENDING, WAITING, LAUNCHING, RUNNING, SUCCEEDED, FAILED, SKIPPED, STOPPED]


def new_run(store: Store, run_id: str = "r1", steps: tuple[str, ...] = ("a", "b")) -> str:
    store.create_run(
        run_id=run_id,
        name="wf",
        workflow_file="/w/wf.yaml",
        spec_json='{"name": "wf"}',
        params_json='{"size": 4}',
        uid=1000,
        gid=100,
        workdir=f"/home/u/runs/{run_id}",
        steps=steps,
    )
    return run_id


def attempt(run_id: str = "r1", step: str = "a", n: int = 1, **kw: object) -> AttemptRecord:
    fields: dict[str, object] = {
        "run_id": run_id,
        "step": step,
        "attempt": n,
        "variant": "gpu",
        "node": "box",
        "gpus": (0, 2),
        "gpu_uuids": ("GPU-0", "GPU-2"),
        "container": f"hf-{run_id}-{step}-{n}",
        "image": "img:1",
        "state": LAUNCHING,
        "exit_code": None,
        "started": 10.0,
        "ended": None,
        "message": "",
    }
    fields.update(kw)
    return AttemptRecord(**fields)  # type: ignore[arg-type]


def lease(gpu_uuid: str, container: str, pid: int = 100, run_id: str = "r1") -> Lease:
    return Lease(gpu_uuid, run_id, "a", 1, container, pid)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "home" / "state.db")


# --- round trips -----------------------------------------------------------------------


def test_a_new_run_has_pending_steps_in_file_order_and_a_created_event(store: Store) -> None:
    new_run(store, steps=("gen", "pool", "report"))

    run = store.run("r1")
    assert (run.id, run.name, run.state, run.uid, run.gid, run.workdir) == (
        "r1",
        "wf",
        "pending",
        1000,
        100,
        "/home/u/runs/r1",
    )
    assert (run.spec_json, run.params_json, run.pid, run.started, run.ended) == (
        '{"name": "wf"}',
        '{"size": 4}',
        None,
        None,
        None,
    )
    assert store.steps("r1") == [
        StepRecord("r1", name, PENDING, None, None, (), 0, None, None, None, "", None)
        for name in ("gen", "pool", "report")
    ]
    assert [(e.kind, e.step, e.message) for e in store.events("r1")] == [
        ("created", None, "run of wf created from /w/wf.yaml")
    ]


def test_set_step_round_trips_every_field_and_records_the_event(store: Store) -> None:
    new_run(store)

    store.set_step(
        "r1",
        "a",
        state=LAUNCHING,
        variant="gpu",
        node="box",
        gpus=[0, 2],
        attempts=1,
        started=5.0,
        reason="gpu: 2 qualifying GPU(s) free",
        not_before=None,
        event="attempt 1",
    )

    assert store.step("r1", "a") == StepRecord(
        "r1", "a", LAUNCHING, "gpu", "box", (0, 2), 1, None, 5.0, None, "gpu: 2 qualifying GPU(s) free", None
    )
    assert store.step("r1", "b").state == PENDING
    assert [(e.kind, e.step, e.message) for e in store.events("r1")][-1] == (LAUNCHING, "a", "attempt 1")


def test_steps_in_some_states_are_those_alone_in_file_order(store: Store) -> None:
    new_run(store, steps=("a", "b", "c", "d"))
    store.set_step("r1", "d", state=LAUNCHING, gpus=[1], attempts=1)
    store.set_step("r1", "b", state=LAUNCHING, attempts=1)
    store.set_step("r1", "b", state=RUNNING)

    assert store.steps("r1", (LAUNCHING, RUNNING)) == [store.step("r1", "b"), store.step("r1", "d")]
    assert [(s.step, s.state, s.gpus) for s in store.steps("r1", (LAUNCHING, RUNNING))] == [
        ("b", RUNNING, ()),
        ("d", LAUNCHING, (1,)),
    ]
    assert [s.step for s in store.steps("r1", (PENDING,))] == ["a", "c"]
    assert store.steps("r1", (SUCCEEDED,)) == []
    assert [s.step for s in store.steps("r1")] == ["a", "b", "c", "d"]


def test_attempts_round_trip_and_set_attempt_updates_one(store: Store) -> None:
    new_run(store)
    store.add_attempt(attempt(n=1))
    store.add_attempt(attempt(n=2, gpus=(), gpu_uuids=(), variant="cpu"))

    store.set_attempt("r1", "a", 1, state=FAILED, exit_code=3, ended=12.5, message="exited with code 3")

    assert store.attempts("r1", "a") == [
        attempt(n=1, state=FAILED, exit_code=3, ended=12.5, message="exited with code 3"),
        attempt(n=2, gpus=(), gpu_uuids=(), variant="cpu"),
    ]
    assert store.attempts("r1", "b") == []


def test_succeed_step_writes_outputs_attempt_and_step_together(store: Store) -> None:
    new_run(store)
    store.add_attempt(attempt())
    store.set_step("r1", "a", state=LAUNCHING, attempts=1)
    store.set_step("r1", "a", state=RUNNING)
    old = OutputRecord("r1", "a", "stale.txt", "0" * 64, 1, "/x/stale.txt")
    store.succeed_step("r1", "a", 1, [old], 19.0, 0)
    outs = [
        OutputRecord("r1", "a", "m.npy", "ab" * 32, 128, "/home/u/runs/r1/steps/a/out/m.npy"),
        OutputRecord("r1", "a", "dir", "cd" * 32, 7, "/home/u/runs/r1/steps/a/out/dir"),
    ]

    store.succeed_step("r1", "a", 1, outs, 20.0, 0)

    assert store.outputs("r1") == sorted(outs, key=lambda o: o.name)  # replaced, not appended
    assert store.outputs("r1", "b") == []
    assert (store.step("r1", "a").state, store.step("r1", "a").ended, store.step("r1", "a").exit_code) == (
        SUCCEEDED,
        20.0,
        0,
    )
    assert store.attempts("r1", "a")[0].state == SUCCEEDED
    assert store.events("r1")[-1].message == "attempt 1 succeeded; 2 output(s) recorded"


def test_events_after_an_id_are_the_newer_ones(store: Store) -> None:
    new_run(store)
    first = store.events("r1")[0].id
    store.add_event("r1", None, "executor", "executor 7")
    store.add_event("r1", "a", "note", "hello")

    assert [(e.step, e.kind, e.message) for e in store.events("r1", after=first)] == [
        (None, "executor", "executor 7"),
        ("a", "note", "hello"),
    ]


def test_runs_lists_newest_first_and_can_leave_out_ended_runs(store: Store) -> None:
    for rid in ("r1", "r2", "r3"):
        new_run(store, rid)
    store.set_run("r2", state="succeeded", ended=9.0)

    assert [r.id for r in store.runs()] == ["r3", "r2", "r1"]
    assert [r.id for r in store.runs(include_ended=False)] == ["r3", "r1"]
    assert [r.id for r in store.runs(limit=1)] == ["r3"]


def test_set_run_refuses_columns_that_are_not_settable(store: Store) -> None:
    new_run(store)

    with pytest.raises(ValueError, match="cannot set"):
        store.set_run("r1", workdir="/elsewhere")
    assert store.run("r1").workdir == "/home/u/runs/r1"


CLAIMS = [
    pytest.param(None, "pending", True, None, id="unclaimed"),
    pytest.param(7, "running", False, None, id="holder-dead"),
    pytest.param(7, "stopped", True, None, id="holder-alive-but-run-not-running"),
    pytest.param(8, "running", True, None, id="same-pid-again"),
    pytest.param(7, "running", True, "is being executed by process 7", id="holder-alive"),
]


@pytest.mark.parametrize(("holder", "state", "alive", "error"), CLAIMS)
def test_claim_run(store: Store, holder: int | None, state: str, alive: bool, error: str | None) -> None:
    new_run(store)
    store.set_run("r1", state=state, pid=holder)

    if error:
        with pytest.raises(StateError, match=error):
            store.claim_run("r1", 8, lambda pid: alive)
        assert store.run("r1").pid == holder
    else:
        store.claim_run("r1", 8, lambda pid: alive, start=4711)
        assert (store.run("r1").pid, store.run("r1").pid_start, store.run("r1").state) == (8, 4711, "running")
        assert store.run("r1").started is not None


UNKNOWN = [
    pytest.param(lambda s: s.run("nope"), "no run 'nope' in ", id="run"),
    pytest.param(lambda s: s.step("r1", "nope"), "run r1 has no step 'nope'", id="step"),
    pytest.param(lambda s: s.claim_run("nope", 1, lambda p: False), "no run 'nope'", id="claim"),
]


@pytest.mark.parametrize(("call", "message"), UNKNOWN)
def test_unknown_ids_are_state_errors(store: Store, call: Callable[[Store], object], message: str) -> None:
    new_run(store)

    with pytest.raises(StateError, match=message):
        call(store)


def test_set_step_of_an_unknown_step_is_a_state_error(store: Store) -> None:
    new_run(store)

    with pytest.raises(StateError):
        store.set_step("r1", "nope", state=LAUNCHING)


def test_a_damaged_store_file_is_a_state_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database, just some text" * 100)

    damaged = r"state store .*state.db is damaged \(file is not a database\).*\.recover.*or move .* away"
    with pytest.raises(StateError, match=damaged):
        Store(path)


# --- step transitions ----------------------------------------------------------------


def path_to(state: str) -> list[str]:
    """The shortest chain of allowed transitions from pending to ``state``."""
    todo, seen = deque([[PENDING]]), {PENDING}
    while todo:
        chain = todo.popleft()
        if chain[-1] == state:
            return chain[1:]
        for nxt in sorted(STEP_TRANSITIONS[chain[-1]] - seen):
            seen.add(nxt)
            todo.append([*chain, nxt])
    raise AssertionError(f"{state} cannot be reached")


ILLEGAL = [
    pytest.param(PENDING, RUNNING, id="pending-to-running-skips-the-intent"),
    pytest.param(PENDING, SUCCEEDED, id="pending-to-succeeded"),
    pytest.param(PENDING, WAITING, id="pending-to-waiting"),
    pytest.param(WAITING, RUNNING, id="waiting-to-running"),
    pytest.param(RUNNING, PENDING, id="running-to-pending"),
    pytest.param(RUNNING, LAUNCHING, id="running-to-launching"),
    pytest.param(SUCCEEDED, FAILED, id="succeeded-to-failed"),
    pytest.param(SUCCEEDED, LAUNCHING, id="succeeded-to-launching"),
    pytest.param(FAILED, LAUNCHING, id="failed-to-launching"),
    pytest.param(SKIPPED, SUCCEEDED, id="skipped-to-succeeded"),
    pytest.param(STOPPED, RUNNING, id="stopped-to-running"),
]


@pytest.mark.parametrize(("old", "new"), ILLEGAL)
def test_illegal_transition_raises_and_changes_nothing(store: Store, old: str, new: str) -> None:
    new_run(store)
    for state in path_to(old):
        store.set_step("r1", "a", state=state)
    before = store.step("r1", "a")

    with pytest.raises(StateError, match=f"step 'a': illegal transition {old} -> {new}"):
        store.set_step("r1", "a", state=new, reason="should not stick", event="nope")

    assert store.step("r1", "a") == before
    assert "nope" not in [e.message for e in store.events("r1")]


def test_every_pair_of_states_is_allowed_exactly_as_the_table_says(store: Store) -> None:
    pairs = [(old, new) for old in STATES for new in STATES]
    new_run(store, steps=tuple(f"{old}-{new}" for old, new in pairs))
    outcome = {}
    for old, new in pairs:
        name = f"{old}-{new}"
        for state in path_to(old):
            store.set_step("r1", name, state=state)
        try:
            store.set_step("r1", name, state=new)
            outcome[(old, new)] = True
        except StateError:
            outcome[(old, new)] = False

    assert outcome == {(old, new): old == new or new in STEP_TRANSITIONS[old] for old, new in pairs}
    # 23 listed transitions (launching and running list themselves) plus 6 other "stay put"s.
    assert sum(outcome.values()) == 29


# --- GPU leases ----------------------------------------------------------------------


def held(store: Store) -> dict[str, str]:
    return {lease.gpu_uuid: lease.container for lease in store.leases()}


def test_two_holders_cannot_take_the_same_gpu(store: Store) -> None:
    assert store.acquire_gpus(["GPU-0"], lease("", "c1"), []) is True
    assert store.acquire_gpus(["GPU-0"], lease("", "c2"), []) is False
    assert held(store) == {"GPU-0": "c1"}


def test_acquire_is_all_or_nothing(store: Store) -> None:
    store.acquire_gpus(["GPU-1"], lease("", "c1"), [])

    assert store.acquire_gpus(["GPU-0", "GPU-1", "GPU-2"], lease("", "c2"), []) is False
    assert held(store) == {"GPU-1": "c1"}
    assert store.acquire_gpus(["GPU-0", "GPU-2"], lease("", "c2"), []) is True
    assert held(store) == {"GPU-0": "c2", "GPU-1": "c1", "GPU-2": "c2"}


def test_the_same_container_may_take_its_gpus_again(store: Store) -> None:
    # A relaunched intent keeps its deterministic container name.
    store.acquire_gpus(["GPU-0"], lease("", "c1", pid=100), [])

    assert store.acquire_gpus(["GPU-0"], lease("", "c1", pid=200), []) is True
    assert [(x.container, x.pid) for x in store.leases()] == [("c1", 200)]


def test_release_frees_only_that_containers_gpus(store: Store) -> None:
    store.acquire_gpus(["GPU-0", "GPU-1"], lease("", "c1"), [])
    store.acquire_gpus(["GPU-2"], lease("", "c2"), [])

    store.release_gpus("c1")

    assert held(store) == {"GPU-2": "c2"}


STALE = [
    pytest.param(lease("GPU-0", "c1", pid=100), True, id="unchanged-stale-lease-is-dropped"),
    pytest.param(lease("GPU-0", "c1", pid=99), False, id="holder-pid-changed-since-seen"),
    pytest.param(lease("GPU-0", "c0", pid=100), False, id="container-changed-since-seen"),
    pytest.param(lease("GPU-1", "c1", pid=100), False, id="stale-lease-of-another-gpu"),
]


@pytest.mark.parametrize(("seen", "taken"), STALE)
def test_stale_leases_are_dropped_only_when_unchanged(store: Store, seen: Lease, taken: bool) -> None:
    store.acquire_gpus(["GPU-0"], lease("", "c1", pid=100), [])

    assert store.acquire_gpus(["GPU-0"], lease("", "c2", pid=300), [seen]) is taken
    assert held(store) == {"GPU-0": "c2" if taken else "c1"}


def test_adopt_leases_moves_only_that_runs_leases_to_the_new_executor(store: Store) -> None:
    store.acquire_gpus(["GPU-0"], lease("", "c1", pid=100, run_id="r1"), [])
    store.acquire_gpus(["GPU-1"], lease("", "c2", pid=100, run_id="r2"), [])

    store.adopt_leases("r1", 555)

    assert sorted((x.gpu_uuid, x.run_id, x.pid) for x in store.leases()) == [
        ("GPU-0", "r1", 555),
        ("GPU-1", "r2", 100),
    ]


# --- run ids -------------------------------------------------------------------------

PREFIXES = [
    pytest.param("3fa9", "3fa9c2e1", None, id="unique-prefix"),
    pytest.param("3fa9c2e1", "3fa9c2e1", None, id="full-id"),
    pytest.param("3FA9", "3fa9c2e1", None, id="case-insensitive"),
    pytest.param("3f", None, "run id prefix '3f' is ambiguous; give more characters", id="ambiguous"),
    pytest.param("77", None, "no run '77' in ", id="unknown"),
    pytest.param("", None, "give a run id", id="empty"),
]


@pytest.mark.parametrize(("prefix", "found", "error"), PREFIXES)
def test_resolve_run_id(store: Store, prefix: str, found: str | None, error: str | None) -> None:
    for rid in ("3fa9c2e1", "3f01b7d4", "a0c1e2f3"):
        new_run(store, rid)

    if error:
        with pytest.raises(StateError, match=error):
            store.resolve_run_id(prefix)
    else:
        assert store.resolve_run_id(prefix) == found


def test_resolve_run_id_with_an_underscore(store: Store) -> None:
    new_run(store, "nightly_1")

    assert store.resolve_run_id("nightly_") == "nightly_1"


def test_resolve_run_id_prefers_an_exact_id(store: Store) -> None:
    for rid in ("ab", "abc", "abd"):
        new_run(store, rid)

    assert store.resolve_run_id("ab") == "ab"


# --- two processes on one file --------------------------------------------------------


def test_the_store_is_in_wal_mode_and_a_second_store_sees_committed_writes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first, second = Store(path), Store(path)

    new_run(first)
    second.set_step("r1", "a", state=LAUNCHING)

    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert second.run("r1").name == "wf"
    assert first.step("r1", "a").state == LAUNCHING


def test_a_reader_is_not_blocked_by_an_open_write_transaction(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    new_run(store)
    reader = Store(path)  # opened first: opening writes the schema row, so it would wait
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET name = 'renamed' WHERE id = 'r1'")

    try:
        assert reader.run("r1").name == "wf"  # the last committed state, at once
        assert [s.step for s in reader.steps("r1")] == ["a", "b"]
    finally:
        writer.execute("COMMIT")
    assert reader.run("r1").name == "renamed"


def test_racing_processes_never_lease_one_gpu_twice(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).close()  # create the schema once
    wins: list[str] = []
    barrier = threading.Barrier(6)

    def contender(n: int) -> None:
        store = Store(path)  # one connection per "process"
        barrier.wait()
        for gpu in ("GPU-0", "GPU-1", "GPU-2"):
            if store.acquire_gpus([gpu, "GPU-shared"] if gpu == "GPU-1" else [gpu], lease("", f"c{n}"), []):
                wins.append(f"{gpu}:c{n}")
        store.close()

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    leases = Store(path).leases()
    assert sorted(x.gpu_uuid for x in leases) == ["GPU-0", "GPU-1", "GPU-2", "GPU-shared"]
    assert len(wins) == 3  # each GPU went to exactly one contender
    by_gpu = {x.gpu_uuid: x.container for x in leases}
    assert by_gpu["GPU-1"] == by_gpu["GPU-shared"]  # the pair went to one holder, whole


def test_a_store_from_before_backends_gets_the_backend_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, workflow_file TEXT NOT NULL, state TEXT NOT NULL,"
        " created REAL NOT NULL, started REAL, ended REAL, pid INTEGER, uid INTEGER NOT NULL, gid INTEGER NOT NULL,"
        " workdir TEXT NOT NULL, spec_json TEXT NOT NULL, params_json TEXT NOT NULL, message TEXT NOT NULL DEFAULT '');"
        "INSERT INTO runs VALUES ('r1', 'wf', 'f.yaml', 'succeeded', 1.0, 1.0, 2.0, NULL, 0, 0, '/w', '{}', '{}', '');"
    )
    db.commit()
    db.close()
    store = Store(path)
    run = store.run("r1")
    assert (run.backend, run.backend_json, run.state) == ("local", "{}", "succeeded")


def test_opening_a_store_another_process_holds_locked_waits_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes opening a new store at once: one may get "database is locked" at once from
    the switch to WAL (SQLite's busy handler does not wait there); the open tries again."""
    real_open = Store._open
    calls: list[int] = []

    def locked_twice(self: Store, path: Path) -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        real_open(self, path)

    monkeypatch.setattr(Store, "_open", locked_twice)
    store = Store(tmp_path / "state.db")

    assert len(calls) == 3
    assert store.runs() == []
    store.close()


def test_a_store_locked_for_good_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hetflow.state.store as store_module

    def always_locked(self: Store, path: Path) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(Store, "_open", always_locked)
    monkeypatch.setattr(store_module, "OPEN_WAIT", 0.2)
    with pytest.raises(StateError, match=r"stayed locked for 0.2 s; is another hetflow stuck\?"):
        Store(tmp_path / "state.db")


# --- one commit for many writes ----------------------------------------------------------


def test_a_transaction_commits_its_writes_at_once_and_each_failed_write_alone(store: Store, tmp_path: Path) -> None:
    new_run(store)
    reader = Store(tmp_path / "home" / "state.db", read_only=True)
    with store.transaction():
        store.set_step("r1", "a", state=LAUNCHING, attempts=1)
        with pytest.raises(StateError):
            store.set_step("r1", "a", state=PENDING)  # not allowed from LAUNCHING: that write alone undone
        with pytest.raises(StateError):
            store.set_step("r1", "nope", state=LAUNCHING)
        store.set_step("r1", "b", state=LAUNCHING, attempts=1)
        assert reader.step("r1", "a").state == PENDING  # nothing committed yet
    assert (store.step("r1", "a").state, store.step("r1", "b").state) == (LAUNCHING, LAUNCHING)
    assert reader.step("r1", "b").state == LAUNCHING
    with pytest.raises(RuntimeError), store.transaction():
        store.set_step("r1", "a", state=RUNNING)
        raise RuntimeError("the batch failed")
    assert store.step("r1", "a").state == LAUNCHING  # the whole transaction undone
    store.set_step("r1", "a", state=RUNNING)  # and the store writes on as before
    assert reader.step("r1", "a").state == RUNNING
