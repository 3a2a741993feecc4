"""The output race of issue 30, widened on purpose: a chain of steps, each reading its parent's
output, run through the real CLI with a slow executor poll (HETFLOW_POLL_INTERVAL).

On Slurm the engine starts a child (afterok) as soon as its parent's job ends; with a poll of
``SLURM_POLL`` seconds the executor sees that end long after, so a parent whose outputs waited
for the executor to move them (before issue 30) failed its child every time: podman's "statfs
.../steps/sN/out/v.txt: no such file or directory" (exit 125).  Ray cannot race so (its backend
does not hold dependencies: the executor submits a child only once its parent's outputs are
accepted); the chain is run there with a slow poll all the same.

Sizes: HETFLOW_RACE_STEPS (default 5) steps, HETFLOW_RACE_REPEATS (default 1) runs per
backend; HETFLOW_RACE_POLL (default 8 s) the executor's poll on Slurm.  ``make race`` runs 20
steps 10 times on each backend.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, write

STEPS = int(os.environ.get("HETFLOW_RACE_STEPS", "5"))
REPEATS = int(os.environ.get("HETFLOW_RACE_REPEATS", "1"))
SLURM_POLL = os.environ.get("HETFLOW_RACE_POLL", "8")  # longer than a child takes to start after its parent
RAY_POLL = "1"  # Ray waits for the executor anyway: each link costs a poll


def chain(steps: int = STEPS) -> str:
    """``s0`` writes 0; each ``sN`` reads its parent's number and writes one more."""
    body = [f"apiVersion: hetflow/v1\nname: race{steps}\nsteps:"]
    for i in range(steps):
        if i == 0:
            command, inputs = "echo 0 > /out/v.txt", ""
        else:
            command, inputs = "echo $(( $(cat /in/p/v.txt) + 1 )) > /out/v.txt", f"\n    inputs: {{p: s{i - 1}/v.txt}}"
        body.append(
            f"  s{i}:\n    image: {BUSYBOX}\n    command: [sh, -c, {command!r}]{inputs}\n"
            "    outputs: [v.txt]\n    resources: {cpus: 1, memory: 64Mi}\n    estimate: 1s"
        )
    return "\n".join(body) + "\n"


def run_chain(hf: Hetflow, tmp_path: Path, config: str, poll: str, steps: int = STEPS) -> None:
    """One run of the chain, which must succeed with every step on its first attempt (a child
    started before its input was in place fails, and retries would hide it: there are none)."""
    wf = write(tmp_path, chain(steps), f"race{steps}.yaml")
    proc = hf(
        "run", "-q", "--no-cache", "--config", config, wf,
        check=False, extra_env={"HETFLOW_POLL_INTERVAL": poll}, timeout=120 + 10 * steps,
    )  # fmt: skip
    data = hf.show(hf.last_run())
    bad = {s["step"]: (s["state"], s["attempts"], s.get("reason")) for s in data["steps"]}
    bad = {k: v for k, v in bad.items() if v[:2] != ("succeeded", 1)}
    assert proc.returncode == 0 and data["state"] == "succeeded" and not bad, (proc.stdout[-2000:], bad)
    last = Path(data["workdir"]) / "steps" / f"s{steps - 1}" / "out" / "v.txt"
    assert last.read_text() == f"{steps - 1}\n"
