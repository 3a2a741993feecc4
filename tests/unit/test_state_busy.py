"""The store's busy retry (``state.guards.busy``) with a fake clock and sleep, and the store's
integrity guards (``state.guards.integrity``) on real files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hetflow.errors import StateError
from hetflow.state import NEW_STORE_ENV, Store, StoreDamaged
from hetflow.state.guards.busy import BusySettings, busy_message, lock_holder, retry_busy
from hetflow.state.guards.integrity import id_file, refuse_replacing

LOCKED = sqlite3.OperationalError("database is locked")


class FakeTime:
    """A clock that moves only when slept on, or when a try 'waits' its busy_timeout."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def run(
    fails: int, settings: BusySettings, *, per_try: float = 1.0, error: Exception = LOCKED
) -> tuple[str | BaseException, FakeTime, list[str], int]:
    """retry_busy over a call that fails ``fails`` times, each after ``per_try`` s."""
    t, said, tries = FakeTime(), [], [0]

    def call() -> str:
        tries[0] += 1
        if tries[0] <= fails:
            t.now += per_try  # SQLite's own busy_timeout inside the call
            raise error
        return "done"

    try:
        result: str | BaseException = retry_busy(
            call,
            db=Path("/h/state.db"),
            settings=settings,
            say=said.append,
            clock=t.clock,
            sleep=t.sleep,
            jitter=lambda top: top,  # the top of the jitter range: deterministic
            holder=lambda db: 4242,
        )
    except (StateError, sqlite3.OperationalError) as exc:
        result = exc
    return result, t, said, tries[0]


FOREVER = BusySettings(busy_timeout=1.0, wait=None, notice_every=10.0, first_pause=0.1, max_pause=0.8)

RETRIES = [
    # fails, settings, result, pauses, messages (the waited seconds they name)
    pytest.param(0, FOREVER, "done", [], [], id="free-store-no-wait-no-message"),
    pytest.param(1, FOREVER, "done", [0.1], [1], id="one-busy-try-one-message"),
    pytest.param(4, FOREVER, "done", [0.1, 0.2, 0.4, 0.8], [1], id="pauses-double"),
    pytest.param(6, FOREVER, "done", [0.1, 0.2, 0.4, 0.8, 0.8, 0.8], [1], id="pauses-capped"),
    # each try: 1 s in SQLite + the pause; a message at 1 s, then at the first failed try 10 s later
    pytest.param(12, FOREVER, "done", [0.1, 0.2, 0.4] + [0.8] * 9, [1, 11.9], id="message-every-10s"),
    pytest.param(
        50,
        BusySettings(busy_timeout=1.0, wait=5.0, notice_every=10.0, first_pause=0.1, max_pause=0.8),
        "stayed locked by another process (pid 4242) for 6 s (HETFLOW_STORE_WAIT=5)",
        [0.1, 0.2, 0.4, 0.8],
        [1],
        id="a-set-limit-fails-clearly",
    ),
]


@pytest.mark.parametrize(("fails", "settings", "result", "pauses", "messages"), RETRIES)
def test_retry_busy(
    fails: int, settings: BusySettings, result: str, pauses: list[float], messages: list[float]
) -> None:
    got, t, said, _ = run(fails, settings)

    assert str(got) == result if result == "done" else result in str(got)
    assert t.slept == pytest.approx(pauses)
    assert said == [busy_message(Path("/h/state.db"), w, 4242) for w in messages]
    assert all("(pid 4242)" in s and "state store busy" in s for s in said)


def test_an_error_other_than_busy_is_not_retried() -> None:
    got, t, said, tries = run(3, FOREVER, error=sqlite3.OperationalError("no such table: x"))

    assert (str(got), t.slept, said, tries) == ("no such table: x", [], [], 1)


SETTINGS = [
    pytest.param({}, BusySettings(), None, id="defaults"),
    pytest.param({"HETFLOW_STORE_BUSY_TIMEOUT": "0.5", "HETFLOW_STORE_WAIT": "600"}, None, None, id="set"),
    pytest.param({"HETFLOW_STORE_WAIT": "soon"}, None, "HETFLOW_STORE_WAIT='soon' is not a number", id="not-a-number"),
    pytest.param({"HETFLOW_STORE_BUSY_TIMEOUT": "-1"}, None, "HETFLOW_STORE_BUSY_TIMEOUT='-1'", id="negative"),
]


@pytest.mark.parametrize(("env", "want", "error"), SETTINGS)
def test_busy_settings_from_env(env: dict[str, str], want: BusySettings | None, error: str | None) -> None:
    if error:
        with pytest.raises(StateError, match=error):
            BusySettings.from_env(env)
        return
    got = BusySettings.from_env(env)
    if want is not None:
        assert got == want
    else:
        assert (got.busy_timeout, got.wait) == (0.5, 600.0)


