"""Launch overhead of the local runner, each figure against its anchor measured in the same run.

1. Trivial steps (``true`` in the busybox test image), one at a time and then as many at
   once as this machine's CPUs allow, through ``hetflow run --no-cache``, against:

   * the anchor: a shell loop of ``podman run --rm`` with **hetflow's own flags for each
     step** (the argv recorded from hetflow in an untimed run before: hardening, user,
     limits, labels, mounts, log file, cgroup parent; only ``-d`` and the monitor PID file
     become ``--rm``), serially, and through ``xargs -P K`` with hetflow's concurrency K;
   * runc alone: ``runc run`` of the same image's root file system with the same
     hardening written in the OCI config (read-only root, no capabilities,
     no-new-privileges, a new network namespace, the UID:GID, the CPU and memory limits),
     serially; this is the floor under any container engine;
   * a loop of ``podman run --rm`` with podman's default flags, for reference only.

   The ratio column divides by the same-flags loop of the same mode.  hetflow's figure
   includes what the loop does not: starting Python, planning, the state store, reading
   each container's cgroup and logs, and removing every container before it exits.

2. The meanpool CPU variant (``pool.py``) in a hetflow container against the same script
   on the host.  "Host" is the image's own root file system (``podman mount`` of a
   container created from it, so any HETFLOW_HOME works) entered with chroot: the same
   Python, NumPy and BLAS, without namespaces, cgroups or seccomp.

    python -m bench.local.overhead [--steps 50] [--repeat 3] [--size 4096 --iterations 256]

Timings are wall-clock on this machine; nothing here touches a GPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from demo.images import build_tiny_image

from bench.speedrow import Row, emit
from hetflow.config import engine_env, find_engine
from hetflow.execute.backends.local import cgroups

BUSYBOX = "localhost/hetflow-test/busybox:latest"
NUMPY = "localhost/hetflow-examples/numpy:latest"
ROOT = Path(__file__).resolve().parents[2]
MEMORY = 512 * 1024 * 1024  # hetflow's default request for a step that names none


def write_recorder(shim: Path, kept: Path, log: Path, podman: str) -> None:
    """An engine shim that appends each call's arguments to ``log`` (one write a call), keeps a
    copy in ``kept`` of each ``--env-file`` (hetflow removes it once the container exists) and
    points the arguments at the copy, then runs ``podman``."""
    shim.write_text(
        '#!/bin/bash\nargs=("$@")\n'
        "for ((k = 0; k < ${#args[@]}; k++)); do\n"
        '  if [ "${args[k]}" = "--env-file" ]; then\n'
        '    f="${args[k+1]}"; keep="' + str(kept) + '/$(basename "$(dirname "$f")").env"\n'
        '    cp "$f" "$keep" && args[k+1]="$keep"\n'
        "  fi\n"
        "done\n"
        f'line=$(printf "%q " "${{args[@]}}")\nprintf "%s\\n" "$line" >> {shlex.quote(str(log))}\n'
        f'exec {shlex.quote(podman)} "$@"\n'
    )
    shim.chmod(0o755)


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return took


def hetflow_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "hetflow.cli.main", *args]


def trivial_workflow(n: int, cpus: int = 1) -> str:
    steps = "".join(
        f'  t{i}:\n    image: {BUSYBOX}\n    command: ["true"]\n    resources: {{cpus: {cpus}}}\n' for i in range(n)
    )
    return f"apiVersion: hetflow/v1\nname: trivial\nsteps:\n{steps}"


# --- the anchors --------------------------------------------------------------------------


def recorded_runs(wf: Path, home: Path, podman: str) -> list[list[str]]:
    """The ``podman run`` argv hetflow passes for each step of ``wf``, recorded by a shim
    engine in an untimed run (``HETFLOW_ENGINE``)."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / "runs.log"
    shim = home / "podman-recorder"
    # one write per call (appends that small are atomic): hetflow calls the engine from several threads
    # a step's environment comes in an --env-file that hetflow removes once the container
    # exists: the shim keeps a copy for the loop's replay (the same variables, read alike)
    kept = home / "env"
    kept.mkdir(exist_ok=True)
    write_recorder(shim, kept, log, podman)
    env = {**os.environ, "HETFLOW_HOME": str(home / "recording"), "HETFLOW_ENGINE": str(shim)}
    timed(hetflow_cmd("run", "-q", "--no-cache", str(wf)), env=env)
    runs = []
    for line in log.read_text().splitlines():
        argv = shlex.split(line)
        i = argv.index("run") if "run" in argv[:4] else -1
        if i >= 0 and argv[i + 1 : i + 2] == ["-d"]:
            runs.append(argv)
    if not runs:
        sys.exit(f"bench: the recording run of {wf} started no container")
    return runs


