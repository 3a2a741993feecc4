"""Slurm backend overhead: ``python -m bench.engines.slurm [--steps N] [--keep]``.

A chain of dependent jobs (afterok) on the local test cluster (demo/slurm/cluster.py),
three ways in one run: bare ``true``, ``podman run ... true`` (the anchor), and through
``SlurmBackend`` (a container per job, plus submit and poll).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from demo.images import TINY_IMAGE, build_tiny_image
from demo.slurm.cluster import LocalSlurm, _run, cluster_running, start_cluster, stop_cluster

from hetflow.config import engine_env, hetflow_home
from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm import SlurmBackend
from hetflow.execute.engine import ContainerSpec

_ANCHOR = """prev=""
for i in $(seq 1 {steps}); do
  prev=$(sbatch --parsable --job-name=anchor-{tag}-$i --mem=64M --output=/dev/null \\
         ${{prev:+--dependency=afterok:$prev}} --wrap {wrap}) || exit 1
done
echo "$prev"
"""


def _anchor(cluster: LocalSlurm, steps: int, wrap: str, tag: str) -> tuple[float, float]:
    """A plain shell loop of ``sbatch --dependency=afterok``; (submit s, total s)."""
    env = {**engine_env(), **cluster.env}
    t0 = time.monotonic()
    proc = _run(["bash", "-c", _ANCHOR.format(steps=steps, tag=tag, wrap=shlex.quote(wrap))], env, timeout=600)
    if proc.returncode != 0:
        raise EngineError(f"anchor loop failed: {proc.stderr.strip()}")
    submitted = time.monotonic() - t0
    last = proc.stdout.strip()
    while True:
        st = _run(["squeue", "--noheader", "--states=all", f"--jobs={last}", "--format=%T"], env).stdout.strip()
        if st and st not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
            if st != "COMPLETED":
                raise EngineError(f"anchor chain ended with {st}")
            return submitted, time.monotonic() - t0
        time.sleep(0.1)


def _through_backend(cluster: LocalSlurm, steps: int, image: str, poll: float) -> tuple[float, float]:
    backend = SlurmBackend(cluster.settings())
    rid = f"bench{time.time_ns() % 10**9}"
    logs = cluster.workdir / "bench-logs" / rid
    logs.mkdir(parents=True)
    names = [f"hf-{rid}-s{i:03d}-1" for i in range(steps)]
    t0 = time.monotonic()
    for i, name in enumerate(names):
        spec = ContainerSpec(
            name=name,
            image=image,
            command=("true",),
            user=f"{os.getuid()}:{os.getgid()}",
            labels={"hetflow.run": rid},
            env={"HOME": "/tmp"},
            log_path=str(logs / f"{name}.log"),
        )
        deps = (names[i - 1],) if i else ()
        backend.submit(Job(name, rid, f"s{i:03d}", 1, spec, cpus=1, memory=64 << 20, depends_on=deps))
    submitted = time.monotonic() - t0
    while True:
        states = backend.poll(rid)
        if all(n in states and not states[n].running for n in names):
            bad = {n: s.exit_code for n, s in states.items() if s.exit_code != 0}
            if bad:
                raise EngineError(f"the chain failed: {bad}")
            return submitted, time.monotonic() - t0
        time.sleep(poll)


def bench(cluster: LocalSlurm, steps: int = 100, poll: float = 0.25) -> dict[str, tuple[float, float]]:
    """A chain of ``steps`` jobs three ways: bare ``true``, ``podman run ... true``, and
    through SlurmBackend (a container per job, plus submit and poll)."""
    image = build_tiny_image(TINY_IMAGE)
    podman = f"podman run --rm --network none --pull never {image} true"
    results = {
        "sbatch loop, true": _anchor(cluster, steps, "true", "bare"),
        "sbatch loop, podman run true": _anchor(cluster, steps, podman, "podman"),
        "SlurmBackend (submit + poll)": _through_backend(cluster, steps, image, poll),
    }
    print(f"chain of {steps} dependent jobs (afterok) on the local test cluster; wall seconds")
    print(f"{'':32} {'submit':>8} {'total':>8} {'per step':>9}")
    for label, (sub, total) in results.items():
        print(f"{label:32} {sub:8.2f} {total:8.2f} {total / steps:9.3f}")
    base = results["sbatch loop, podman run true"][1]
    ours = results["SlurmBackend (submit + poll)"][1]
    print(f"hetflow's overhead over the podman anchor: {(ours - base) / steps * 1000:+.0f} ms per step")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engines.slurm", description=__doc__)
    ap.add_argument("--base", type=Path, default=None, help="default: $HETFLOW_HOME/slurm-cluster")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running")
    args = ap.parse_args(argv)
    base = args.base or hetflow_home() / "slurm-cluster"
    try:
        running = cluster_running(base)
        cluster = start_cluster(base)
        try:
            bench(cluster, args.steps)
        finally:
            if running is None and not args.keep:
                stop_cluster(base)
        return 0
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
