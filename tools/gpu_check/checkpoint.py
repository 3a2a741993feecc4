"""The checkpoint part: a GPU step's CUDA state through hetflow's checkpoints (issue 44).

``ckpt`` (ckpt.cu) keeps MIB MiB of state in device memory and advances it STEPS times.  Run
through `hetflow run` in the carried podman with the carried CRIU 4.1.1: once uninterrupted
(the reference result); once with ``checkpoint: {every: 5s}``, its executor and container
killed with SIGKILL after a checkpoint, then `hetflow resume`; once stopped with `hetflow stop
--checkpoint`, then resumed.  Each resumed run must end with the reference's result, and its
second attempt must go on from the checkpoint's step (not print "step 1" again).  The table:
dump seconds and image size (hetflow's checkpoint record), restore seconds (the run's
"restored ... in Ns" note), image size per GiB of device state.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import IMAGE, WORK, CheckError, Part
from .injection import step_lines
from .machine import Machine, sh

STEPS, MIB = 240, 1024  # about 30 s of 100 ms steps; 1 GiB of device state
WORKFLOW = """\
apiVersion: hetflow/v1
name: gpuckpt
data:
  prog: ckpt
steps:
  gpu:
    image: {image}
    command: [/in/prog/ckpt, "{steps}", "{mib}", /out]
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: {memory}Mi, gpus: 1}}
{checkpoint}"""
STEP_RE = re.compile(r"^step (\d+) t=(\d+)$", re.M)
RESULT_RE = re.compile(r"^result ([0-9a-f]{16})$", re.M)
RESTORED_RE = re.compile(r"restored from attempt (\d+)'s checkpoint of \S+ in ([0-9.]+)s")


def workflow(checkpoint: str, steps: int = STEPS, mib: int = MIB) -> str:
    line = f"    checkpoint: {checkpoint}\n" if checkpoint else ""
    # the checkpointed process holds its device state in host memory too: room for both
    return WORKFLOW.format(image=IMAGE, steps=steps, mib=mib, memory=3 * mib + 1024, checkpoint=line)


def steps_of(log: str) -> list[int]:
    return [int(m.group(1)) for m in STEP_RE.finditer(log)]


def result_of(log: str) -> str | None:
    found = RESULT_RE.findall(log)
    return found[-1] if found else None


def judge_resumed(
    how: str, reference: str, attempts: dict[int, str], states: dict[str, str], restored: str
) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with a run resumed from a GPU checkpoint (nothing: passed): it
    succeeded, its last attempt was restored (the note) and went on from a later step than
    1, and it ended with the uninterrupted run's result."""
    wrong: list[str] = []
    if states != {"gpu": "succeeded"}:
        wrong.append(f"{how}: the step did not succeed after resume: {states}")
    last = max(attempts) if attempts else 0
    first = steps_of(attempts.get(last, ""))
    seen: dict[str, Any] = {"attempts": sorted(attempts), "resumed_at_step": first[0] if first else None}
    if last < 2:
        wrong.append(f"{how}: no second attempt ran (attempts {sorted(attempts)})")
    elif not RESTORED_RE.search(restored):
        wrong.append(
            f"{how}: attempt {last} was not restored from a checkpoint ({restored.strip()[-300:] or 'no note'})"
        )
    elif not first or first[0] <= 1:
        wrong.append(f"{how}: attempt {last} started from step {first[0] if first else '?'}, not from the checkpoint")
    got = result_of(attempts.get(last, ""))
    seen["result"] = got
    if got != reference:
        wrong.append(f"{how}: result {got} differs from the uninterrupted run's {reference}")
    return wrong, seen


