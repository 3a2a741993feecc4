"""How fast the everyday commands answer (issue 43): a 20-step workflow, a store of 1,000 runs.

    python -m bench.cli [--repeat 5] [--runs 1000] [--only validate,ps,...] [--baseline DIR]

A tmp HETFLOW_HOME gets a store of ``--runs`` finished runs of 20 steps each, recorded
through the Store API (``tests.integration.uikit.synthetic_run``: each step taken through its
states, one attempt and a 3-line log each; the newest run's last five steps are a fan-out's
items, ``fan.0`` .. ``fan.4``, so ``logs RUN fan`` prints a group), and 20 cache entries; the
workflow is a chain of 20 busybox steps (``localhost/hetflow-test/busybox:latest``, which
``make images``/the tests build).  Each command runs as ``python -m hetflow.cli.main ...`` in a
fresh subprocess (what a shell's ``hetflow`` pays: interpreter start, imports, probes, the
store), ``--repeat`` times after one untimed warm-up; the table shows the median wall time,
the target (0.3 s; 0.15 s for a TAB completion) and the ratio to it, and the median CPU
time (user + system, the command's and its children's: on a busy machine the wall time grows
with the others' work, the CPU time much less).

The anchors, timed the same way in the same run: ``podman ps`` and ``git status`` (of this
checkout), commands a user types as often.  The warm-up run fills what hetflow caches (probe
results, the parsed workflow), as a user's second command finds it; the first command of a
fresh machine pays the probes once (the probe cache is the run's own: ``XDG_CACHE_HOME`` in
the tmp folder).  Completion uses the protocol the script of ``hetflow completion bash``
uses (``_HETFLOW_COMPLETE=complete_bash COMP_WORDS COMP_CWORD``).

``run (all cached) WF``: ``hetflow run`` of the same workflow, every step of which the
cross-run cache holds (the warm-up run fills it; target 0.5 s): what a re-run of an
unchanged workflow pays (issue 43).

Each tree's ``src`` is byte-compiled first (``compileall``, as ``pip install`` does): with
``PYTHONDONTWRITEBYTECODE`` set, as on the shared machine, a source checkout would otherwise
compile hetflow's 190 modules at every command (0.2-0.3 s of CPU), which no installed
hetflow pays.

``--baseline DIR``: another checkout of hetflow (``git worktree add DIR COMMIT``, or ``git
archive COMMIT | tar -x -C DIR``) timed the same way on the same store, each command's
baseline runs and this checkout's taken in turn (one of each, ``--repeat`` times): a
before/after table from one run, both sides meeting the same load.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.integration.uikit import ROOT, synthetic_run

from bench.speedrow import Row, emit

TARGET_S = 0.3
TAB_TARGET_S = 0.15
CACHED_RUN_TARGET_S = 0.5
STEPS = 20
IMAGE = "localhost/hetflow-test/busybox:latest"


def chain_workflow(steps: int = STEPS) -> str:
    """A workflow of ``steps`` busybox steps, each reading its parent's output."""
    lines = ["apiVersion: hetflow/v1", "name: chain", "steps:"]
    for i in range(steps):
        lines += [
            f"  s{i}:",
            f"    image: {IMAGE}",
            f'    command: [sh, -c, "echo {i} > /out/n.txt"]',
            "    resources: {cpus: 1, memory: 64Mi}",
            "    estimate: 1s",
            "    outputs: [n.txt]",
        ]
        if i:
            lines += [f"    needs: [s{i - 1}]", f"    inputs: {{prev: s{i - 1}/n.txt}}"]
    return "\n".join(lines) + "\n"


def fill(home: Path, runs: int) -> str:
    """``runs`` finished runs in ``home``'s store; the newest run's id."""
    from hetflow.state import CacheEntry, Store

    store = Store(home / "state.db")
    names = [f"s{i}" for i in range(STEPS - 5)] + [f"fan.{i}" for i in range(5)]
    yaml = chain_workflow()
    t0 = time.time() - runs * 60
    try:
        last = ""
        for n in range(runs):
            last = f"r{n:05d}bench"
            state = "failed" if n % 10 == 3 else "succeeded"
            synthetic_run(
                store, home, last, name="chain", steps=names, workflow_yaml=yaml, state=state, created=t0 + n * 60
            )
        for i in range(STEPS):
            store.put_cache_entry(
                CacheEntry(
                    key=f"{i:064x}", workflow="chain", step=f"s{i}", run_id=last, created=t0, used=t0,
                    size=2, key_json="{}", outputs_json='{"n.txt": {"sha256": "0", "size": 2}}',
                )
            )  # fmt: skip
    finally:
        store.close()
    return last


def timed(argv: list[str], env: dict[str, str], repeat: int, cwd: Path) -> tuple[float, int, float]:
    """The median wall seconds of ``repeat`` runs (after one warm-up), the last exit status,
    and the median CPU seconds (user + system of the command and what it ran, such as podman:
    what a busy machine's other work does not add to, as it adds to the wall time)."""
    return timed_side_by_side(argv, [env], repeat, cwd)[0]


