"""Checkpoint and restore cost against resident memory, and the work a checkpoint saves against a
restart from zero: ``python -m bench.local.checkpoint [--quick] [--json]``.

Every container runs with hetflow's own flags (``engine.run_args`` of a ``ContainerSpec``: all
capabilities dropped, no-new-privileges, read-only root, tmpfs /tmp, ``--network none``, the
submitter's ``--user``, ``--cpus 1``, a ``--memory`` limit, /out bind-mounted, a k8s-file log path)
plus ``--passwd=false`` (without it podman 4.3's restore fails: runc cannot stat the old container's
userdata/passwd).  podman runs with hetflow's containers.conf and the CRIU 4.1.1 that ``make criu``
builds (``$VENV/libexec/hetflow/criu``) first on PATH.  The workload is bench/local/ckptwork.c, a static
C program in an image built here (``localhost/hetflow-bench/ckptwork``): it fills MIB MiB with data
from a seed taken at start, then counts ticks and writes TICK SEED CHECKSUM to /out/state.

1. **Against resident memory** (64 MiB .. 2 GiB): ``podman container checkpoint --leave-running
   --export F --compress none``, the archive's size, then (the original removed) ``podman container
   restore --import F --name NEW``; median of the repetitions, plus one zstd row.  Each restore is
   checked: the restored process goes on from the tick it was dumped at (not from 1) with the same
   seed and the same checksum of every page of its memory.
2. **Work saved**: a counter of T seconds of CPU work (ticks of ~10 ms, calibrated here), killed
   with ``podman kill --signal KILL`` when 70% of its ticks are done, run three ways in one go: with no crash (the
   reference), restarted from zero after the crash (the anchor), and restored from its last
   checkpoint (every E seconds, exported to a file as hetflow keeps it) after the crash.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.local.checkpoint_report import render
from hetflow.config import engine_env, find_engine, submitter
from hetflow.execute.engine import ContainerSpec, Mount, run_args

IMAGE = "localhost/hetflow-bench/ckptwork:latest"
SOURCE = Path(__file__).with_name("ckptwork.c")
HASH_LABEL = "hetflow.bench.hash"
WORKDIR = Path("/tmp/bench-ckpt")
CRIU = Path(sys.prefix) / "libexec" / "hetflow" / "criu"
RECORD = 128  # bytes of ckptwork's state record
TICK_S = 0.01  # the aimed length of one tick of work (part 2)
SIZES_MIB = (64, 256, 1024, 2048)


def criu_problem(criu: Path = CRIU) -> str:
    """Why checkpoints cannot be measured here ('' when they can): CRIU 4 is not built."""
    if not os.access(criu, os.X_OK):
        return f"CRIU is not built: no {criu} (run `make criu`)"
    proc = subprocess.run([str(criu), "--version"], capture_output=True, text=True, check=False)
    if "Version: 4." not in proc.stdout:
        return f"{criu} is not CRIU 4 ({(proc.stdout + proc.stderr).strip() or 'no output'})"
    if shutil.which("gcc") is None:
        return "gcc is not installed (apt-get install -y gcc): the workload is a static C program"
    return ""


@dataclass(frozen=True)
class State:
    """One record of ckptwork's /out/state."""

    tick: int
    seed: str
    checksum: str
    done: bool


def read_state(path: Path) -> State | None:
    """The workload's last record, or None (no file yet, or reset by ``reset_state``)."""
    try:
        fields = path.read_text().split()
    except FileNotFoundError:
        return None
    if len(fields) < 4 or not fields[0].isdigit():
        return None
    return State(int(fields[0]), fields[1], fields[2], fields[3] == "1")


def reset_state(path: Path) -> None:
    """Blank the record in place: the file keeps its size, which a restore of the process that
    holds it open needs."""
    with path.open("r+b") as f:
        f.write(b"reset".ljust(RECORD - 1) + b"\n")


