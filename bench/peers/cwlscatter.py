"""A scatter of N small CWL jobs through hetflow's runner against ``cwltool --parallel
--podman`` on the same tool, image and inputs, one after the other in one run (issue 40):

    python -m bench.peers.cwlscatter [--jobs 500] [--batch 50] [--image docker.io/debian:stable-slim]

Each job is ``echo N`` into a file in the image given (the conformance harness's stand-in);
hetflow runs with a fresh HETFLOW_HOME (nothing cached), a container per job; then with
``--hetflow-batch N`` on another fresh home (N jobs to a container, one after another); then
again on the first home (every job from the cache).  Prints one line per runner: wall
seconds, jobs per second, and the ratio to cwltool's wall time."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TOOL = """\
cwlVersion: v1.2
class: CommandLineTool
requirements:
  DockerRequirement: {{dockerPull: "{image}"}}
baseCommand: echo
inputs:
  n: {{type: int, inputBinding: {{position: 1}}}}
stdout: out.txt
outputs:
  out: {{type: stdout}}
"""

WORKFLOW = """\
cwlVersion: v1.2
class: Workflow
requirements:
  ScatterFeatureRequirement: {}
inputs:
  ns: "int[]"
outputs:
  outs: {type: "File[]", outputSource: each/out}
steps:
  each: {run: tool.cwl, scatter: n, in: {n: ns}, out: [out]}
"""


# cwltool --podman adds --userns=keep-id, which podman refuses outside rootless mode: as root,
# cwltool finds this podman first on PATH, the same podman without that flag
SHIM = """#!/bin/sh
for a; do shift; [ "$a" = "--userns=keep-id" ] && continue; set -- "$@" "$a"; done
exec {podman} "$@"
"""


def _podman_shim(folder: Path) -> str:
    """PATH with the keep-id-dropping podman first where we are root."""
    path = os.environ.get("PATH", "")
    real = shutil.which("podman")
    if os.geteuid() != 0 or real is None:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "podman").write_text(SHIM.format(podman=real))
    (folder / "podman").chmod(0o755)
    return f"{folder}:{path}"


def _timed(cmd: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''} failed ({proc.returncode})")
    return took, len(json.loads(proc.stdout)["outs"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--image", default="docker.io/debian:stable-slim")
    parser.add_argument("--batch", type=int, default=50, help="jobs to a container in the batched row")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cwlscatter-") as tmp:
        work = Path(tmp)
        (work / "tool.cwl").write_text(TOOL.format(image=args.image))
        (work / "wf.cwl").write_text(WORKFLOW)
        (work / "job.json").write_text(json.dumps({"ns": list(range(args.jobs))}))
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": str(work / "home")}
        env["PATH"] = _podman_shim(work / "shim")
        hf = [sys.executable, "-m", "hetflow.cwl", "--quiet"]
        cwltool = [str(Path(sys.executable).with_name("cwltool")), "--quiet", "--parallel", "--podman"]
        batched = [*hf, "--hetflow-batch", str(args.batch)]
        rows = []
        for label, base, home in (
            ("hetflow", hf, "home"),
            (f"hetflow --hetflow-batch {args.batch}", batched, "home-batched"),
            ("hetflow, cached rerun", hf, "home"),
            ("cwltool --parallel --podman", cwltool, "home"),
        ):
            out = work / f"out-{len(rows)}"
            took, n = _timed(
                [*base, "--outdir", str(out), "wf.cwl", "job.json"], {**env, "HETFLOW_HOME": str(work / home)}, work
            )
            rows.append((label, took, n))
        anchor = rows[-1][1]
        print(f"{args.jobs} jobs of echo in {args.image}, one run, {os.cpu_count()} cores")
        for label, took, n in rows:
            print(f"  {label:30} {took:8.1f} s  {n / took:7.1f} jobs/s  {anchor / took:5.2f}x cwltool")
    return 0


if __name__ == "__main__":
    sys.exit(main())
