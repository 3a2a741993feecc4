"""Waiting out a busy store: the retry every write transaction of ``Store`` goes through.

Another process holding the store's write lock (a second ``hetflow run`` writing, or a
person's ``sqlite3 state.db 'BEGIN EXCLUSIVE;'`` left open) makes SQLite answer "database is
locked" once its own per-call wait, ``busy_timeout``, runs out.  A run must not die of that:
``retry_busy`` tries again after a jittered, doubling pause and says, on stderr, what it waits
for, once and then every ``notice_every`` seconds.  It waits for good unless
``HETFLOW_STORE_WAIT`` sets a limit (a run is better late than dead; ``hetflow stop`` and
Ctrl-C still end it).

The settings come from the environment:

    HETFLOW_STORE_BUSY_TIMEOUT  seconds SQLite itself waits per call (default 5)
    HETFLOW_STORE_WAIT          seconds a write waits in all before it fails (default: no limit)
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hetflow.errors import StateError

T = TypeVar("T")

BUSY_TIMEOUT = 5.0  # seconds; SQLite's own wait per call before it answers "locked"
NOTICE_EVERY = 30.0  # seconds between two "state store busy" messages of one wait
FIRST_PAUSE = 0.05  # seconds: the first pause between two tries; doubles up to MAX_PAUSE
MAX_PAUSE = 2.0
# In WAL mode a writer holds an fcntl write lock on byte 120 of the -shm file (WAL_WRITE_LOCK:
# sqlite's wal.c, WAL_WRITE_LOCK 0 at WALINDEX_LOCK_OFFSET 120), listed in /proc/locks (proc(5)).
_WAL_WRITE_LOCK_BYTE = 120


@dataclass(frozen=True)
class BusySettings:
    busy_timeout: float = BUSY_TIMEOUT
    wait: float | None = None  # None: wait for good
    notice_every: float = NOTICE_EVERY
    first_pause: float = FIRST_PAUSE
    max_pause: float = MAX_PAUSE

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BusySettings:
        env = os.environ if env is None else env
        timeout = _seconds(env, "HETFLOW_STORE_BUSY_TIMEOUT", BUSY_TIMEOUT)
        wait = _seconds(env, "HETFLOW_STORE_WAIT", None)
        return cls(busy_timeout=BUSY_TIMEOUT if timeout is None else timeout, wait=wait)


def _seconds(env: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise StateError(f"{name}={raw!r} is not a number of seconds; set it to e.g. 5, or unset it")
    return value


def is_busy(exc: BaseException) -> bool:
    """Whether SQLite said another connection holds the lock (SQLITE_BUSY, SQLITE_LOCKED)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", "")
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc) or "busy" in str(exc)


def lock_holder(db: Path, proc_locks: Path = Path("/proc/locks")) -> int | None:
    """The pid holding the store's WAL write lock, when /proc/locks tells (Linux), else None."""
    try:
        st = os.stat(f"{db}-shm")
        text = proc_locks.read_text()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in text.splitlines():
        # "1: POSIX  ADVISORY  WRITE 4731 fe:00:9986765 120 120"
        f = line.split()
        if len(f) < 8 or f[3] != "WRITE" or f[5] != dev or f[4] == str(os.getpid()):
            continue
        try:
            start, end = int(f[6]), f[7]
            if start <= _WAL_WRITE_LOCK_BYTE and (end == "EOF" or int(end) >= _WAL_WRITE_LOCK_BYTE):
                return int(f[4])
        except ValueError:
            continue
    return None


def busy_message(db: Path, waited: float, holder: int | None) -> str:
    who = f" (pid {holder})" if holder else ""
    return (
        f"state store busy: waiting for the lock on {db} held by another process{who} for {waited:.0f} s"
        " (the run goes on once it is released)"
    )


def say_on_stderr(message: str) -> None:
    sys.stderr.write(f"hetflow: {message}\n")
    sys.stderr.flush()


def retry_busy(
    call: Callable[[], T],
    *,
    db: Path,
    settings: BusySettings,
    say: Callable[[str], None] = say_on_stderr,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[float], float] = lambda top: random.uniform(0.0, top),
    holder: Callable[[Path], int | None] = lock_holder,
) -> T:
    """``call()``, tried again while SQLite answers "locked", with "full jitter" backoff (a
    pause drawn from [0, min(max_pause, first_pause * 2**n)]: AWS Architecture Blog,
    "Exponential Backoff And Jitter", 2015), so writers that collide do not collide again in
    step.  The first message comes after the first failed try (SQLite has then waited its
    ``busy_timeout`` already), the next every ``notice_every`` s; past ``settings.wait`` (when
    set) it fails with a StateError naming the store."""
    start = clock()
    said_at: float | None = None
    tries = 0
    while True:
        try:
            return call()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        now = clock()
        waited = now - start  # SQLite's own busy_timeout inside each call included
        if settings.wait is not None and waited >= settings.wait:
            who = holder(db)
            raise StateError(
                f"the state store {db} stayed locked by another process{f' (pid {who})' if who else ''} for"
                f" {waited:.0f} s (HETFLOW_STORE_WAIT={settings.wait:g}); end that process or raise the limit"
            )
        if said_at is None or now - said_at >= settings.notice_every:
            say(busy_message(db, waited, holder(db)))
            said_at = now
        sleep(jitter(min(settings.max_pause, settings.first_pause * 2**tries)))
        tries += 1
