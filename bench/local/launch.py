"""Launch cost under runc and under crun, each against its same-flags podman loop, in one run.

N trivial steps (``true`` in the busybox test image), one at a time and as many at once as
this machine's CPUs allow, four ways in each mode, interleaved:

* a shell loop of ``podman --runtime R run`` with **hetflow's own arguments for each step**
  (recorded from hetflow in an untimed run by a shim named ``podman``, so they are the ones a
  real run passes: hooks directory, hardening, limits, labels, mounts, log file, the attempt's
  parent cgroup; only ``--rm`` is added), serially and through ``xargs -P K``;
* ``hetflow run --no-cache`` with ``HETFLOW_OCI_RUNTIME=R``;
* (serial only) the runtime alone, ``R run`` of an OCI bundle of the same image's root with the
  same hardening (bench.local.overhead's runc bundle): the floor under any engine;

for R in runc and crun.  ``launch_rows(steps)`` returns one dict per timed run (for
bench/local/throughput.py); ``python -m bench.local.launch [--steps 50] [--repeat 1]`` prints the medians.

crun 1.8 refuses a hybrid cgroup layout whose cgroup v2 tree holds a controller (this machine's
holds hugetlb).  There, when run as root, every row of both runtimes runs in a private mount
namespace whose ``cgroup.controllers`` reads empty: what crun would see had hugetlb been mounted
as a v1 hierarchy (the usual hybrid layout).  Each row says so in its ``note``; hetflow itself
stays on runc on such a machine (``hetflow nodes`` says why).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from demo.images import build_tiny_image

from bench.local.overhead import (
    BUSYBOX,
    drop_cgroups,
    hetflow_cmd,
    make_sources,
    mounted_rootfs,
    runc_bundle,
    timed,
    trivial_workflow,
    write_recorder,
)
from hetflow.config import engine_env, find_engine

RUNTIMES = ("runc", "crun")
CONTROLLERS = Path("/sys/fs/cgroup/unified/cgroup.controllers")
HIDDEN = "crun's hybrid-layout check hidden (private mount namespace: cgroup v2 controllers read empty)"


def record(wf: Path, home: Path, podman: str) -> list[list[str]]:
    """hetflow's podman arguments for each step's ``run`` (without the binary), from an untimed
    run through a shim named ``podman`` (so hetflow drives it as podman: attached runs, parent
    cgroups); each step's env file is kept for the replay."""
    shim_dir, kept, log = home / "bin", home / "env", home / "runs.log"
    shim_dir.mkdir(parents=True, exist_ok=True)
    kept.mkdir(exist_ok=True)
    shim = shim_dir / "podman"
    write_recorder(shim, kept, log, podman)
    env = {**os.environ, "HETFLOW_HOME": str(home / "h"), "HETFLOW_ENGINE": str(shim), "HETFLOW_OCI_RUNTIME": "runc"}
    timed(hetflow_cmd("run", "-q", "--no-cache", str(wf)), env=env)
    runs = [a for a in (shlex.split(line) for line in log.read_text().splitlines()) if run_at(a) >= 0]
    if not runs:
        sys.exit(f"bench: the recording run of {wf} started no container")
    return runs


def run_at(argv: list[str]) -> int:
    """Where the ``run`` of a step's container is in a recorded argv (-1: another command):
    after hetflow's global options, each with its value."""
    i = 0
    while i < len(argv) and argv[i] in ("--hooks-dir", "--runtime"):
        i += 2
    return i if argv[i : i + 1] == ["run"] and "--name" in argv[i:] else -1


def loop_command(argv: list[str], podman: str, runtime: str) -> str:
    """One step's replay: hetflow's global options with ``--runtime RUNTIME``, ``run --rm``."""
    i = run_at(argv)
    globals_ = list(argv[:i])
    if "--runtime" in globals_:
        j = globals_.index("--runtime")
        del globals_[j : j + 2]
    rest = [a for a in argv[i + 1 :] if a != "-d"]
    return shlex.join([podman, *globals_, "--runtime", runtime, "run", "--rm", *rest]) + " >/dev/null"


def scripts(runs: list[list[str]], podman: str, home: Path, mode: str, at_once: int) -> dict[tuple[str, str], Path]:
    """(mode, runtime) -> the loop script of each runtime: the commands one after another
    (serial), or through ``xargs -P at_once`` (parallel)."""
    make_sources(runs)
    out: dict[tuple[str, str], Path] = {}
    for rt in RUNTIMES:
        listing = home / f"{rt}-commands.txt"
        listing.write_text("\n".join(loop_command(r, podman, rt) for r in runs) + "\n")
        out[(mode, rt)] = listing
        if mode == "parallel":
            out[(mode, rt)] = home / f"{rt}-parallel.sh"
            out[(mode, rt)].write_text(
                f"xargs -d '\\n' -P {at_once} -I CMD bash -c CMD < {shlex.quote(str(listing))}\n"
            )
    return out