def table(rows: list[dict[str, Any]], gpu: str, driver: str, date: str) -> str:
    """The part's table for gpu-check.md and the README's "On a real GPU"."""
    lines = [
        "| GPU | driver | date | how | dump s | image MiB | MiB per GiB of GPU state | restore s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        per = r["size"] / 2**20 / (r["state_mib"] / 1024)
        lines.append(
            f"| {gpu} | {driver} | {date} | {r['how']} | {r['dump_s']:.2f} | {r['size'] / 2**20:.0f} | "
            f"{per:.0f} | {r['restore_s']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def nvcc() -> str | None:
    found = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    return found if Path(found).is_file() else None


def part_checkpoint(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        if nvcc() is None:
            p.summary = "skipped: no nvcc on this machine (looked on PATH and in /usr/local/cuda/bin) to build ckpt.cu"
            return
        m.install()
        if not m.podman():
            raise CheckError(f"containers cannot run here: {m.podman_error[:300]}")
        prog = m.build_program("ckpt.cu", "ckpt")
        os.environ.update(HETFLOW_CRIU=str(m.criu()))  # the carried CRIU 4.1.1, for hetflow and podman's runc
        support = m.hetflow("nodes", check=False)
        m.save("checkpoint-nodes.txt", support)
        wf = WORK / "ckpt-wf"
        wf.mkdir(parents=True, exist_ok=True)
        shutil.copy(prog, wf / "ckpt")
        (wf / "reference.yaml").write_text(workflow(""))
        (wf / "every.yaml").write_text(workflow("{every: 5s}"))
        (wf / "stop.yaml").write_text(workflow("true"))
        ref = m.hetflow("run", "--no-cache", "reference.yaml", timeout=300, check=False, cwd=wf)
        rid = _last_run(m)
        reference = result_of(step_lines(m.hetflow("logs", rid, "gpu", check=False), "gpu"))
        m.save("checkpoint-reference.txt", ref)
        if reference is None:
            raise CheckError(f"the uninterrupted run printed no result: {ref.strip()[-600:]}")
        rows, wrong = [], []
        for how, body in (("kill -9 + resume", _killed), ("stop --checkpoint + resume", _stopped)):
            got, seen, row = body(m, wf, reference)
            p.details[how] = seen
            wrong += got
            if row:
                rows.append({"how": how, **row})
        smi = sh(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], check=False)
        gpu, _, drv = smi.splitlines()[0].partition(", ") if smi.strip() else ("?", "", "?")
        p.details["table"] = table(rows, gpu, drv, time.strftime("%Y-%m-%d"))
        m.save("checkpoint-table.md", p.details["table"])
        if wrong:
            raise CheckError("; ".join(wrong))
        p.summary = f"resumed twice with the uninterrupted result {reference}; " + "; ".join(
            f"{r['how']}: dump {r['dump_s']:.2f}s, {r['size'] / 2**20:.0f} MiB, restore {r['restore_s']:.2f}s"
            for r in rows
        )
        p.status = "passed"

    return run


def _last_run(m: Machine) -> str:
    return str(json.loads(m.hetflow("ps", "--all", "--json"))[0]["id"])


def _meta(m: Machine, rid: str) -> dict[str, Any] | None:
    path = m.home / "runs" / rid / "checkpoints" / "gpu" / "1.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _notes(m: Machine, rid: str) -> list[str]:
    """The run's events (hetflow's store, through the kit's hetflow): its notes say why a dump failed."""
    code = (
        "import json; from pathlib import Path; from hetflow.state import Store; "
        f"print(json.dumps([e.message for e in Store(Path({str(m.home)!r}) / 'state.db').events({rid!r})]))"
    )
    return list(json.loads(m.python(code)))


def _wait(m: Machine, rid: str, what: str, ok: Callable[[], bool], timeout: float = 180) -> None:
    """Until ``ok``; a CheckError with the run's last notes when the step ended first or time ran out."""
    deadline = time.monotonic() + timeout
    while not ok():
        shown = json.loads(m.hetflow("show", rid, "--json"))
        state = {s["step"]: s["state"] for s in shown["steps"]}.get("gpu")
        if state in ("succeeded", "failed", "skipped", "stopped") or time.monotonic() > deadline:
            said = " / ".join(_notes(m, rid)[-6:])
            raise CheckError(f"{what} never came (step {state}); the run said: {said[-900:]}")
        time.sleep(0.5)


def _progress(m: Machine, rid: str) -> int:
    got = steps_of(step_lines(m.hetflow("logs", rid, "gpu", check=False), "gpu"))
    return max(got) if got else 0


Judged = tuple[list[str], dict[str, Any], dict[str, Any]]  # what is wrong, what was seen, the table's row


def _resume_and_judge(m: Machine, rid: str, how: str, reference: str) -> Judged:
    m.hetflow("resume", rid, timeout=400, check=False)
    shown = json.loads(m.hetflow("show", rid, "--json"))
    m.save(f"checkpoint-{rid}-show.json", json.dumps(shown, indent=1))
    states = {s["step"]: s["state"] for s in shown["steps"]}
    # one attempt's lines come without a prefix; an attempt that did not run prints no step
    attempts = {a: m.hetflow("logs", rid, "gpu", "--attempt", str(a), check=False) for a in (1, 2, 3)}
    attempts = {a: t for a, t in attempts.items() if steps_of(t) or result_of(t)}
    notes = _notes(m, rid)
    restored = "\n".join(x for x in notes if "restored from attempt" in x)
    wrong, seen = judge_resumed(how, reference, attempts, states, restored)
    meta = _meta(m, rid) or {}
    took = RESTORED_RE.search(restored)
    row = {
        "dump_s": float(meta.get("seconds", 0.0)),
        "size": int(meta.get("size", 0)),
        "state_mib": MIB,
        "restore_s": float(took.group(2)) if took else 0.0,
    }
    seen.update(checkpoint=meta, restored=restored, notes=notes[-12:])
    return wrong, seen, row if meta and took else {}


def _killed(m: Machine, wf: Path, reference: str) -> Judged:
    m.hetflow("run", "-d", "--no-cache", "every.yaml", cwd=wf)
    rid = _last_run(m)
    _wait(m, rid, "a checkpoint after step 40", lambda: _meta(m, rid) is not None and _progress(m, rid) >= 40)
    os.kill(int(json.loads(m.hetflow("show", rid, "--json"))["pid"]), signal.SIGKILL)
    sh(["podman", "kill", f"hf-{rid}-gpu-1"], env=m.env(), check=False)
    _gone(f"hf-{rid}-gpu-1", m)
    return _resume_and_judge(m, rid, "kill -9 + resume", reference)


def _gone(name: str, m: Machine, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while name in sh(["podman", "ps", "--format", "{{.Names}}"], env=m.env()):
        if time.monotonic() > deadline:
            raise CheckError(f"{name} still runs {timeout:.0f} s after podman kill")
        time.sleep(0.5)


def _stopped(m: Machine, wf: Path, reference: str) -> Judged:
    m.hetflow("run", "-d", "--no-cache", "stop.yaml", cwd=wf)
    rid = _last_run(m)
    _wait(m, rid, "step 40", lambda: _progress(m, rid) >= 40)
    m.hetflow("stop", "--checkpoint", rid, timeout=300)
    return _resume_and_judge(m, rid, "stop --checkpoint + resume", reference)
