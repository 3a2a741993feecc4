"""The leases part: hetflow's own sharing, two half-GPU tenants time-sliced and under MPS."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from .common import IMAGE, WORK, CheckError, Part
from .injection import step_lines
from .machine import Machine, hetflow_argv, sh
from .sharing import LOOP_RE

LEASES_WORKFLOW = """\
apiVersion: hetflow/v1
name: gpuleases
data:
  prog: bin
steps:
  tenant:
    foreach: [0, 1]
    image: {image}
    command:
      - sh
      - -c
      - >-
        env | grep -E '^(CUDA_|HETFLOW_GPU_SHARE)' | sort; ls /dev | grep -E '^nvidia';
        /in/prog/sms && /in/prog/check loop 2048 {iters}
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: 1Gi, gpu_share: 0.5}}
"""
SMS_RE = re.compile(r"^sms usable=(\d+) device=(\d+)$", re.M)


def judge_leases(
    mode: str, logs: dict[str, str], shown: dict[str, Any], clients: int, full_sms: int | None = None
) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with two half-GPU tenants hetflow ran under ``mode`` (time-slicing or
    mps): both must succeed on the same GPU at the same time, each told its share.  A
    time-sliced tenant may use every SM; an MPS tenant must really be an MPS client: fewer
    SMs than the GPU has (``full_sms``, as a time-sliced tenant saw them; under MPS the
    driver's own count is the limited one: 66 of the H100's 132 at 50 %) and the daemon
    saw it connect (``clients``: distinct client processes in its control.log)."""
    wrong: list[str] = []
    steps = {s["step"]: s for s in shown.get("steps", [])}
    if sorted(steps) != ["tenant.0", "tenant.1"] or any(s["state"] != "succeeded" for s in steps.values()):
        states = ", ".join(f"{k}: {v['state']}" for k, v in sorted(steps.items()))
        return [f"{mode}: the tenants did not both succeed ({states or 'no steps'})"], {}
    if any(not s.get("attempt_history") for s in steps.values()):
        return [f"{mode}: the tenants did not run (taken from the cache: run with --no-cache)"], {}
    last = [s["attempt_history"][-1] for s in steps.values()]
    if len({tuple(a["gpu_uuids"]) for a in last}) != 1:
        wrong.append(f"{mode}: the tenants ran on different GPUs {[a['gpu_uuids'] for a in last]}")
    (a0, e0), (a1, e1) = ((a["started"], a["ended"]) for a in last)
    if not (a0 < e1 and a1 < e0):
        wrong.append(f"{mode}: the tenants did not run at the same time")
    seen: dict[str, Any] = {"sms": {}, "seconds": {}}
    for name, text in sorted(logs.items()):
        if "HETFLOW_GPU_SHARE=0.5" not in text:
            wrong.append(f"{mode}: {name} was not told its share (HETFLOW_GPU_SHARE)")
        m, t = SMS_RE.search(text), LOOP_RE.search(text)
        if m is None or t is None:
            wrong.append(f"{mode}: {name} printed no SM count or loop time: {text.strip()[-300:]!r}")
            continue
        usable, total = int(m.group(1)), int(m.group(2))
        seen["sms"][name], seen["seconds"][name] = f"{usable}/{total}", float(t.group(3))
        if mode == "mps" and full_sms is not None and usable >= full_sms:
            wrong.append(
                f"mps: {name} may use all {full_sms} SMs: it is not an MPS client (it could not reach the daemon)"
            )
        if mode == "time-slicing" and usable != total:
            wrong.append(f"time-slicing: {name} may use {usable} of {total} SMs")
    if mode == "mps" and clients < 2:
        wrong.append(f"mps: the MPS daemon saw {clients} client(s) connect, not 2")
    return wrong, seen


def mps_clients(control_log: str) -> int:
    """Distinct client processes the MPS control daemon accepted ("NEW CLIENT 1305 from user 0")."""
    return len(set(re.findall(r"NEW CLIENT (\d+) from user", control_log)))


def part_leases(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        if not m.podman():
            p.summary = f"skipped: containers cannot run here ({m.podman_error[:200]})"
            return
        folder = WORK / "leases"
        (folder / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy(m.build_program(), folder / "bin" / "check")
        shutil.copy(m.build_sms(), folder / "bin" / "sms")
        (folder / "workflow.yaml").write_text(LEASES_WORKFLOW.format(image=IMAGE, iters=800))
        mps = shutil.which("nvidia-cuda-mps-control")
        results: dict[str, Any] = {}
        wrongs: list[str] = []
        full_sms: int | None = None  # the GPU's SMs, as a time-sliced tenant sees them
        for mode in ("time-slicing", "mps"):
            extra = {"HETFLOW_GPU_SHARING": f"{mode}:2"}
            pipe, logs = WORK / "mps-pipe-leases", WORK / "mps-log-leases"
            if mode == "mps":
                if not mps:
                    results[mode] = "not run: nvidia-cuda-mps-control is not on this machine"
                    continue
                pipe.mkdir(parents=True, exist_ok=True)
                logs.mkdir(parents=True, exist_ok=True)
                menv = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
                sh([mps, "-d"], env=menv, timeout=30)
                extra["HETFLOW_MPS_PIPE_DIRECTORY"] = str(pipe)
            try:
                # --no-cache: the second mode's tenants are the same steps, and must run again
                out = sh(
                    hetflow_argv("run", "--no-cache", "workflow.yaml"),
                    env=m.env(**extra),
                    timeout=240,
                    check=False,
                    cwd=folder,
                )
                rid = json.loads(m.hetflow("ps", "--all", "--json"))[0]["id"]
                shown = json.loads(m.hetflow("show", rid, "--json"))
                text = m.hetflow("logs", rid, check=False)
                m.save(f"leases-{mode}.txt", out + "\n" + text)
                logs_by = {s: step_lines(text, s) for s in ("tenant.0", "tenant.1")}
                control = (logs / "control.log").read_text() if (logs / "control.log").is_file() else ""
                if control:
                    m.save("leases-mps-control.log", control)
                clients = mps_clients(control)
                wrong, seen = judge_leases(mode, logs_by, shown, clients, full_sms)
                if mode == "time-slicing":
                    full_sms = max((int(x.split("/")[1]) for x in seen.get("sms", {}).values()), default=None)
                results[mode] = {**seen, "clients": clients if mode == "mps" else None, "problems": wrong}
                wrongs += wrong
            finally:
                if mode == "mps" and mps:
                    subprocess.run([mps], input="quit\n", text=True, env=menv, capture_output=True, timeout=30)
        p.details["modes"] = results
        said = []
        for mode, r in results.items():
            if isinstance(r, str):
                said.append(f"{mode}: {r}")
            else:
                said.append(
                    f"{mode}: SMs {r.get('sms')}, loop seconds {r.get('seconds')}"
                    + (f", {r['clients']} MPS clients" if r.get("clients") is not None else "")
                )
        p.summary = "two gpu_share 0.5 steps on one GPU through hetflow run; " + "; ".join(said)
        if wrongs:
            raise CheckError("; ".join(wrongs))
        p.status = "passed"

    return run
