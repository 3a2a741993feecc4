"""Debian's slowhttptest against a service on loopback, and what another client sees meanwhile
(the tests in test_slow_clients.py and ``python -m bench.proxy.registry --only-slow-clients``).

    with slow_attack(Attack("headers", 1100, 40), url) as attack:   # slowhttptest in the background
        wait_for(lambda: held(port) >= 50, 60, "the attack on")      # its connections are on the service
        during = probe(base, path)                                  # from 127.0.0.2, a fresh connection each
        ...

The attack always comes from 127.0.0.1 (slowhttptest cannot pick its address) and the probes
from 127.0.0.2, another client: what is measured is whether one address's slow connections
cost everyone else.  ``held(port)`` counts the connections the server side holds from
127.0.0.1, read from the kernel's table (``ss``), whatever process serves the port.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ["Attack", "HeldWatch", "Probes", "Running", "held", "held_steadily", "probe", "slow_attack", "wait_for"]

ATTACKER = "127.0.0.1"
PROBER = "127.0.0.2"
MODES = {"headers": "-H", "body": "-B", "read": "-X"}


@dataclass(frozen=True)
class Attack:
    """One slowhttptest run: ``mode`` headers (slowloris), body (R-U-Dead-Yet) or read (a
    small TCP window, read a few bytes a second), ``connections`` opened at ``rate`` a
    second, the whole run bounded to ``seconds``."""

    mode: str
    connections: int
    seconds: int
    rate: int = 200
    body_bytes: int = 8192  # the Content-Length a slow body promises
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. Authorization for the read

    def argv(self, url: str, stats: Path) -> list[str]:
        argv = ["slowhttptest", MODES[self.mode], "-c", str(self.connections), "-r", str(self.rate)]
        argv += ["-l", str(self.seconds), "-g", "-o", str(stats), "-v", "1", "-u", url]
        if self.mode == "headers":
            argv += ["-i", "5"]  # a header line every 5 s: never done, never quite silent
        elif self.mode == "body":
            argv += ["-i", "5", "-s", str(self.body_bytes)]  # a few bytes every 5 s
        else:
            argv += ["-w", "1", "-y", "512", "-n", "1", "-z", "32", "-k", "3"]  # 32 bytes a second
        if self.headers:
            # slowhttptest has no option for a header, but writes its cookie as it is given:
            # the header rides on the Cookie line.
            argv += ["-j", "x=1" + "".join(f"\r\n{k}: {v}" for k, v in self.headers.items())]
        return argv


@dataclass
class Running:
    """A slowhttptest run in progress."""

    attack: Attack
    proc: subprocess.Popen[bytes]
    log: Path

    def running(self) -> bool:
        return self.proc.poll() is None

    def said(self) -> str:
        """What it printed (its last report last), less its terminal colours."""
        return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", self.log.read_text(errors="replace"))


@contextmanager
def slow_attack(attack: Attack, url: str) -> Iterator[Running]:
    """slowhttptest running ``attack`` against ``url`` until the block ends (then it is ended;
    it ends by itself after ``attack.seconds``)."""
    if shutil.which("slowhttptest") is None:
        raise RuntimeError("slowhttptest is not installed (apt-get install slowhttptest; make deps installs it)")
    work = Path(tempfile.mkdtemp(prefix="hf-slowhttp-"))
    log = work / "out.log"
    with log.open("wb") as out:
        # stdbuf: its reports go out a line at a time (a file would get them in 4 KiB blocks)
        argv = ["stdbuf", "-oL", *attack.argv(url, work / "stats")]
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Running(attack, proc, log)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def held(port: int, peer: str = ATTACKER) -> int:
    """Established connections to ``port`` from ``peer`` that the server has accepted (a
    process owns them): those still in the kernel's accept queue are not the server's yet, and
    on a loaded machine a few hundred can wait there a moment."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    # columns: Recv-Q Send-Q local peer users:((...)), the last only once a process owns it
    rows = [line.split() for line in out.splitlines()]
    return sum(1 for row in rows if len(row) >= 5 and row[3].startswith(f"{peer}:") and row[4].startswith("users:("))


def held_steadily(port: int, samples: int = 5) -> int:
    """``held`` as it stands: the median of a few counts 0.2 s apart (a connection the server
    accepts and at once refuses is established for an instant)."""
    counts = []
    for _ in range(samples):
        counts.append(held(port))
        time.sleep(0.2)
    return sorted(counts)[samples // 2]


class HeldWatch:
    """``held`` sampled every 0.2 s on a thread while the block runs; ``most()`` is the largest
    median of five samples in a row: the most the server held steadily at any time of the
    attack, not only at one moment of its ramp (a connection accepted and at once refused is
    established for an instant, and a median of five passes over it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.samples: list[int] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True, name="held-watch")

    def _sample(self) -> None:
        while not self.done.is_set():
            self.samples.append(held(self.port))
            self.done.wait(0.2)

    def __enter__(self) -> HeldWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)

    def most(self) -> int:
        runs = [sorted(self.samples[i : i + 5])[2] for i in range(len(self.samples) - 4)]
        return max(runs, default=max(self.samples, default=0))


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.2)


@dataclass(frozen=True)
class Probes:
    """What one client saw: each answer's seconds (200s only) and every other outcome."""

    seconds: tuple[float, ...]
    failures: tuple[str, ...]

    def p(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("inf")

    def summary(self) -> dict[str, float | int]:
        return {
            "p50_ms": round(statistics.median(self.seconds) * 1000, 2) if self.seconds else -1,
            "p99_ms": round(self.p(0.99) * 1000, 2),
            "answered": len(self.seconds),
            "failed": len(self.failures),
        }


def probe(base: str, path: str, headers: Mapping[str, str] | None = None, n: int = 150, gap: float = 0.03) -> Probes:
    """``n`` GETs of ``path`` from 127.0.0.2, each on a new connection (as a new podman or
    browser would come), ``gap`` seconds apart; a non-200 or a transport error is a failure."""
    seconds: list[float] = []
    failures: list[str] = []
    transport = httpx.HTTPTransport(local_address=PROBER, limits=httpx.Limits(max_keepalive_connections=0))
    with httpx.Client(transport=transport, timeout=10) as client:
        for _ in range(n):
            start = time.perf_counter()
            try:
                answer = client.get(base + path, headers=dict(headers or {}))
                elapsed = time.perf_counter() - start
                if answer.status_code == 200:
                    seconds.append(elapsed)
                else:
                    failures.append(f"{answer.status_code} {answer.text[:120]}")
            except httpx.HTTPError as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            time.sleep(gap)
    return Probes(tuple(seconds), tuple(failures))