def as_loop_command(argv: list[str], podman: str) -> str:
    """hetflow's ``run -d`` argv as the shell loop's ``run --rm``: the same flags, attached,
    without the monitor PID file that only hetflow reads."""
    i = argv.index("run")
    rest = argv[i + 2 :]
    if "--conmon-pidfile" in rest:
        j = rest.index("--conmon-pidfile")
        del rest[j : j + 2]
    return shlex.join([podman, *argv[:i], "run", "--rm", *rest]) + " >/dev/null"


def make_sources(runs: list[list[str]]) -> None:
    """The folders hetflow made for each attempt (its /out staging, its log's folder), made
    here before the loop runs, untimed: the loop gets them for free."""
    for argv in runs:
        for flag, value in itertools.pairwise(argv):
            if flag == "-v":
                Path(value.split(":", 1)[0]).mkdir(parents=True, exist_ok=True)
            elif flag == "--log-opt" and value.startswith("path="):
                Path(value[5:]).parent.mkdir(parents=True, exist_ok=True)


def loop_scripts(runs: list[list[str]], podman: str, home: Path, name: str, at_once: int) -> tuple[Path, Path]:
    """A serial script and an ``xargs -P at_once`` script of the same commands."""
    make_sources(runs)
    commands = [as_loop_command(r, podman) for r in runs]
    serial = home / f"{name}-serial.sh"
    serial.write_text("\n".join(commands) + "\n")
    listing = home / f"{name}-commands.txt"
    listing.write_text("\n".join(commands) + "\n")
    parallel = home / f"{name}-parallel.sh"
    parallel.write_text(f"xargs -d '\\n' -P {at_once} -I CMD bash -c CMD < {shlex.quote(str(listing))}\n")
    return serial, parallel


def drop_cgroups(runs: list[list[str]]) -> None:
    """The replayed runs leave their parent cgroups (hetflow removes its own)."""
    layout = cgroups.detect()
    if layout is None:
        return
    for argv in runs:
        if "--cgroup-parent" in argv:
            cgroups.remove(layout, Path(argv[argv.index("--cgroup-parent") + 1]).name)