def test_the_lock_holder_is_read_from_proc_locks(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Store(db)  # leaves state.db-shm while open
    st = (tmp_path / "state.db-shm").stat()
    import os

    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: POSIX  ADVISORY  READ 77 {dev} 123 123\n"
        f"2: POSIX  ADVISORY  WRITE 4242 {dev} 120 120\n"
        "3: POSIX  ADVISORY  WRITE 99 00:00:1 120 120\n"
    )

    assert lock_holder(db, locks) == 4242
    locks.write_text(f"1: POSIX  ADVISORY  READ 77 {dev} 120 120\n")
    assert lock_holder(db, locks) is None


# --- a missing, empty or damaged store ------------------------------------------------


MISSING = [
    pytest.param("fresh-home", {}, None, id="a-new-home-just-works"),
    pytest.param("id-file", {}, r"state.db is missing, but .*state.db.id says a store was created here", id="deleted"),
    pytest.param("id-file+empty", {}, r"state.db is empty \(0 bytes\)", id="truncated"),
    pytest.param("runs", {}, r"is missing, but .*/runs holds the folders of earlier runs", id="run-folders"),
    pytest.param("id-file", {NEW_STORE_ENV: "1"}, None, id="accepted-by-env"),
]


@pytest.mark.parametrize(("setup", "env", "error"), MISSING)
def test_a_missing_store_where_one_was_is_refused(
    tmp_path: Path, setup: str, env: dict[str, str], error: str | None
) -> None:
    db = tmp_path / "state.db"
    if "id-file" in setup:
        id_file(db).write_text("abc\n")
    if "empty" in setup:
        db.write_bytes(b"")
    if setup == "runs":
        (tmp_path / "runs" / "r1").mkdir(parents=True)

    if error:
        with pytest.raises(StateError, match=error) as info:
            refuse_replacing(db, env)
        assert "HETFLOW_NEW_STORE=1" in str(info.value) and "Restore" in str(info.value)
        assert not db.exists() or db.stat().st_size == 0
    else:
        refuse_replacing(db, env)


def test_a_new_store_leaves_its_marker_and_an_old_one_gets_it(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Store(db).close()
    marker = id_file(db).read_text().strip()
    row = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    assert (len(marker), row[0]) == (32, marker)

    id_file(db).unlink()  # a store made by a hetflow before the marker
    Store(db).close()
    assert id_file(db).read_text().strip() == marker


def test_a_page_damaged_store_is_refused_for_writing(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    s = Store(db)
    s._db.execute("CREATE TABLE filler (x TEXT)")
    s._db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,) for _ in range(400)])
    s.close()
    data = bytearray(db.read_bytes())
    page = 4096
    data[page * 20 : page * 20 + 64] = b"\xff" * 64  # a page in the middle of the filler table
    db.write_bytes(bytes(data))

    with pytest.raises(StoreDamaged, match=r"is damaged \(.*\); hetflow will not write to it.*\.recover"):
        Store(db)
    assert db.read_bytes() == bytes(data)


def test_a_store_write_waits_for_a_lock_held_by_another_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real retry in Store._tx: the write waits, says so, and lands once the lock goes."""
    import threading

    monkeypatch.setenv("HETFLOW_STORE_BUSY_TIMEOUT", "0.1")
    db = tmp_path / "state.db"
    store = Store(db)
    said: list[str] = []
    released = threading.Event()
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")

    def say(message: str) -> None:
        said.append(message)
        if not released.is_set():
            holder.execute("COMMIT")  # released once the waiting was said
            released.set()

    store.say = say
    store.remember_hash("k", "abc")

    assert released.is_set() and store.file_hash("k") == "abc"
    assert len(said) == 1 and said[0].startswith(f"state store busy: waiting for the lock on {db}")
    assert "(pid " not in said[0]  # the holder is this very process: not named as another


def test_a_write_to_a_store_on_a_full_disk_is_a_store_full_error(tmp_path: Path) -> None:
    """SQLITE_FULL (here: max_page_count reached, which SQLite reports as a full database)."""
    from hetflow.state import StoreFull

    store = Store(tmp_path / "state.db")
    store.remember_hash("before", "kept")
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count={pages}")

    with pytest.raises(StoreFull, match=r"the state store cannot be written: the disk at /.* is full"):
        for i in range(200):
            store.remember_hash(f"k{i}", "x" * 1000)
    assert store.file_hash("before") == "kept"  # what was recorded stays, and reads
    assert not store._db.in_transaction  # the failed write was rolled back


def test_a_writer_keeps_a_reserve_that_a_full_disk_can_have_back(tmp_path: Path) -> None:
    from hetflow.state.guards.integrity import RESERVE, reserve_file

    db = tmp_path / "state.db"
    store = Store(db)
    assert reserve_file(db).stat().st_size == RESERVE
    assert store.release_reserve() and not reserve_file(db).exists()
    assert not store.release_reserve()  # given once
    Store(db).close()
    assert reserve_file(db).stat().st_size == RESERVE