class Podman:
    """podman with hetflow's containers.conf and the built CRIU first on PATH."""

    def __init__(self, criu: Path = CRIU) -> None:
        self.env = engine_env()
        self.env["PATH"] = f"{criu.parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.binary = find_engine(self.env)
        if Path(self.binary).name != "podman":
            sys.exit(f"bench: checkpoints are measured with podman; the engine found is {self.binary}")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.binary, *args], env=self.env, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} ... exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def timed(self, *args: str) -> float:
        t0 = time.monotonic()
        self.run(*args)
        return time.monotonic() - t0

    def remove(self, *names: str) -> None:
        for name in names:
            self.run("rm", "--force", "--time", "0", name, check=False)

    def version(self) -> str:
        return self.run("version", "--format", "{{.Client.Version}}").stdout.strip()


def build_workload(podman: Podman, home: Path) -> Path:
    """Compile bench/local/ckptwork.c (static) to HOME/ckptwork and import it as IMAGE, unless an image
    of that name already carries this source's hash; returns the host binary."""
    binary = home / "ckptwork"
    subprocess.run(["gcc", "-O2", "-static", "-o", str(binary), str(SOURCE)], check=True)
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    got = podman.run("image", "inspect", "--format", f'{{{{index .Labels "{HASH_LABEL}"}}}}', IMAGE, check=False)
    if got.returncode == 0 and got.stdout.strip() == digest:
        return binary
    with tempfile.TemporaryDirectory(prefix="ckptwork-", dir=home) as tmp:
        root = Path(tmp)
        for folder in ("out", "tmp"):
            (root / folder).mkdir()
        (root / "tmp").chmod(0o1777)
        shutil.copy2(binary, root / "ckptwork")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            [podman.binary, "import", "--change", f"LABEL {HASH_LABEL}={digest}", "-", IMAGE],
            stdin=tar.stdout,
            env=podman.env,
            check=True,
            capture_output=True,
        )
        tar.wait()
    return binary


