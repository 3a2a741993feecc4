"""The sharing part: 1, 2 and 4 processes of one CUDA loop on a GPU, the slowdown fitted by
hetflow's own ``learn_slowdown``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import DEFAULT_SLOWDOWN, WORK, CheckError, Part
from .machine import Machine, sh

LOOP_RE = re.compile(r"loop n=(\d+) iters=(\d+) seconds=([0-9.]+)")


def loop_seconds(outputs: list[str]) -> list[float]:
    """Each `check loop` process's own kernel time (its line), in order."""
    out = []
    for text in outputs:
        m = LOOP_RE.search(text)
        if m is None:
            raise CheckError(f"a loop process printed no time: {text.strip()[-300:]!r}")
        out.append(float(m.group(3)))
    return out


def sharing_samples(times: dict[int, list[float]]) -> list[dict[str, float]]:
    """``times[load]``: each process's seconds at that load (load 1: alone).  One sample per
    load above 1: the mean shared time against the solo time, as ``SharedSample`` takes it."""
    if 1 not in times or not times[1]:
        raise CheckError("no solo run to compare with")
    solo = sum(times[1]) / len(times[1])
    return [
        {"solo": solo, "shared": sum(ts) / len(ts), "load": float(k)} for k, ts in sorted(times.items()) if k > 1 and ts
    ]


def fit_slowdown(samples: list[dict[str, float]], learn: Callable[[Any], float | None]) -> float | None:
    """``s`` by hetflow's own ``learn_slowdown`` (passed in: the one definition)."""
    from types import SimpleNamespace

    return learn([SimpleNamespace(**s) for s in samples])


def run_loops(prog: Path, k: int, n: int, iters: int, env: dict[str, str]) -> list[float]:
    procs = [
        subprocess.Popen(
            [str(prog), "loop", str(n), str(iters)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(k)
    ]
    outs = [pr.communicate(timeout=300)[0] for pr in procs]
    return loop_seconds(outs)


def part_sharing(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        prog = m.build_program()
        code = "from hetflow.plan import learn_slowdown; print(learn_slowdown.__module__)"
        m.python(code)  # hetflow's fit is importable: the one definition the fit below uses
        sys.path.insert(0, str(m.site))
        from hetflow.plan import learn_slowdown

        env = dict(os.environ)
        n, iters = 2048, 400
        modes: dict[str, Any] = {}
        times = {k: run_loops(prog, k, n, iters, env) for k in (1, 2, 4)}
        samples = sharing_samples(times)
        modes["time-slicing"] = {"times": times, "samples": samples, "s": fit_slowdown(samples, learn_slowdown)}
        mps = shutil.which("nvidia-cuda-mps-control")
        if mps:
            pipe, logs = WORK / "mps-pipe", WORK / "mps-log"
            pipe.mkdir(parents=True, exist_ok=True)
            logs.mkdir(parents=True, exist_ok=True)
            menv = {**env, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
            try:
                sh([mps, "-d"], env=menv, timeout=30)
                mtimes = {k: run_loops(prog, k, n, iters, menv) for k in (1, 2, 4)}
                msamples = sharing_samples(mtimes)
                modes["mps"] = {"times": mtimes, "samples": msamples, "s": fit_slowdown(msamples, learn_slowdown)}
            except CheckError as exc:
                modes["mps"] = {"error": str(exc)}
            finally:
                subprocess.run([mps], input="quit\n", text=True, env=menv, capture_output=True, timeout=30)
        else:
            modes["mps"] = {"error": "nvidia-cuda-mps-control is not on this machine"}
        p.details["modes"] = modes
        gpu = report["device"].get("gpu", "")
        (m.out / "slowdown.json").write_text(
            json.dumps({"gpu_model": gpu, "program": f"check loop {n} {iters}", "modes": modes}, indent=1) + "\n"
        )
        parts = []
        for mode, r in modes.items():
            if "s" in r:
                ts = {k: round(sum(v) / len(v), 3) for k, v in r["times"].items()}
                parts.append(f"{mode}: s = {r['s']:.3f} (mean seconds at load 1/2/4: {ts[1]}/{ts[2]}/{ts[4]})")
            else:
                parts.append(f"{mode}: not measured ({r['error'][:160]})")
        p.summary = "; ".join(parts) + f"; model default s = {DEFAULT_SLOWDOWN}"
        if modes["time-slicing"]["s"] is None:
            raise CheckError("no slowdown could be fitted")
        p.status = "passed"

    return run
