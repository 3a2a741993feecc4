"""Big indexes at the proxy (issue 38), for ``python -m bench.proxy.registry`` (``--big-indexes N``,
``--only-big-indexes``).

A proxy process (``hetflow.registry.fakes.fakeproxy --big-indexes N:4000000``) in front of the
fake upstream, its N indexes of about 4 MB generated so that no build fits the proxy's
machine type (``hetflow.registry.fakes.fakeindexes``).  Measured in one run: the latency (p50,
p99) of a 1 KiB cached blob alone (the anchor), then while another client asks for the N
indexes one after another (each a fresh match, each answered 404 with why nothing fits);
the RSS of the proxy and the processes under it (its match worker) before, at most while,
and after; and how long each big answer took.  The small blob is asked for every 10 ms,
each latency counted from when it was due (a stall delays every request due during it, as
wrk2 counts).  Before issue 38 the answer's text was built on the event loop (3.7 s stalls)
and each failed match was kept whole (about 27 MB per index).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

__all__ = ["big_indexes", "print_indexes"]

MIB = 1024 * 1024
PACE_S = 0.01


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(pid: int) -> int:
    """RSS of ``pid`` and every process under it."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(_rss(p) for p in tree)


def _paced(client: httpx.Client, path: str, headers: dict[str, str], until: threading.Event, least: int) -> list[float]:
    latencies: list[float] = []
    start = time.monotonic()
    while not (until.is_set() and len(latencies) >= least):
        due = start + len(latencies) * PACE_S
        if (ahead := due - time.monotonic()) > 0:
            time.sleep(ahead)
        got = client.get(path, headers=headers)
        if got.status_code != 200:
            raise SystemExit(f"small blob: {got.status_code} {got.text[:200]}")
        latencies.append(time.monotonic() - due)
    return latencies


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50_ms": round(statistics.median(values) * 1000, 2), "p99_ms": round(p99 * 1000, 2)}


def big_indexes(count: int, size: int = 4_000_000, samples: int = 1000) -> dict[str, object]:
    """The small cached blob alone, then while ``count`` big indexes are answered."""
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        argv = [sys.executable, "-m", "hetflow.registry.fakes.fakeproxy", f"{tmp}/state", "--blob=small=1024"]
        argv.append(f"--big-indexes={count}:{size}")
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            info = json.loads(proc.stdout.readline())
            url, repo, index_repo = info["url"], info["repo"], info["indexes"]["repo"]
            bearer = httpx.get(f"{url}/token", auth=(info["machine_type"], info["token"])).json()["token"]
            headers = {"Authorization": f"Bearer {bearer}"}
            small = f"/v2/{repo}/blobs/{info['blobs']['small']}"
            done, peak, answers = threading.Event(), [0], []

            def ask_big() -> None:
                try:
                    with httpx.Client(base_url=url, timeout=600) as other:
                        for tag in info["indexes"]["tags"]:
                            start = time.monotonic()
                            got = other.get(f"/v2/{index_repo}/manifests/{tag}", headers=headers)
                            answers.append((got.status_code, time.monotonic() - start, len(got.content)))
                            peak[0] = max(peak[0], _tree_rss(proc.pid))
                finally:
                    done.set()

            with httpx.Client(base_url=url, timeout=600) as client:
                finished = threading.Event()
                finished.set()
                anchor = _paced(client, small, headers, finished, samples)
                before = _tree_rss(proc.pid)
                thread = threading.Thread(target=ask_big)
                thread.start()
                loaded = _paced(client, small, headers, done, samples)
                thread.join()
                after = _tree_rss(proc.pid)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
    return {
        "indexes": count,
        "index_bytes": size,
        "statuses": sorted({status for status, _, _ in answers}),
        "answer_s_median": round(statistics.median(s for _, s, _ in answers), 2),
        "answer_bytes_max": max(n for _, _, n in answers),
        "anchor": _percentiles(anchor),
        "with_big_answers": _percentiles(loaded),
        "rss_mib": {"before": round(before / MIB, 1), "peak": round(peak[0] / MIB, 1), "after": round(after / MIB, 1)},
    }


def print_indexes(result: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"big_indexes": result}, indent=2))
        return
    anchor, loaded, rss = result["anchor"], result["with_big_answers"], result["rss_mib"]
    assert isinstance(anchor, dict) and isinstance(loaded, dict) and isinstance(rss, dict)
    print(
        f"1 KiB cached blob every 10 ms, proxy process (fakeproxy) and its match worker; {result['indexes']} indexes "
        f"of {result['index_bytes']} bytes that fit nothing, answered {result['statuses']} "
        f"in {result['answer_s_median']} s (median), at most {result['answer_bytes_max']} bytes each:"
    )
    print("| case | p50 ms | p99 ms | proxy RSS MiB |")
    print("|---|---|---|---|")
    print(f"| alone (anchor) | {anchor['p50_ms']} | {anchor['p99_ms']} | {rss['before']} |")
    print(
        f"| while the {result['indexes']} indexes are answered | {loaded['p50_ms']} | {loaded['p99_ms']} | "
        f"{rss['peak']} at most ({rss['after']} after) |"
    )
