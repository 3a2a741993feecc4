"""Snakemake as a peer of hetflow on the same workloads, running the same container commands.

Each workload is run by ``hetflow run --no-cache`` (a private HETFLOW_HOME) and by Snakemake 9
(PyPI, the ``bench`` extra) in the same bench run, on the same machine:

* **wide**: N independent ``true`` steps, 1 CPU each;
* **chain**: N ``true`` steps, each needing the one before;
* **fan-out**: the workload of ``bench.local.scale`` (the issue's 861 s): ``foreach: {range: N}`` of
  ``echo ITEM > /out/o.txt`` (0.25 CPU, 32 MiB each) and a step that needs all the items.

Same container command.  hetflow's own ``podman run`` argv for every step is recorded in an
untimed run (``bench.local.overhead.recorded_runs``: a shim engine; hardening, user, limits, labels,
mounts, log file, cgroup parent) and Snakemake's rules run exactly that argv with ``shell:``
(``-d`` and the monitor PID file become ``--rm``, as in the overhead bench's loop).  The
fan-out's 2,000 item commands are not recorded one by one (that would cost another 15
minutes): a 2-item fan-out of the same step is recorded and item k's argv is item 0's with
``work.0`` made ``work.k`` and the item's command; the template is checked against the
recorded item 1 and the bench stops if they differ.

Same concurrency.  hetflow starts a step when its CPUs are free: with C CPUs, C 1-CPU steps
at once, 4 C quarter-CPU items.  Snakemake gets ``--cores K`` with that K (each rule takes
1 thread), and the podman loop ``xargs -P K``.  The peak that hetflow actually ran at once is
read back from its step times and printed beside K.

Snakemake's ``group:`` with ``--group-components`` is not measured: when executing locally,
Snakemake ignores groups (docs, "Job Grouping"); on a cluster a group job still runs one
container per job, so it saves ``sbatch`` calls, not container starts.  The packed peer
measured instead is what a Snakemake user writes to share a container: a rule over chunks of
B items, each chunk one ``podman run`` (the same flags) looping over its items.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from demo.images import build_tiny_image

from bench.local.overhead import as_loop_command, drop_cgroups, hetflow_cmd, loop_scripts, make_sources, recorded_runs
from hetflow.config import engine_env, find_engine

BUSYBOX = "localhost/hetflow-test/busybox:latest"
ITEM_CPUS = 0.25  # bench.local.scale's items: 4 at once per CPU


def wide_workflow(n: int) -> str:
    steps = "".join(
        f'  t{i}:\n    image: {BUSYBOX}\n    command: ["true"]\n    resources: {{cpus: 1}}\n' for i in range(n)
    )
    return f"apiVersion: hetflow/v1\nname: wide\nsteps:\n{steps}"


def chain_workflow(n: int) -> str:
    steps = "".join(
        f'  c{i}:\n    image: {BUSYBOX}\n    command: ["true"]\n    resources: {{cpus: 1}}\n'
        + (f"    needs: [c{i - 1}]\n" if i else "")
        for i in range(n)
    )
    return f"apiVersion: hetflow/v1\nname: chain\nsteps:\n{steps}"


def fanout_workflow(n: int, batch: int = 0) -> str:
    """bench.local.scale's workload; ``batch`` > 0 adds ``batch: B`` to the fan-out step, 0 says
    ``batch: false`` (a container per item, as before issue 26: 2,000 short items would
    otherwise be batched by hetflow unasked)."""
    packed = f"    batch: {batch}\n" if batch else "    batch: false\n"
    return f"""apiVersion: hetflow/v1
name: fanout
steps:
  work:
    image: {BUSYBOX}
    foreach: {{range: {n}}}
    command: [sh, -c, "echo {{{{ item }}}} > /out/o.txt"]
    resources: {{cpus: {ITEM_CPUS}, memory: 32Mi}}
    estimate: 1s
    outputs: [o.txt]
{packed}  done:
    image: {BUSYBOX}
    needs: [work]
    command: ["true"]
    resources: {{cpus: {ITEM_CPUS}, memory: 32Mi}}
    estimate: 1s