@contextmanager
def mounted_rootfs(image: str) -> Iterator[Path]:
    """The image's root file system, writable (a created container's, ``podman mount``)."""
    podman = find_engine()
    env = engine_env()
    cid = subprocess.run(
        [podman, "create", "--pull", "never", image, "true"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        path = subprocess.run(
            [podman, "mount", cid], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        yield Path(path)
    finally:
        subprocess.run([podman, "rm", "-f", cid], env=env, capture_output=True, check=False)


def runc_bundle(rootfs: Path, bundle: Path, cpus: float) -> None:
    """An OCI bundle for ``true`` with the hardening hetflow asks podman for."""
    bundle.mkdir(parents=True, exist_ok=True)
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True, capture_output=True)
    config = json.loads((bundle / "config.json").read_text())
    config["root"] = {"path": str(rootfs), "readonly": True}
    proc = config["process"]
    proc.update(terminal=False, args=["true"], noNewPrivileges=True, user={"uid": os.getuid(), "gid": os.getgid()})
    proc["capabilities"] = {k: [] for k in proc.get("capabilities", {})}
    config["mounts"].append(
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
    )
    config["linux"]["resources"] = {
        **config["linux"].get("resources", {}),
        "memory": {"limit": MEMORY},
        "cpu": {"quota": int(cpus * 100000), "period": 100000},
    }
    (bundle / "config.json").write_text(json.dumps(config))


# --- 1. trivial steps ---------------------------------------------------------------------


def bench_trivial(n: int, repeat: int, home: Path) -> list[tuple[str, str, float]]:
    """(mode, row, seconds) for every timed run."""
    build_tiny_image(BUSYBOX)
    home.mkdir(parents=True, exist_ok=True)
    podman = find_engine()
    cpus = os.cpu_count() or 1
    at_once = cpus  # hetflow runs a 1-CPU step per CPU at once
    wf_serial, wf_parallel = home / "serial.yaml", home / "parallel.yaml"
    wf_serial.write_text(trivial_workflow(n, cpus=cpus))  # every CPU each: one at a time
    wf_parallel.write_text(trivial_workflow(n, cpus=1))
    runs_serial = recorded_runs(wf_serial, home / "rec-serial", podman)
    runs_parallel = recorded_runs(wf_parallel, home / "rec-parallel", podman)
    if len(runs_serial) != n or len(runs_parallel) != n:
        sys.exit(f"bench: recorded {len(runs_serial)} and {len(runs_parallel)} runs, expected {n} each")
    serial_sh, _ = loop_scripts(runs_serial, podman, home, "serial", 1)
    _, parallel_sh = loop_scripts(runs_parallel, podman, home, "parallel", at_once)
    default_sh = home / "default.sh"
    default_sh.write_text(f"for i in $(seq {n}); do {shlex.quote(podman)} run --rm {BUSYBOX} true >/dev/null; done\n")
    # runc, as the loop's podman uses (hetflow's containers.conf); and no runtime probe in a timed run
    env = {**os.environ, "HETFLOW_HOME": str(home / "h"), "HETFLOW_OCI_RUNTIME": "runc"}
    engine = engine_env()
    rows: list[tuple[str, str, float]] = []
    with mounted_rootfs(BUSYBOX) as rootfs:
        bundle = home / "bundle"
        runc_bundle(rootfs, bundle, cpus=float(cpus))
        runc_sh = home / "runc.sh"
        runc_sh.write_text(
            f"for i in $(seq {n}); do runc run --bundle {shlex.quote(str(bundle))} hetflow-bench-$$-$i >/dev/null; "
            "done\n"
        )
        for _ in range(repeat):
            rows.append(("serial", "podman loop, same flags", timed(["bash", str(serial_sh)], env=engine)))
            rows.append(("serial", "hetflow", timed(hetflow_cmd("run", "-q", "--no-cache", str(wf_serial)), env=env)))
            rows.append(("serial", "runc loop", timed(["bash", str(runc_sh)])))
            rows.append(("serial", "podman loop, defaults", timed(["bash", str(default_sh)], env=engine)))
            rows.append(("parallel", "podman loop, same flags", timed(["bash", str(parallel_sh)], env=engine)))
            rows.append(
                ("parallel", "hetflow", timed(hetflow_cmd("run", "-q", "--no-cache", str(wf_parallel)), env=env))
            )
    drop_cgroups(runs_serial + runs_parallel)
    return rows


# --- 2. meanpool ----------------------------------------------------------------------------


def bench_meanpool(size: int, iterations: int, repeat: int, home: Path) -> list[tuple[str, str, float]]:
    home.mkdir(parents=True, exist_ok=True)
    wf = home / "pool.yaml"
    wf.write_text(f"""apiVersion: hetflow/v1
name: poolbench
steps:
  pool:
    image: {NUMPY}
    command: [python3, /app/meanpool/pool.py, --iterations, "{iterations}", --in, /in/m/matrix.npy,
              --out, /out/pooled.npy]
    resources: {{cpus: 2, memory: 2Gi}}
    inputs: {{m: gen/matrix.npy}}
    outputs: [pooled.npy]
  gen:
    image: {NUMPY}
    command: [python3, /app/meanpool/generate.py, --size, "{size}", --out, /out/matrix.npy]
    outputs: [matrix.npy]
""")
    env = {**os.environ, "HETFLOW_HOME": str(home / "h")}
    rows: list[tuple[str, str, float]] = []
    with mounted_rootfs(NUMPY) as rootfs:
        if not (rootfs / "usr" / "bin" / "python3").exists():
            sys.exit(f"bench: {NUMPY} has no python3; run 'make images' first")
        data = Path(tempfile.mkdtemp(dir=rootfs / "tmp"))
        inside = "/" + str(data.relative_to(rootfs))
        shutil.copytree(ROOT / "examples" / "meanpool" / "app", data / "app")
        gen = ["python3", f"{inside}/app/generate.py", "--size", str(size), "--out", f"{inside}/matrix.npy"]
        timed(["chroot", str(rootfs), *gen])
        host = ["chroot", str(rootfs), "python3", f"{inside}/app/pool.py", "--iterations", str(iterations)]
        host += ["--in", f"{inside}/matrix.npy", "--out", f"{inside}/pooled.npy"]
        for _ in range(repeat):
            rows.append(("meanpool", "host (chroot)", timed(host)))
            timed(hetflow_cmd("run", "-q", "--no-cache", str(wf)), env=env)
            runs = json.loads(
                subprocess.run(
                    hetflow_cmd("ps", "--all", "--json"), env=env, capture_output=True, text=True, check=True
                ).stdout
            )
            step = next(s for s in runs[0]["steps"] if s["step"] == "pool")
            rows.append(("meanpool", "container", step["ended"] - step["started"]))
    return rows


# --- tables -------------------------------------------------------------------------------


def table(title: str, rows: list[tuple[str, str, float]], anchor: str, *, per: int = 0) -> None:
    by: dict[tuple[str, str], list[float]] = {}
    for mode, name, t in rows:
        by.setdefault((mode, name), []).append(t)
    print(f"\n{title}")
    unit = f" {'ms/step':>8}" if per else ""
    print(f"{'':9} {'':24} {'median s':>9}{unit} {'min s':>7} {'max s':>7} {'ratio':>6}  runs")
    for (mode, name), ts in by.items():
        base = statistics.median(by[(mode, anchor)])
        med = statistics.median(ts)
        each = f" {1000 * med / per:8.0f}" if per else ""
        ratio = f"{med / base:6.2f}"
        print(f"{mode:9} {name:24} {med:9.2f}{each} {min(ts):7.2f} {max(ts):7.2f} {ratio}  {len(ts)}")


def emit_launch_rows(rows: list[tuple[str, str, float]], steps: int) -> None:
    """issue 43's rows: unbatched per-step launch at most 1.05x the same-flags podman loop."""
    for mode in sorted({m for m, _, _ in rows}):
        mine = [t for m, r, t in rows if (m, r) == (mode, "hetflow")]
        loop = [t for m, r, t in rows if (m, r) == (mode, "podman loop, same flags")]
        if mine and loop:
            anchor = statistics.median(loop)
            target = f"{steps} trivial steps unbatched, {mode}, at most 1.05x the podman run loop"
            ratio = statistics.median(mine) / anchor
            emit(Row(target, ratio, "x", "podman loop (s)", anchor, 1.05, "bench.local.overhead"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--iterations", type=int, default=256)
    ap.add_argument("--skip-meanpool", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        home = Path(tmp)
        print(f"machine: {os.cpu_count()} CPUs; engine {find_engine()}; load {os.getloadavg()[0]:.2f}")
        rows = bench_trivial(args.steps, args.repeat, home / "t")
        table(
            f"{args.steps} trivial steps (`true`): hetflow run against a shell loop of podman run --rm with "
            "hetflow's flags (the anchor, ratio 1.00) in the same mode",
            rows,
            "podman loop, same flags",
            per=args.steps,
        )
        hetflow_serial = statistics.median([t for m, r, t in rows if (m, r) == ("serial", "hetflow")])
        runc = statistics.median([t for m, r, t in rows if (m, r) == ("serial", "runc loop")])
        print(f"hetflow serial against runc alone (no engine at all): {hetflow_serial / runc:.1f}x")
        emit_launch_rows(rows, args.steps)
        if not args.skip_meanpool:
            table(
                f"meanpool CPU variant ({args.size}x{args.size}, {args.iterations} iterations): "
                "container vs host (anchor)",
                bench_meanpool(args.size, args.iterations, args.repeat, home / "m"),
                "host (chroot)",
            )


if __name__ == "__main__":
    main()
