"""Issue 38's HTTP server, chosen by measurement: every candidate serving the registry
proxy, measured the same way in one run:

    python -m bench.proxy.registry_candidates [--json] [--only NAME ...]

Each candidate serves the same app (``create_app`` over ``FakeRegistry``, default limits, a
1 KiB and a 1 MiB blob warmed into the cache, as ``bench.proxy.registry_server``'s bare
proxy builds it) in a process of its own, started by that module's ``_proxy``:

    bare       uvicorn alone as ``serve`` ran it before issue 38 (limit_concurrency 1,024)
    uvicorn    uvicorn with every limit it offers
    hypercorn  hypercorn (asyncio): keep_alive_timeout, read_timeout, ...
    granian    granian (Rust's hyper, ASGI): http1 header_read_timeout, backpressure, ...
    nginx      Debian's nginx in front of uvicorn on a Unix socket, with a generated config
    haproxy    the front as shipped (``hetflow.front``: HAProxy before uvicorn)

For each: another client's p50/p99 (127.0.0.2, a new connection each) with no attack (the
anchor), then under slowhttptest's slow headers (1,100 connections), slow body (1,000) and
slow read (1,000) from 127.0.0.1, by ``tests/integration/test_slow_clients.py``'s own
``_attacked`` (its anchor before and after, the connections held when the attack is on,
whether every one was cut within 45 s, 75 s for the slow read, while the attack still ran),
and that test's checks; then ``wrk -t2 -c32 -d10s`` on both blobs, with the CPU time the
server's processes spent per request.  A candidate that is not installed is a row saying how
to install it.  The servers themselves (uvicorn with its limits, hypercorn, granian, nginx)
are ``bench.proxy.registry_candidate_servers``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tests.integration.slowhttp import held, probe, wait_for
from tests.integration.test_slow_clients import (
    ATTACKS,
    BOUND_S,
    CUT_WITHIN_S,
    PER_ADDRESS,
    Outcome,
    Target,
    _attacked,
)

from bench.proxy.registry_candidate_servers import BACKLOG, HEADER_BYTES, LIMITS, SBIN
from bench.proxy.registry_server import _proxy, _wrk

__all__ = ["CANDIDATES", "Candidate", "main", "measure", "print_tables"]

SERVERS = "bench.proxy.registry_candidate_servers"
WRK_S = 10  # wrk -d

INSTALL = {
    "uvicorn": "pip install uvicorn",
    "hypercorn": ".venv/bin/pip install hypercorn",
    "granian": ".venv/bin/pip install granian",
    "nginx": "apt-get install -y nginx-light",
    "haproxy": "apt-get install -y haproxy",
}
PROGRAMS = ("nginx", "haproxy")  # the rest are Python modules


@dataclass(frozen=True)
class Candidate:
    name: str
    label: str
    command: tuple[str, ...]  # python -m ... STATE --blob=...: prints the proxy's JSON line
    needs: str  # a Python module, or one of PROGRAMS
    settings: str  # what it runs with, and what it has no option for

    def missing(self) -> str | None:
        """None when what it needs is here, else a line saying how to install it."""
        if self.needs in PROGRAMS:
            here = shutil.which(self.needs, path=SBIN) is not None
        else:
            here = importlib.util.find_spec(self.needs) is not None
        return None if here else f"not installed: {INSTALL[self.needs]}"


L = LIMITS
CANDIDATES = (
    Candidate(
        "bare",
        "uvicorn alone (before)",
        ("bench.proxy.registry_server", "bare-proxy"),
        "uvicorn",
        f"limit_concurrency={L.max_connections}, the rest uvicorn's defaults (as `serve` ran before issue 38)",
    ),
    Candidate(
        "uvicorn",
        "uvicorn, all its limits",
        (SERVERS, "uvicorn"),
        "uvicorn",
        f"http=h11, limit_concurrency={L.max_connections}, timeout_keep_alive={L.keepalive_timeout_s:g}, "
        f"h11_max_incomplete_event_size={HEADER_BYTES}, backlog={BACKLOG}; nothing bounds reading a request's "
        "headers or body or writing an answer (its keep-alive timer starts after a first answer), nothing per "
        "address (limit_max_requests restarts a worker: no limit here)",
    ),
    Candidate(
        "hypercorn",
        "hypercorn",
        (SERVERS, "hypercorn"),
        "hypercorn",
        f"keep_alive_timeout={L.keepalive_timeout_s:g} (its idle timer runs from accept until a request's headers "
        f"are whole: a header deadline), read_timeout={L.request_timeout_s:g} (per read, only while a request is "
        f"read), h11_max_incomplete_size={HEADER_BYTES}, backlog={BACKLOG}; no body deadline, no write timeout, "
        "no cap on connections, nothing per address",
    ),
    Candidate(
        "granian",
        "granian (ASGI)",
        (SERVERS, "granian"),
        "granian",
        f"1 worker, HTTP/1, http1 header_read_timeout={L.request_timeout_s * 1000:g} ms, keep_alive on, "
        f"backpressure={L.max_connections}, backlog={BACKLOG}; no option for a body deadline, a write timeout, an "
        "HTTP/1 keep-alive timeout, a connection cap or anything per address",
    ),
    Candidate(
        "nginx",
        "nginx + uvicorn (Unix socket)",
        (SERVERS, "nginx"),
        "nginx",
        f"client_header_timeout {L.request_timeout_s:g}s, client_body_timeout {L.request_timeout_s:g}s, "
        f"send_timeout {L.client_idle_timeout_s:g}s, keepalive_timeout {L.keepalive_timeout_s:g}s, limit_conn "
        f"{L.max_connections_per_client} per $binary_remote_addr (429), client_max_body_size "
        f"{L.max_body_bytes // 1024}k, upstream max_conns {L.max_connections}, 2 workers; client_body_timeout and "
        "send_timeout run between two reads or writes (not deadlines); limit_conn counts a connection once its "
        "request headers arrived",
    ),
    Candidate(
        "haproxy",
        "HAProxy + uvicorn (shipped)",
        ("hetflow.registry.fakes.fakeproxy",),
        "haproxy",
        f"hetflow.front: timeout http-request {L.request_timeout_s:g}s with http-buffer-request (headers and body), "
        f"timeout client {L.client_idle_timeout_s:g}s, http-keep-alive {L.keepalive_timeout_s:g}s, "
        f"{L.max_connections_per_client} connections per address in any state, {L.max_requests_per_client} "
        f"requests per address (429), {L.max_connections} at the app (2 s queue, 503)",
    ),
)
BY_NAME = {c.name: c for c in CANDIDATES}


# --- measuring ------------------------------------------------------------------------------


def _target(info: dict[str, Any]) -> Target:
    base = str(info["url"])
    urls = {mode: base + path for mode, path in info["urls"].items()}
    return Target(base, int(base.rsplit(":", 1)[1]), info["path"], info["headers"], urls, info["body_bytes"])


def _verdict(outcome: Outcome, mode: str) -> str:
    """test_slow_clients' four checks, each that fails named ("pass" when none does)."""
    bound = max(BOUND_S, 2 * outcome.before.p(0.99))
    failed = [
        f"{len(outcome.during.failures)} failed" if outcome.during.failures else "",
        f"p99 over {bound * 1000:.0f} ms" if outcome.during.p(0.99) > bound else "",
        f"held over {PER_ADDRESS}" if outcome.held > PER_ADDRESS else "",
        "" if outcome.cut else f"not all cut within {CUT_WITHIN_S[mode]:g} s",
    ]
    return "; ".join(f for f in failed if f) or "pass"