def crun_wrapper(podman: str, home: Path) -> tuple[list[str], str]:
    """The prefix every timed command runs under, and the note its rows carry: none where crun
    starts a container here; the private mount namespace where only its hybrid check stops it."""
    probe = [podman, "--runtime", "crun", "run", "--rm", "--network", "none", "--pull", "never", BUSYBOX, "true"]
    proc = subprocess.run(probe, env=engine_env(), capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return [], ""
    if "hybrid mode" not in proc.stderr or os.geteuid() != 0 or not shutil.which("unshare"):
        sys.exit(f"bench: crun cannot start a container here: {proc.stderr.strip()}")
    empty = home / "empty"
    empty.write_text("")
    inner = f'mount --bind {shlex.quote(str(empty))} {CONTROLLERS} && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "_"], HIDDEN


def launch_rows(steps: int, repeat: int = 1, home: Path | None = None) -> list[dict[str, object]]:
    """One dict per timed run: mode (serial|parallel), row, runtime, seconds, ms_per_step,
    steps, note; every row of a mode is measured in the same run, interleaved."""
    if home is None:
        with tempfile.TemporaryDirectory(prefix="hetflow-launch-") as tmp:
            return launch_rows(steps, repeat, Path(tmp))
    build_tiny_image(BUSYBOX)
    podman = find_engine()
    at_once = os.cpu_count() or 1
    wf = {"serial": home / "serial.yaml", "parallel": home / "parallel.yaml"}
    wf["serial"].write_text(trivial_workflow(steps, cpus=at_once))  # every CPU each: one at a time
    wf["parallel"].write_text(trivial_workflow(steps, cpus=1))
    runs = {mode: record(path, home / f"rec-{mode}", podman) for mode, path in wf.items()}
    loops = scripts(runs["serial"], podman, home / "rec-serial", "serial", 1)
    loops.update(scripts(runs["parallel"], podman, home / "rec-parallel", "parallel", at_once))
    wrap, note = crun_wrapper(podman, home)
    rows: list[dict[str, object]] = []
    try:
        with mounted_rootfs(BUSYBOX) as rootfs:
            runc_bundle(rootfs, home / "bundle", cpus=float(at_once))
            for n in range(repeat):  # the floor: the runtime alone on the same root, no engine
                for rt in RUNTIMES if n % 2 == 0 else RUNTIMES[::-1]:
                    alone = home / f"{rt}-alone.sh"
                    alone.write_text(
                        f"for i in $(seq {steps}); do {rt} --root {shlex.quote(str(home / f'state-{rt}'))} run"
                        f" --bundle {shlex.quote(str(home / 'bundle'))} hetflow-launch-$$-$i >/dev/null; done\n"
                    )
                    rows.append(_row("serial", f"{rt} alone", rt, timed([*wrap, "bash", str(alone)]), steps, note))
        for n in range(repeat):
            for mode in ("serial", "parallel"):
                order = RUNTIMES if n % 2 == 0 else RUNTIMES[::-1]
                for rt in order:
                    loop = loops[(mode, rt)]
                    took = timed([*wrap, "bash", str(loop)], env=engine_env())
                    rows.append(_row(mode, f"podman loop, {rt}", rt, took, steps, note))
                for rt in order:
                    env = {**os.environ, "HETFLOW_HOME": str(home / f"h-{rt}"), "HETFLOW_OCI_RUNTIME": rt}
                    took = timed([*wrap, *hetflow_cmd("run", "-q", "--no-cache", str(wf[mode]))], env=env)
                    rows.append(_row(mode, f"hetflow, {rt}", rt, took, steps, note))
    finally:
        drop_cgroups(runs["serial"] + runs["parallel"])
    return rows


def _row(mode: str, row: str, runtime: str, seconds: float, steps: int, note: str) -> dict[str, object]:
    return {
        "mode": mode,
        "row": row,
        "runtime": runtime,
        "seconds": round(seconds, 3),
        "ms_per_step": round(1000 * seconds / steps, 1),
        "steps": steps,
        "note": note,
    }


def print_table(rows: list[dict[str, object]]) -> None:
    by: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        by.setdefault((str(r["mode"]), str(r["row"])), []).append(float(str(r["seconds"])))
    steps = int(str(rows[0]["steps"]))
    print(f"\n{steps} trivial steps; ratio: against the podman loop with runc in the same mode")
    print(f"{'':9} {'':20} {'median s':>9} {'ms/step':>8} {'ratio':>6}  runs")
    for (mode, name), ts in by.items():
        med, base = statistics.median(ts), statistics.median(by[(mode, "podman loop, runc")])
        print(f"{mode:9} {name:20} {med:9.2f} {1000 * med / steps:8.0f} {med / base:6.2f}  {len(ts)}")
    if rows[0]["note"]:
        print(f"note: {rows[0]['note']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; engine {find_engine()}; load {os.getloadavg()[0]:.2f}")
    print_table(launch_rows(args.steps, args.repeat))
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