def container_args(name: str, out: Path, mib: int, ticks: int = 0, iters: int = 0) -> list[str]:
    """``podman run`` arguments for ckptwork with hetflow's flags (plus ``--passwd=false``)."""
    uid, gid = submitter()
    spec = ContainerSpec(
        name=name,
        image=IMAGE,
        command=("/ckptwork", str(mib), str(ticks), str(iters), "/out/state"),
        user=f"{uid}:{gid}",
        labels={"hetflow.bench": "checkpoint"},
        env={},
        mounts=(Mount(str(out), "/out", read_only=False),),
        cpus=1.0,
        memory=(mib + mib // 8 + 64) << 20,
        log_path=str(out.parent / f"{name}.log"),
    )
    args = run_args(spec, engine="podman")
    return [args[0], "--passwd=false", *args[1:]]


def wait_for(path: Path, ok: Callable[[State], bool], what: str, limit: float = 120.0) -> State:
    """Poll the state file until a record satisfies ``ok``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        state = read_state(path)
        if state is not None and ok(state):
            return state
        time.sleep(0.02)
    raise RuntimeError(f"bench: no record {what} in {path} after {limit:.0f} s (last: {read_state(path)})")


def rss_mib(podman: Podman, name: str) -> float:
    """The container's process's resident set (VmRSS), MiB."""
    pid = podman.run("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(frozen=True)
class SizeRow:
    """Part 1: one resident size and compression."""

    mib: int
    compress: str
    reps: int
    rss_mib: float
    archive_mib: float
    checkpoint_s: float  # median
    restore_s: float  # median
    kept_state: bool  # every restore went on from its dump with the same seed and checksum


def one_checkpoint(
    podman: Podman, home: Path, mib: int, compress: str, rep: int
) -> tuple[float, float, float, float, bool]:
    """Start, checkpoint (leave running, export), remove, restore, check: (rss MiB, archive MiB,
    checkpoint s, restore s, state kept)."""
    d = home / f"size-{mib}-{compress}-{rep}"
    (d / "out").mkdir(parents=True)
    name = f"hf-bench-ckpt-{os.getpid()}-{mib}-{compress}-{rep}"
    state, archive = d / "out" / "state", d / "ckpt.tar"
    try:
        podman.run(*container_args(name, d / "out", mib))
        first = wait_for(state, lambda s: s.tick >= 1, "after filling the memory")
        rss = rss_mib(podman, name)
        before = wait_for(state, lambda s: s.tick > first.tick, "of a second tick")
        ckpt = podman.timed(
            "container", "checkpoint", "--leave-running", "--export", str(archive), "--compress", compress, name
        )
        size = archive.stat().st_size / 2**20
        podman.remove(name)
        reset_state(state)
        restore = podman.timed("container", "restore", "--import", str(archive), "--name", f"{name}-r")
        resumed = wait_for(state, lambda s: True, "from the restored process")
        later = wait_for(state, lambda s: s.tick >= resumed.tick + 10, "with a checksum taken after the restore")
        kept = resumed.tick >= before.tick and (later.seed, later.checksum) == (first.seed, first.checksum)
        return rss, size, ckpt, restore, kept
    finally:
        podman.remove(name, f"{name}-r")
        shutil.rmtree(d, ignore_errors=True)


def size_row(podman: Podman, home: Path, mib: int, compress: str, reps: int) -> SizeRow:
    got = [one_checkpoint(podman, home, mib, compress, rep) for rep in range(reps)]
    return SizeRow(
        mib=mib,
        compress=compress,
        reps=reps,
        rss_mib=statistics.median(g[0] for g in got),
        archive_mib=statistics.median(g[1] for g in got),
        checkpoint_s=statistics.median(g[2] for g in got),
        restore_s=statistics.median(g[3] for g in got),
        kept_state=all(g[4] for g in got),
    )


def calibrate(binary: Path, home: Path) -> int:
    """Iterations of ckptwork's work loop in one TICK_S tick on this machine (the host binary; the
    fastest of 3 tries, the one least slowed by other work)."""
    iters, ticks, took = 1_000_000, 50, []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([str(binary), "1", str(ticks), str(iters), str(home / "calibrate")], check=True)
        took.append(time.monotonic() - t0)
    return max(1000, round(TICK_S / (min(took) / (iters * ticks))))


@dataclass
class WorkRun:
    """Part 2: one run of the counter to its end."""

    name: str
    wall_s: float = 0.0
    ticks_at_kill: int = 0  # progress when killed
    kill_s: float = 0.0  # from the start to the kill (plain: to the tick the others are killed at)
    ticks_resumed: int = 0  # where the second start began (0: from zero)
    checkpoints: int = 0
    checkpoint_s: float = 0.0  # the checkpoint commands, together
    restore_s: float = 0.0
    finished: bool = False  # the last record says done, with the first start's seed when restored
    exit_code: str = ""  # the last container's, as podman wait prints it
    last_tick: int = 0  # the last record's tick


def work_run(
    podman: Podman, home: Path, mode: str, ticks: int, iters: int, mib: int, every: float, kill_at: int
) -> WorkRun:
    """One run: ``plain`` (no crash), ``restart`` (kill -9 once KILL_AT ticks are done, start again
    from zero) or ``restore`` (checkpoint every EVERY s, kill -9 at KILL_AT ticks, restore the last
    checkpoint).  The kill follows progress, not the clock, so that it falls at the same point of
    the work in both crash runs whatever the machine's load."""
    d = home / f"work-{mode}"
    (d / "out").mkdir(parents=True)
    name = f"hf-bench-ckpt-{os.getpid()}-{mode}"
    state, archive, part = d / "out" / "state", d / "ckpt.tar", d / "ckpt.tar.part"
    run, second = WorkRun(mode), name
    try:
        t0 = time.monotonic()
        podman.run(*container_args(name, d / "out", mib, ticks, iters))
        first = wait_for(state, lambda s: s.tick >= 1, "of a first tick")
        next_at = t0 + every
        while (read_state(state) or first).tick < kill_at:
            if mode == "restore" and time.monotonic() >= next_at:
                run.checkpoint_s += podman.timed(
                    "container", "checkpoint", "--leave-running", "--export", str(part), "--compress", "none", name
                )
                part.replace(archive)
                run.checkpoints += 1
                next_at += every
            time.sleep(0.01)
        run.kill_s = time.monotonic() - t0
        if mode == "plain":
            run.exit_code = podman.run("wait", name).stdout.strip()
        else:
            podman.run("kill", "--signal", "KILL", name)
            run.ticks_at_kill = wait_for(state, lambda s: True, "of the killed process").tick  # its last
            podman.remove(name)
            reset_state(state)
            second = f"{name}-2"
            if mode == "restart":
                podman.run(*container_args(second, d / "out", mib, ticks, iters))
            else:
                run.restore_s = podman.timed("container", "restore", "--import", str(archive), "--name", second)
            run.ticks_resumed = wait_for(state, lambda s: True, "after the second start").tick
            run.exit_code = podman.run("wait", second).stdout.strip()
        run.wall_s = time.monotonic() - t0
        last = read_state(state)
        run.last_tick = last.tick if last else -1
        run.finished = last is not None and last.done and last.tick == ticks
        if mode == "restore" and last is not None:
            run.finished = run.finished and (last.seed, last.checksum) == (first.seed, first.checksum)
        return run
    finally:
        podman.remove(name, second)
        shutil.rmtree(d, ignore_errors=True)


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    reps: int
    reps_largest: int
    zstd_mib: int
    work_s: float
    every_s: float
    kill_at: float  # the fraction of the work done when the container is killed
    work_mib: int