@contextmanager
def _sampled(port: int) -> Iterator[list[tuple[float, int]]]:
    """``held(port)`` every half second while the block runs: (seconds, count) pairs."""
    samples: list[tuple[float, int]] = []
    done, start = threading.Event(), time.monotonic()

    def sample() -> None:
        while not done.wait(0.5):
            samples.append((time.monotonic() - start, held(port)))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        done.set()
        thread.join()


def _span(samples: list[tuple[float, int]]) -> float | None:
    """Seconds from the first attack connection seen to the first count of none after the most."""
    if not samples or max(n for _, n in samples) == 0:
        return None
    peak = max(range(len(samples)), key=lambda i: samples[i][1])
    first = next(t for t, n in samples if n > 0)
    return next((round(t - first, 1) for t, n in samples[peak:] if n == 0), None)


def _attack_row(target: Target, mode: str) -> dict[str, Any]:
    try:
        with _sampled(target.port) as samples:
            outcome = _attacked(target, mode)
            with contextlib.suppress(AssertionError):  # the next attack meets a server that let this one go
                wait_for(lambda: held(target.port) == 0, 60, "the attack's connections gone")
    except (AssertionError, OSError, RuntimeError, httpx.HTTPError, subprocess.SubprocessError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return {
        **outcome.during.summary(),
        "held": outcome.held,
        "most_held": max((n for _, n in samples), default=0),
        "cut": outcome.cut,
        "cut_after_s": _span(samples) if outcome.cut else None,
        "before_p99_ms": outcome.before.summary()["p99_ms"],
        "after_p99_ms": outcome.after.summary()["p99_ms"],
        "failures": sorted(set(f[:80] for f in outcome.during.failures))[:3],
        "verdict": _verdict(outcome, mode),
    }


def _cpu_s(root: int) -> float:
    """CPU seconds (user and system) of ``root`` and every process under it, so far: the
    candidate's whole server (its app, nginx's or HAProxy's processes, granian's worker)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid], ticks[pid] = int(fields[1]), int(fields[11]) + int(fields[12])
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree, grew = tree | more, bool(more)
    return sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def _throughput(url: str, headers: dict[str, str], pid: int) -> dict[str, float]:
    """``wrk``'s figures, and the server's CPU milliseconds per request meanwhile: a cost that
    other work on the machine does not inflate as it does the wall-clock rate."""
    before = _cpu_s(pid)
    figures = _wrk(url, headers, seconds=WRK_S)
    spent = _cpu_s(pid) - before
    return {**figures, "cpu_ms": round(spent * 1000 / max(1.0, figures["requests_s"] * WRK_S), 3)}


def measure(candidate: Candidate, work: Path) -> dict[str, Any]:
    """One candidate's rows: anchor, each attack, wrk per blob, the load average around them."""
    missing = candidate.missing()
    if missing is not None:
        return {"missing": missing}
    rows: dict[str, Any] = {"load": [round(os.getloadavg()[0], 2)]}
    try:
        with _proxy(work, candidate.name, command=candidate.command) as info:
            target = _target(info)
            rows["anchor"] = probe(target.base, target.path, target.headers, n=100).summary()
            for mode in ATTACKS:
                rows[mode] = _attack_row(target, mode)
            blobs = {"1 KiB": info["path"], "1 MiB": info["big_path"]}
            rows["wrk"] = {
                blob: _throughput(target.base + path, target.headers, int(info["pid"])) for blob, path in blobs.items()
            }
    except Exception as exc:  # one candidate's failure is its row, not the end of the run
        rows["error"] = f"{type(exc).__name__}: {exc}"[:300]
    rows["load"].append(round(os.getloadavg()[0], 2))
    return rows


def _ms(value: Any) -> str:
    return "-" if value is None or value == -1 else f"{value:g}"


def _attack_lines(label: str, rows: dict[str, Any]) -> list[str]:
    if "missing" in rows or ("error" in rows and "anchor" not in rows):
        return [f"| {label} | {rows.get('missing') or rows['error']} | | | | | | |"]
    a = rows["anchor"]
    asked = a["failed"] + a["answered"]
    lines = [f"| {label} | none (anchor) | {_ms(a['p50_ms'])} | {_ms(a['p99_ms'])} | {a['failed']} of {asked} | | | |"]
    for mode, attack in ATTACKS.items():
        r = rows.get(mode, {"error": rows.get("error", "not run")})
        what = f"slow {mode}, {attack.connections:,}"
        if "error" in r:
            lines.append(f"| {label} | {what} | {r['error']} | | | | | |")
            continue
        p99 = f"{_ms(r['p99_ms'])} ({_ms(r['before_p99_ms'])} / {_ms(r['after_p99_ms'])})"
        failed = f"{r['failed']} of {r['failed'] + r['answered']}"
        cut = f"yes, {_ms(r['cut_after_s'])} s" if r["cut"] else "no"
        held_ = f"{r['held']} / {r['most_held']}"
        lines.append(f"| {label} | {what} | {_ms(r['p50_ms'])} | {p99} | {failed} | {held_} | {cut} | {r['verdict']} |")
    return lines


def print_tables(figures: dict[str, Any]) -> None:
    """Markdown: the attacks, the throughput, each candidate's settings."""
    meta = figures["machine"]
    print(
        f"{meta['cpus']} CPUs; load average (1 min) {meta['load_start']} at the start, {meta['load_end']} at the end: "
        "other work shares this machine, so compare candidates within this run, and each attack row with its own "
        "anchors (p99 before / after it)."
    )
    print(
        "\nAnother client (127.0.0.2, a new connection each, 150 requests) while slowhttptest holds slow connections "
        "from 127.0.0.1. held: attack connections on the server once the attack was on (the test's count) / the most "
        "seen, every 0.5 s; all cut: every one cut within 45 s (75 s for the slow read) while the attack still ran, "
        "and how long after the first one arrived; checks: tests/integration/test_slow_clients.py's four.\n"
    )
    columns = ("candidate", "attack", "p50 ms", "p99 ms (anchor before / after)", "failed", "held (on / most)")
    print(f"| {' | '.join(columns)} | all cut | checks |\n|{'---|' * (len(columns) + 2)}")
    for name, rows in figures["candidates"].items():
        print("\n".join(_attack_lines(BY_NAME[name].label, rows)))
    print(f"\nwrk -t2 -c32 -d{WRK_S}s against a cached blob (from 127.0.0.1):\n")
    wrk_columns = ("candidate", "blob", "requests/s", "MiB/s", "p99 ms", "non-2xx", "server CPU ms a request")
    print(f"| {' | '.join(wrk_columns)} | load (1 min) start / end |\n|{'---|' * (len(wrk_columns) + 1)}")
    for name, rows in figures["candidates"].items():
        label, load = BY_NAME[name].label, " / ".join(f"{x:g}" for x in rows.get("load", []))
        for blob, w in rows.get("wrk", {}).items():
            line = f"{w['requests_s']:.0f} | {w['mib_s']:g} | {w['p99_ms']:g} | {w['non_2xx']} | {w['cpu_ms']:g}"
            print(f"| {label} | {blob} | {line} | {load} |")
    print("\nWhat each ran with:")
    for name in figures["candidates"]:
        print(f"- {BY_NAME[name].label}: {BY_NAME[name].settings}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.proxy.registry_candidates", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--only", nargs="+", action="extend", choices=list(BY_NAME), help="these candidates only")
    args = parser.parse_args(argv)
    chosen = [c for c in CANDIDATES if not args.only or c.name in args.only]
    figures: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_start": round(os.getloadavg()[0], 2)}}
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        figures["candidates"] = {c.name: measure(c, Path(tmp)) for c in chosen}
    figures["machine"]["load_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print_tables(figures)


if __name__ == "__main__":
    main()