def timed_side_by_side(
    argv: list[str], envs: list[dict[str, str]], repeat: int, cwd: Path
) -> list[tuple[float, int, float]]:
    """``timed`` for each of ``envs`` (a baseline's and this tree's), their runs taken in
    turn (one warm-up each, then one of each, ``repeat`` times): on a shared machine whose
    load moves by the minute, each tree meets the same minutes."""
    rcs = [subprocess.run(argv, env=env, cwd=cwd, capture_output=True).returncode for env in envs]
    times: list[list[float]] = [[] for _ in envs]
    cpus: list[list[float]] = [[] for _ in envs]
    for _ in range(repeat):
        for i, env in enumerate(envs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            rcs[i] = subprocess.run(argv, env=env, cwd=cwd, capture_output=True).returncode
            times[i].append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[i].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return [(statistics.median(times[i]), rcs[i], statistics.median(cpus[i])) for i in range(len(envs))]


def tree_env(env: dict[str, str], root: Path) -> dict[str, str]:
    """``env`` running the hetflow of checkout ``root``."""
    return env | {"PYTHONPATH": f"{root / 'src'}:{ROOT}"}


def commands(wf: Path, run: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, hetflow arguments, extra environment) for each timed command."""

    def tab(line: str) -> dict[str, str]:
        words = line.split(" ")
        return {"_HETFLOW_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}

    return [
        ("validate WF", ["validate", str(wf)], {}),
        ("plan WF", ["plan", str(wf)], {}),
        ("run --dry-run WF", ["run", "--dry-run", str(wf)], {}),
        ("ps", ["ps"], {}),
        ("ps --all", ["ps", "--all"], {}),
        ("show RUN", ["show", run], {}),
        ("logs RUN STEP", ["logs", run, "s3"], {}),
        ("logs RUN GROUP", ["logs", run, "fan"], {}),
        ("logs RUN", ["logs", run], {}),
        ("trace RUN", ["trace", run], {}),
        ("cache ls", ["cache", "ls"], {}),
        ("nodes", ["nodes"], {}),
        ("run (all cached) WF", ["run", str(wf)], {}),
        ("TAB hetflow <TAB>", [], tab("hetflow ")),
        ("TAB hetflow lo<TAB>", [], tab("hetflow lo")),
        ("TAB hetflow logs <TAB>", [], tab(f"hetflow logs {run[:3]}")),
        ("TAB hetflow logs RUN <TAB>", [], tab(f"hetflow logs {run} s")),
        ("TAB hetflow run --<TAB>", [], tab("hetflow run --")),
    ]


def target_of(label: str) -> float:
    if label.startswith("TAB"):
        return TAB_TARGET_S
    return CACHED_RUN_TARGET_S if label.startswith("run (all cached)") else TARGET_S


def compile_tree(root: Path) -> None:
    """Byte-compile ``root/src`` as an installed package is (``pip install`` writes the .pyc)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "src")], check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated label prefixes to time (default: all)")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout, timed beside this one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-cli-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        wf = Path(tmp) / "chain.yaml"
        wf.write_text(chain_workflow())
        for tree in [ROOT] if args.baseline is None else [args.baseline, ROOT]:
            compile_tree(tree)
        t = time.perf_counter()
        run = fill(home, args.runs)
        print(f"store: {args.runs} runs of {STEPS} steps recorded in {time.perf_counter() - t:.1f}s", flush=True)
        env = os.environ | {"HETFLOW_HOME": str(home), "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        env.pop("_HETFLOW_COMPLETE", None)
        hetflow = [sys.executable, "-m", "hetflow.cli.main"]
        rows: list[tuple[str, float, float, int, float, tuple[float, float] | None]] = []
        only = [p for p in args.only.split(",") if p]
        for label, argv, extra in commands(wf, run):
            if only and not any(label.startswith(p) for p in only):
                continue
            trees = [ROOT] if args.baseline is None else [args.baseline, ROOT]
            envs = [tree_env(env, tree) | extra for tree in trees]
            *was_run, (seconds, rc, cpu) = timed_side_by_side([*hetflow, *argv], envs, args.repeat, Path(tmp))
            before = None if not was_run else (was_run[0][0], was_run[0][2])
            rows.append((label, seconds, target_of(label), rc, cpu, before))
            was = "" if before is None else f" (baseline {before[0]:.3f}s, cpu {before[1]:.3f}s)"
            print(f"  {label}: {seconds:.3f}s, cpu {cpu:.3f}s{was}", flush=True)
        anchors = [
            ("podman ps (anchor)", timed(["podman", "ps"], env, args.repeat, Path(tmp))),
            ("git status (anchor)", timed(["git", "status", "--short"], env, args.repeat, ROOT)),
        ]
    load = os.getloadavg()
    print(
        f"\nmedian of {args.repeat} runs each (subprocess wall); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    base = "" if args.baseline is None else f" {'baseline':>9} {'(cpu)':>7} {'speed-up':>8}"
    print(f"{'command':30}{base} {'median':>8} {'(cpu)':>7} {'target':>7} {'ratio':>6}  ok  exit")
    for label, seconds, target, rc, cpu, before in rows:
        ok = "yes" if seconds < target else "NO"
        was = "" if before is None else f" {before[0]:8.3f}s {before[1]:6.3f}s {before[0] / seconds:7.1f}x"
        print(f"{label:30}{was} {seconds:7.3f}s {cpu:6.3f}s {target:6.2f}s {seconds / target:6.2f}  {ok:3} {rc}")
    pad = " " * (len(base))
    for label, (seconds, _, cpu) in anchors:
        print(f"{label:30}{pad} {seconds:7.3f}s {cpu:6.3f}s")
    podman_ps = anchors[0][1][0]
    for label, seconds, target, _rc, _cpu, _before in rows:
        emit(Row(f"{label} under {target:g} s", seconds, "s", "podman ps", podman_ps, target, "bench.cli"))


if __name__ == "__main__":
    main()
