"""Overhead figures for the local runner, each against its anchor measured in the same run.

1. 50 trivial steps (`true`) through `hetflow run` against the same 50 containers
   started by a plain shell loop of `podman run --rm` (the anchor).  Two more rows
   separate the causes: the loop with hetflow's own flags (no network is most of the
   difference), and hetflow with each step taking every CPU, so one runs at a time.
2. The meanpool CPU variant (`pool.py`) in a hetflow container against the same script
   on the host.  "Host" here is the image's own root file system entered with chroot:
   the same Python, NumPy and BLAS, without namespaces, cgroups or seccomp, which is
   what "bare metal" means in the GPU-containers talk (it found containers within 10%).

    python -m bench.overhead [--steps 50] [--repeat 3] [--size 4096 --iterations 256]

Timings are wall-clock on this machine; nothing here touches a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from demo.images import build_tiny_image

from hetflow.config import engine_env, find_engine, hetflow_home

BUSYBOX = "localhost/hetflow-test/busybox:latest"
NUMPY = "localhost/hetflow-examples/numpy:latest"
ROOT = Path(__file__).resolve().parent.parent


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


def bench_trivial(n: int, repeat: int, home: Path) -> list[tuple[str, float]]:
    build_tiny_image(BUSYBOX)
    home.mkdir(parents=True, exist_ok=True)
    wf = home / "trivial.yaml"
    wf.write_text(trivial_workflow(n))
    serial = home / "serial.yaml"
    serial.write_text(trivial_workflow(n, cpus=os.cpu_count() or 1))
    env = {**os.environ, "HETFLOW_HOME": str(home)}
    podman = find_engine()
    loop = f"for i in $(seq {n}); do {podman} run --rm {BUSYBOX} true >/dev/null; done"
    # the same flags hetflow passes (hardening, no network, limits), still one at a time
    flags = (
        "--cap-drop=all --security-opt no-new-privileges --read-only --tmpfs /tmp "
        f"--network none --pull never --user {os.getuid()}:{os.getgid()} --cpus 1 --memory 512m"
    )
    loop_same = f"for i in $(seq {n}); do {podman} run --rm {flags} {BUSYBOX} true >/dev/null; done"
    rows: list[tuple[str, float]] = []
    for _ in range(repeat):
        rows.append(("shell loop", timed(["bash", "-c", loop], env=engine_env())))
        rows.append(("loop, same flags", timed(["bash", "-c", loop_same], env=engine_env())))
        rows.append(("hetflow", timed(hetflow_cmd("run", "-q", str(wf)), env=env)))
        rows.append(("hetflow, serial", timed(hetflow_cmd("run", "-q", str(serial)), env=env)))
    return rows


def bench_meanpool(size: int, iterations: int, repeat: int, home: Path) -> list[tuple[str, float]]:
    rootfs = hetflow_home() / "cache" / "rootfs-bookworm-numpy"
    if not (rootfs / "usr" / "bin" / "python3").exists():
        sys.exit(f"bench: {rootfs} is missing; run 'make images' first")
    app = ROOT / "examples" / "meanpool" / "app"
    data = Path(tempfile.mkdtemp(dir=rootfs / "tmp"))
    inside = "/" + str(data.relative_to(rootfs))
    subprocess.run(["cp", "-r", str(app), str(data / "app")], check=True)
    timed(
        [
            "chroot",
            str(rootfs),
            "python3",
            f"{inside}/app/generate.py",
            "--size",
            str(size),
            "--out",
            f"{inside}/matrix.npy",
        ]
    )
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
    env = {**os.environ, "HETFLOW_HOME": str(home)}
    host = [
        "chroot",
        str(rootfs),
        "python3",
        f"{inside}/app/pool.py",
        "--iterations",
        str(iterations),
        "--in",
        f"{inside}/matrix.npy",
        "--out",
        f"{inside}/pooled.npy",
    ]
    rows: list[tuple[str, float]] = []
    for _ in range(repeat):
        rows.append(("host (chroot)", timed(host)))
        timed(hetflow_cmd("run", "-q", str(wf)), env=env)
        runs = json.loads(
            subprocess.run(
                hetflow_cmd("ps", "--all", "--json"), env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        step = next(s for s in runs[0]["steps"] if s["step"] == "pool")
        rows.append(("container", step["ended"] - step["started"]))
    subprocess.run(["rm", "-rf", str(data)], check=True)
    return rows


def table(title: str, rows: list[tuple[str, float]], anchor: str) -> None:
    by: dict[str, list[float]] = {}
    for name, t in rows:
        by.setdefault(name, []).append(t)
    base = statistics.median(by[anchor])
    print(f"\n{title}")
    print(f"{'':16} {'median s':>9} {'min s':>7} {'max s':>7} {'ratio':>6}  runs")
    for name, ts in by.items():
        med = statistics.median(ts)
        print(f"{name:16} {med:9.2f} {min(ts):7.2f} {max(ts):7.2f} {med / base:6.2f}  {len(ts)}")


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
        print(f"machine: {os.cpu_count()} CPUs; engine {find_engine()}")
        table(
            f"{args.steps} trivial steps (`true`): hetflow run vs a shell loop of podman run (anchor)",
            bench_trivial(args.steps, args.repeat, home / "t"),
            "shell loop",
        )
        if not args.skip_meanpool:
            table(
                f"meanpool CPU variant ({args.size}x{args.size}, {args.iterations} iterations): "
                "container vs host (anchor)",
                bench_meanpool(args.size, args.iterations, args.repeat, home / "m"),
                "host (chroot)",
            )


if __name__ == "__main__":
    main()