FULL = Plan(SIZES_MIB, 3, 3, 1024, 60.0, 10.0, 0.7, 256)
QUICK = Plan((64,), 1, 1, 64, 6.0, 1.5, 0.7, 32)


def measure(plan: Plan, home: Path | None = None, log: Callable[[str], None] = lambda _: None) -> dict[str, object]:
    """Both parts, in one run: {"machine", "sizes": [SizeRow...], "work": {...}}."""
    if why := criu_problem():
        sys.exit(f"bench: {why}")
    WORKDIR.mkdir(parents=True, exist_ok=True)
    if home is None:
        with tempfile.TemporaryDirectory(prefix="run-", dir=WORKDIR) as tmp:
            return measure(plan, Path(tmp), log)
    podman = Podman()
    binary = build_workload(podman, home)
    rows = []
    for mib in plan.sizes:
        log(f"checkpoint/restore at {mib} MiB")
        rows.append(size_row(podman, home, mib, "none", plan.reps_largest if mib == max(plan.sizes) else plan.reps))
    log(f"checkpoint/restore at {plan.zstd_mib} MiB, zstd")
    rows.append(size_row(podman, home, plan.zstd_mib, "zstd", 1 if plan.reps == 1 else 3))
    iters = calibrate(binary, home)
    ticks = round(plan.work_s / TICK_S)
    runs, kill_at = {}, round(plan.kill_at * ticks)
    for mode in ("plain", "restart", "restore"):
        log(f"work run: {mode}")
        runs[mode] = work_run(podman, home, mode, ticks, iters, plan.work_mib, plan.every_s, kill_at)
    return {
        "machine": machine(podman),
        "sizes": [asdict(r) for r in rows],
        "work": {
            "work_s": plan.work_s,
            "every_s": plan.every_s,
            "kill_at": plan.kill_at,
            "mib": plan.work_mib,
            "ticks": ticks,
            "iters_per_tick": iters,
            "runs": {k: asdict(v) for k, v in runs.items()},
        },
    }


def machine(podman: Podman) -> str:
    criu = subprocess.run([str(CRIU), "--version"], capture_output=True, text=True, check=False).stdout.split()
    load = os.getloadavg()[0]
    return (
        f"podman {podman.version()} + runc, CRIU {criu[1] if len(criu) > 1 else '?'}, "
        f"{os.cpu_count()} CPUs shared with other work (load {load:.1f} at the end)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.local.checkpoint", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 64 MiB once, 6 s of work (under a minute)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    got = measure(
        QUICK if args.quick else FULL, log=lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr)
    )
    print(json.dumps(got, indent=2) if args.json else render(got))
    return 0


if __name__ == "__main__":
    # stopped with SIGTERM or SIGINT (even as a background job, which ignores SIGINT), the finally
    # blocks still remove the containers and delete the archives
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
