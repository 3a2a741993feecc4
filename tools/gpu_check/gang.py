"""The gang part: two ranks with the environment hetflow gives a torch gang do an all-reduce."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from .common import WORK, CheckError, Part
from .machine import Machine

GANG_WORKER = r"""
import os, sys, torch, torch.distributed as dist
backend = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
dist.init_process_group(backend)
t = torch.full((1 << 20,), float(rank + 1), device="cuda")
dist.all_reduce(t)
want = world * (world + 1) / 2
print(f"rank {rank}/{world} backend {backend} sum {t[0].item()} want {want} ok {bool((t == want).all())}")
dist.destroy_process_group()
"""


def why_refused(output: str) -> str:
    """The line of a failed rank's output that says why (NCCL's "Last error:" is followed by
    it, e.g. "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60")."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln).strip() for ln in output.splitlines()]
    for i, ln in enumerate(lines):
        if ln == "Last error:" and i + 1 < len(lines):
            return lines[i + 1]
    found = [ln for ln in lines if re.search(r"error|refused|detected", ln, re.I) and "Warning" not in ln]
    return (found[0] if found else lines[-1] if lines else "")[:200]


def part_gang(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        # The environment hetflow gives each replica of a torch gang of 2 (execute.gang), on this host.
        code = (
            "import json; from hetflow.spec import Gang; from hetflow.execute.gang import layout, replica_env\n"
            "g = Gang(replicas=2, launcher='torch', port=29512)\n"
            "ranks = layout(['127.0.0.1', '127.0.0.1'], ['this-node', 'this-node'])\n"
            "print(json.dumps([replica_env(g, ranks, i) for i in range(2)]))"
        )
        envs = json.loads(m.python(code).strip().splitlines()[-1])
        p.details["contract"] = envs
        tried: list[dict[str, Any]] = []
        for n, backend in enumerate(("nccl", "gloo")):
            worker = WORK / "gang_worker.py"
            worker.write_text(GANG_WORKER)
            procs = [
                subprocess.Popen(
                    [sys.executable, str(worker), backend],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    # a port of its own per try: the first try's store may still hold its port
                    env={**os.environ, **e, "CUDA_VISIBLE_DEVICES": "0", "MASTER_PORT": str(int(e["MASTER_PORT"]) + n)},
                )
                for e in envs
            ]
            try:
                outs = [pr.communicate(timeout=90)[0] for pr in procs]
            except subprocess.TimeoutExpired:
                for pr in procs:
                    pr.kill()
                outs = ["(no answer in 90 s)"] * len(procs)
            ok = all(re.search(r" ok True$", o.strip(), re.M) for o in outs)
            tried.append({"backend": backend, "ok": ok, "output": [o.strip()[-600:] for o in outs]})
            if ok:
                break
        p.details["tried"] = tried
        last = tried[-1]
        if not last["ok"]:
            raise CheckError(f"all-reduce failed with {', '.join(t['backend'] for t in tried)}: {last['output']}")
        note = "" if last["backend"] == "nccl" else f" (NCCL refused: {why_refused(tried[0]['output'][0])})"
        p.summary = (
            "2 ranks on the one GPU with the environment hetflow gives a torch gang (RANK, WORLD_SIZE,"
            f" MASTER_ADDR/PORT, LOCAL_RANK); the all-reduce over {last['backend']} gave the known sum{note}"
        )
        p.status = "passed"

    return run