"""


def item_command(i: int) -> list[str]:
    return ["sh", "-c", f"echo {i} > /out/o.txt"]


def chunk_command(first: int, last: int) -> list[str]:
    """One container for items first..last (a hand-written Snakemake chunk rule's body)."""
    return ["sh", "-c", f"for i in $(seq {first} {last}); do echo $i > /out/o.$i.txt; done"]


def step_of(argv: list[str]) -> str:
    return next(v[len("hetflow.step=") :] for v in argv if v.startswith("hetflow.step="))


def retarget(argv: list[str], home: Path, step: str, command: list[str]) -> list[str]:
    """Item 0's argv for another step name and command: names, labels, mounts and the kept
    env file say ``step`` instead of ``work.0``; the command after the image is ``command``."""
    at = len(argv) - 1 - argv[::-1].index(BUSYBOX)
    out = [tok.replace("work.0", step) for tok in argv[:at]]
    if "--env-file" in out:
        k = out.index("--env-file") + 1
        env = home / "item-env" / f"{step}.env"
        env.parent.mkdir(parents=True, exist_ok=True)
        env.write_text(Path(argv[k]).read_text().replace("work.0", step))
        out[k] = str(env)
    return [*out, BUSYBOX, *command]


def fanout_runs(n: int, home: Path, podman: str) -> tuple[list[list[str]], list[str]]:
    """(the n items' argv, the gather's argv) from a recorded 2-item fan-out, checked."""
    wf = home / "fanout-2.yaml"
    wf.parent.mkdir(parents=True, exist_ok=True)
    wf.write_text(fanout_workflow(2))
    runs = {step_of(r): r for r in recorded_runs(wf, home / "rec-fanout", podman)}
    if set(runs) != {"work.0", "work.1", "done"}:
        sys.exit(f"bench: the 2-item fan-out recorded steps {sorted(runs)}, expected work.0, work.1, done")
    made = retarget(runs["work.0"], home, "work.1", item_command(1))
    seen = runs["work.1"]
    env_at = seen.index("--env-file") + 1 if "--env-file" in seen else -1
    same_env = env_at < 0 or Path(made[env_at]).read_text() == Path(seen[env_at]).read_text()
    if not same_env or [t for k, t in enumerate(made) if k != env_at] != [t for k, t in enumerate(seen) if k != env_at]:
        sys.exit(f"bench: item 1's argv is not item 0's with its name changed:\n{seen}\n{made}")
    items = [retarget(runs["work.0"], home, f"work.{i}", item_command(i)) for i in range(n)]
    return items, runs["done"]


def chunk_runs(n: int, chunk: int, item0: list[str], home: Path) -> list[list[str]]:
    return [retarget(item0, home, f"chunk.{c}", chunk_command(c, min(c + chunk, n) - 1)) for c in range(0, n, chunk)]


# --- Snakemake ---------------------------------------------------------------------------------

SNAKEFILE_DAG = """import json
SPEC = json.load(open(config["spec"]))

rule all:
    input: expand("done/{name}", name=SPEC["targets"])

rule step:
    output: touch("done/{name}")
    input: lambda w: expand("done/{d}", d=SPEC["needs"].get(w.name, []))
    params: cmd=lambda w: SPEC["cmds"][w.name]
    shell: "{params.cmd}"
"""

SNAKEFILE_FANOUT = """import json
SPEC = json.load(open(config["spec"]))

rule all:
    input: "done/gather"

rule work:
    output: touch("done/work.{i}")
    params: cmd=lambda w: SPEC["items"][int(w.i)]
    shell: "{params.cmd}"

rule gather:
    input: expand("done/work.{i}", i=range(len(SPEC["items"])))
    output: touch("done/gather")
    params: cmd=SPEC["gather"]
    shell: "{params.cmd}"
"""


@dataclass
class Peer:
    """One workload ready to run: its hetflow file and its Snakemake spec and Snakefile."""

    name: str
    workflow: Path
    snakefile: Path
    spec: Path
    at_once: int
    loop: Path | None = None  # the same-flags podman loop's script
    runs: tuple[list[str], ...] = ()


def dag_peer(name: str, text: str, home: Path, podman: str, at_once: int, needs: dict[str, list[str]]) -> Peer:
    """A workload whose every step is recorded (wide, chain): a Snakemake job per step.  The
    loop runs the commands K at a time, or one after another (in their order) for a chain."""
    wf = home / f"{name}.yaml"
    wf.parent.mkdir(parents=True, exist_ok=True)
    wf.write_text(text)
    runs = recorded_runs(wf, home / f"rec-{name}", podman)
    order = [step_of(r) for r in runs]
    serial, parallel = loop_scripts(runs, podman, home, name, at_once)
    spec = {
        "cmds": {step_of(r): as_loop_command(r, podman) for r in runs},
        "needs": needs,
        "targets": order,
    }
    return write_peer(name, wf, spec, SNAKEFILE_DAG, home, at_once, serial if needs else parallel, runs)


def write_peer(name: str, wf: Path, spec: object, snakefile: str, home: Path, at_once: int, loop: Path | None,
               runs: list[list[str]]) -> Peer:  # fmt: skip
    (home / f"{name}.json").write_text(json.dumps(spec))
    (home / f"{name}.smk").write_text(snakefile)
    return Peer(name, wf, home / f"{name}.smk", home / f"{name}.json", at_once, loop, tuple(runs))


def fanout_peers(n: int, chunk: int, home: Path, podman: str, at_once: int) -> tuple[Peer, Peer]:
    """(one container per item, one container per chunk of ``chunk`` items)."""
    items, gather = fanout_runs(n, home, podman)
    chunks = chunk_runs(n, chunk, items[0], home)
    make_sources([*items, *chunks, gather])
    wf = home / "fanout.yaml"
    wf.write_text(fanout_workflow(n))
    done = as_loop_command(gather, podman)
    per_item = {"items": [as_loop_command(r, podman) for r in items], "gather": done}
    packed = {"items": [as_loop_command(r, podman) for r in chunks], "gather": done}
    return (
        write_peer("fanout", wf, per_item, SNAKEFILE_FANOUT, home, at_once, None, [*items, gather]),
        write_peer("fanout-chunked", wf, packed, SNAKEFILE_FANOUT, home, at_once, None, chunks),
    )


def timed(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        said = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        sys.exit(f"bench: {shlex.join(cmd[:6])} ... failed ({proc.returncode}):\n{said}")
    return took


def snakemake_python() -> str:
    """The interpreter that runs Snakemake: this one when it has Snakemake (the ``bench`` extra),
    else the Snakemake 9.27.1 venv ``make snakemake-tes-venv`` builds for the TES tests."""
    if importlib.util.find_spec("snakemake") is not None:
        return sys.executable
    other = Path(__file__).resolve().parents[2] / "build" / "snakemake-tes-venv" / "bin" / "python"
    if other.exists():
        return str(other)
    raise SystemExit("bench: Snakemake is not installed: pip install -e '.[bench]' (or make snakemake-tes-venv)")


def run_snakemake(peer: Peer, work: Path) -> float:
    """One Snakemake run in a fresh directory (nothing up to date), K jobs at once."""
    work.mkdir(parents=True)
    cmd = [snakemake_python(), "-m", "snakemake", "-s", str(peer.snakefile), "-d", str(work)]
    cmd += ["--cores", str(peer.at_once)]
    cmd += ["--config", f"spec={peer.spec}", "--quiet", "all", "--", "all"]
    return timed(cmd, engine_env())


def run_loop(peer: Peer) -> float:
    assert peer.loop is not None
    return timed(["bash", str(peer.loop)], engine_env())


def run_hetflow(workflow: Path, home: Path) -> tuple[float, int]:
    """(seconds, the most steps that ran at once) of one ``hetflow run --no-cache``."""
    env = {**os.environ, "HETFLOW_HOME": str(home)}
    took = timed(hetflow_cmd("run", "-q", "--no-cache", str(workflow)), env)
    out = subprocess.run(hetflow_cmd("ps", "--all", "--json"), env=env, capture_output=True, text=True, check=True)
    steps = json.loads(out.stdout)[0]["steps"]
    return took, peak_overlap([(s["started"], s["ended"]) for s in steps if s.get("started") and s.get("ended")])


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one time (an end before a start at the same instant)."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    peak = now = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def prepare(kind: str, n: int, home: Path, chunk: int = 50) -> list[Peer]:
    """The peers of one workload (``wide``, ``chain``, ``fanout``), recorded and written."""
    build_tiny_image(BUSYBOX)
    podman = find_engine()
    cpus = os.cpu_count() or 1
    if kind == "wide":
        return [dag_peer("wide", wide_workflow(n), home, podman, cpus, {})]
    if kind == "chain":
        needs = {f"c{i}": [f"c{i - 1}"] for i in range(1, n)}
        return [dag_peer("chain", chain_workflow(n), home, podman, cpus, needs)]
    return list(fanout_peers(n, chunk, home, podman, int(cpus / ITEM_CPUS)))


def cleanup(peers: list[Peer]) -> None:
    drop_cgroups([r for p in peers for r in p.runs])
