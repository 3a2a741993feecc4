"""hetflow's TES throughput, with its anchor in the same run (issue 41's figure).

    python -m bench.tes [--tasks 1000] [--threads 16] [--workers 2] [--json FILE]

N small tasks (one executor: ``echo``, in the local busybox "alpine") are created by py-tes
from 16 threads through a real ``hetflow tes serve`` (``max_running`` = the workers), watched
to their end; then the same containers (same image, same command, the same ``podman run``
hardening flags, built by hetflow's own ``run_args`` from the spec the TES worker makes) are
run by a plain loop of 2 workers (threads each running ``podman run --rm``), the anchor.
Funnel, the reference TES server, is not the anchor: ``go install
github.com/ohsu-comp-bio/funnel@latest`` is refused by the Go module proxy here (403).

Printed: tasks/s accepted (creates answered, over the time from the first create to the last
answer), tasks/s completed (over the time from the first create to the last end), and p99
create->RUNNING (the server's creation_time to its executor's start_time; the anchor's is
from the moment all N were queued to the moment its worker starts ``podman run``).  With N
tasks and 2 slots, p99 create->RUNNING is mostly queueing, for both.  Timings are wall-clock
on a 2-core machine that others may use: read the ratio against the anchor of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import httpx
from demo.images.busybox import build_tiny_image

from hetflow.config import submitter
from hetflow.execute import ContainerSpec, run_args

IMAGE = "localhost/alpine:latest"
COMMAND = ["echo", "hello"]
ENDED = {"COMPLETE", "EXECUTOR_ERROR", "SYSTEM_ERROR", "CANCELED", "PREEMPTED"}


@dataclass(frozen=True)
class Row:
    who: str
    tasks: int
    failed: int
    accepted_per_s: float | None  # None: the loop has nothing to accept
    completed_per_s: float
    p99_to_running_s: float


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def seconds(stamp: str | datetime) -> float:
    """A TES time (py-tes gives datetimes; the JSON, RFC 3339 strings) as epoch seconds."""
    return (stamp if isinstance(stamp, datetime) else datetime.fromisoformat(stamp)).timestamp()


def serve(home: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    (home / "tes.yaml").parent.mkdir(parents=True, exist_ok=True)
    (home / "tes.yaml").write_text(f"max_running: {workers}\n")
    port = free_port()
    env = {**os.environ, "HETFLOW_HOME": str(home)}
    argv = [sys.executable, "-m", "hetflow.cli.main", "tes", "serve", "--listen", f"127.0.0.1:{port}"]
    argv += ["--config", str(home / "tes.yaml")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/ga4gh/tes/v1/service-info", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit("hetflow tes serve did not answer")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def bench_hetflow(n: int, threads: int, workers: int, home: Path) -> Row:
    import tes  # py-tes, the GA4GH client (the test extra)

    proc, url = serve(home, workers)
    try:
        local = threading.local()

        def create(i: int) -> str:
            client = getattr(local, "client", None) or tes.HTTPClient(url, timeout=60)
            local.client = client
            task = tes.Task(name=f"b{i}", executors=[tes.Executor(image=IMAGE, command=COMMAND)])
            return str(client.create_task(task))

        first = time.time()
        with ThreadPoolExecutor(threads) as pool:
            ids = list(pool.map(create, range(n)))
        accepted = time.time()
        client = tes.HTTPClient(url, timeout=60)
        while True:
            states = [t.state for t in all_tasks(client, "MINIMAL")]
            if sum(s in ENDED for s in states) >= n:
                break
            time.sleep(1.0)
        full = all_tasks(client, "FULL")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert len(full) == len(ids) == n
    ends, waits, failed = [], [], 0
    for t in full:
        failed += t.state != "COMPLETE"
        ex = t.logs[-1].logs[0] if t.logs and t.logs[-1].logs else None
        if ex is not None:
            ends.append(seconds(ex.end_time))
            waits.append(seconds(ex.start_time) - seconds(t.creation_time))
    return Row("hetflow tes serve", n, failed, n / (accepted - first), n / (max(ends) - first), p99(waits))


def all_tasks(client: object, view: str) -> list[object]:
    found: list[object] = []
    token = None
    while True:
        page = client.list_tasks(view=view, page_size=2048, page_token=token)  # type: ignore[attr-defined]
        found += page.tasks or []
        token = page.next_page_token
        if not token:
            return found


def loop_argv(i: int, logs: Path) -> list[str]:
    """hetflow's own ``podman run`` flags for a TES executor (worker.py's ContainerSpec, less
    the labels that tie it to a run), attached and removed at its end."""
    uid, gid = submitter()
    spec = ContainerSpec(
        name=f"tes-loop-{os.getpid()}-{i}",
        image=IMAGE,
        command=tuple(COMMAND),
        user=f"{uid}:{gid}",
        labels={},
        env={"HOME": "/tmp"},
        log_path=str(logs / f"{i}.log"),
    )
    args = run_args(spec, attached=True)
    return ["podman", args[0], "--rm", *args[1:]]


def bench_loop(n: int, workers: int, logs: Path) -> Row:
    logs.mkdir(parents=True, exist_ok=True)
    argvs = [loop_argv(i, logs) for i in range(n)]
    waits: list[float] = []
    codes: list[int] = []
    first = time.time()

    def one(argv: list[str]) -> None:
        waits.append(time.time() - first)
        codes.append(subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, argvs))
    end = time.time()
    return Row(f"podman loop, {workers} workers", n, sum(c != 0 for c in codes), None, n / (end - first), p99(waits))


def table(rows: list[Row]) -> str:
    het, anchor = rows
    lines = [
        "| | tasks | failed | accepted tasks/s | completed tasks/s | p99 create->RUNNING s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        acc = f"{r.accepted_per_s:.1f}" if r.accepted_per_s is not None else "(queued at once)"
        lines.append(
            f"| {r.who} | {r.tasks} | {r.failed} | {acc} | {r.completed_per_s:.2f} | {r.p99_to_running_s:.1f} |"
        )
    lines.append(
        f"| ratio hetflow / loop | | | | {het.completed_per_s / anchor.completed_per_s:.2f} "
        f"| {het.p99_to_running_s / anchor.p99_to_running_s:.2f} |"
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2, help="the server's max_running and the loop's workers")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    build_tiny_image(IMAGE)
    with tempfile.TemporaryDirectory(prefix="bench-tes-") as tmp:
        het = bench_hetflow(a.tasks, a.threads, a.workers, Path(tmp) / "home")
        loop = bench_loop(a.tasks, a.workers, Path(tmp) / "loop-logs")
    print(f"{a.tasks} tasks ({' '.join(COMMAND)} in {IMAGE}), {a.threads} client threads, {a.workers} slots")
    print(table([het, loop]))
    if a.json:
        a.json.write_text(json.dumps([asdict(het), asdict(loop)], indent=2))


if __name__ == "__main__":
    main()
