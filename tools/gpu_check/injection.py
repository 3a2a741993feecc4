"""The injection part: a GPU step and a CPU step through `hetflow run` in the carried podman,
each judged on what it saw."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from typing import Any

from .common import IMAGE, WORK, CheckError, Part
from .machine import Machine, sh

WORKFLOW = """\
apiVersion: hetflow/v1
name: gpucheck
data:
  prog: check
steps:
  gpu:
    image: {image}
    command:
      - sh
      - -c
      - >-
        ls /dev; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; id -u;
        env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|LD_LIBRARY_PATH)=';
        /in/prog/check loop 2048 {iters} && /in/prog/check matmul 1024
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: 1Gi, gpus: 1}}
  cpu:
    image: {image}
    command: [sh, -c, "ls /dev; env | grep -E '^NVIDIA_VISIBLE_DEVICES='; /in/prog/check matmul 64; echo check-exit=$?"]
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: 256Mi}}
"""
CONTROL = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}


def step_lines(log: str, step: str) -> str:
    """One step's lines of `hetflow logs` output, without their prefix: "STEP #ATTEMPT | ", or
    "PARENT[INDEX VALUES] | " (and " #ATTEMPT" after the ]) for item PARENT.INDEX of a fan-out,
    as hetflow writes them since 2026-12-07; "STEP.ATTEMPT | " as it wrote them before."""
    parent, _, index = step.rpartition(".")
    item = rf"{re.escape(parent)}\[{re.escape(index)}(?: [^\]]*)?\]" if parent and index.isdigit() else None
    forms = [rf"{re.escape(step)}\.\d+", rf"{re.escape(step)} #\d+", *([rf"{item}(?: #\d+)?"] if item else [])]
    pat = re.compile(rf"^(?:{'|'.join(forms)}) \| ?(.*)$")
    return "\n".join(m.group(1) for ln in log.splitlines() if (m := pat.match(ln)))


def judge_injection(
    gpu_log: str, cpu_log: str, own_minor: int, attempt: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with the two steps' output and the GPU step's record (nothing: passed)."""
    wrong: list[str] = []
    devs = set(re.findall(r"^(nvidia[\w-]*)$", gpu_log, re.M))
    gpus = {d for d in devs if re.fullmatch(r"nvidia\d+", d)}
    if gpus != {f"nvidia{own_minor}"}:
        wrong.append(f"GPU step sees GPU nodes {sorted(gpus)}, expected only nvidia{own_minor}")
    if devs - gpus - CONTROL:
        wrong.append(f"GPU step sees unexpected nodes {sorted(devs - gpus - CONTROL)}")
    if not re.search(r"^ok n=1024 .*gpu=", gpu_log, re.M):
        wrong.append("the CUDA program did not print its checked result in the GPU step")
    status = dict(re.findall(r"^(CapEff|NoNewPrivs|Seccomp):\s*(\S+)", gpu_log, re.M))
    if status.get("CapEff", "").strip("0") or status.get("NoNewPrivs") != "1" or status.get("Seccomp") != "2":
        wrong.append(f"GPU step not hardened as hetflow promises: {status}")
    if re.search(r"^nvidia", cpu_log, re.M):
        wrong.append("the CPU step sees NVIDIA device nodes")
    if "ok n=64" in cpu_log or "check-exit=0" in cpu_log:
        wrong.append("the CUDA program found a GPU in the CPU step")
    used = {k: attempt.get(k) for k in ("gpu_util_mean", "gpu_util_max", "gpu_memory_peak", "gpu_memory_of")}
    if not used["gpu_util_max"] or not used["gpu_memory_peak"]:
        wrong.append(f"the run record holds no GPU use for the GPU step: {used}")
    return wrong, {"devices": sorted(devs), "hardening": status, "gpu_use": used}


def part_injection(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        prog = m.build_program()
        if not m.podman():
            p.details["containers"] = m.podman_error
            # no containers on this kernel: hetflow's variables on a plain process instead
            env = m.env(CUDA_VISIBLE_DEVICES="0", NVIDIA_VISIBLE_DEVICES="0")
            out = sh([str(prog), "matmul", "1024"], env=env)
            if not out.startswith("ok "):
                raise CheckError(f"containers cannot run here ({m.podman_error}); as a plain process: {out}")
            p.summary = (
                f"containers cannot run here ({m.podman_error[:200]});"
                f" as a plain process with hetflow's GPU variables: {out.strip()}"
            )
            p.status = "failed"
            p.error = "no containers: injection not checked"
            return
        wf = WORK / "wf"
        wf.mkdir(parents=True, exist_ok=True)
        shutil.copy(prog, wf / "check")
        (wf / "workflow.yaml").write_text(WORKFLOW.format(image=IMAGE, iters=1200))
        out = m.hetflow("run", "--no-cache", "workflow.yaml", timeout=240, check=False, cwd=wf)
        m.save("injection-run.txt", out)
        runs = json.loads(m.hetflow("ps", "--all", "--json"))
        rid = runs[0]["id"]
        shown = json.loads(m.hetflow("show", rid, "--json"))
        m.save("injection-show.json", json.dumps(shown, indent=1))
        gpu_log = m.hetflow("logs", rid, "gpu", check=False)
        cpu_log = m.hetflow("logs", rid, "cpu", check=False)
        trace = m.hetflow("trace", rid, check=False)
        m.save("injection-logs.txt", gpu_log + "\n" + cpu_log + "\n" + trace)
        gpu_log, cpu_log = step_lines(gpu_log, "gpu"), step_lines(cpu_log, "cpu")
        steps = {s["step"]: s for s in shown["steps"]}
        states = {k: v["state"] for k, v in steps.items()}
        if states != {"gpu": "succeeded", "cpu": "succeeded"}:
            raise CheckError(f"hetflow run: steps {states}: {out.strip()[-600:]}")
        node = (
            json.loads((m.out / "nodes.json").read_text())[0]
            if (m.out / "nodes.json").is_file()
            else json.loads(m.hetflow("nodes", "--json"))[0]
        )
        uuid = steps["gpu"]["attempt_history"][-1]["gpu_uuids"][0]
        minor = next(g["minor"] for g in node["gpus"] if g["uuid"] == uuid)
        wrong, seen = judge_injection(gpu_log, cpu_log, minor, steps["gpu"]["attempt_history"][-1])
        p.details.update(seen)
        use = seen["gpu_use"]
        peak = use["gpu_memory_peak"]
        p.summary = (
            f"GPU step: {seen['devices']}, CapEff/NoNewPrivs/Seccomp {seen['hardening']}, CUDA result checked; "
            f"CPU step: no GPU; recorded use: util mean {use['gpu_util_mean']}%, max {use['gpu_util_max']}%, "
            f"memory peak {peak / 2**20 if peak else peak} MiB ({use['gpu_memory_of']})"
        )
        if wrong:
            raise CheckError("; ".join(wrong))
        p.status = "passed"

    return run
