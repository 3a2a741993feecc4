"""Gang steps through ``hetflow run`` on this machine: real podman containers on a private
network, a torchrun-style allreduce and a real ``mpirun`` allreduce (Open MPI + mpi4py),
each rank's result in its log.  No GPU is involved: these gangs use CPUs only (the GPU
split per replica is covered with fake devices in tests/unit/test_runner_gang.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from demo.images import MPI_IMAGE

from tests.integration.hfkit import Hetflow, step_out, write

GANGS = f"""
apiVersion: hetflow/v1
name: gangs
steps:
  torch:
    image: {MPI_IMAGE}
    command: [sh, -c, "python3 /app/gang/torch_allreduce.py && echo $RANK > /out/rank.txt"]
    resources: {{cpus: 0.5, memory: 256Mi}}
    outputs: [rank.txt]
    gang: {{replicas: 2, launcher: torch}}
  mpi:
    image: {MPI_IMAGE}
    command: [python3, /app/gang/allreduce.py]
    resources: {{cpus: 0.5, memory: 256Mi}}
    gang: {{replicas: 2, launcher: mpi}}
"""


def ok_lines(text: str) -> list[str]:
    """The ranks' result lines, without ``hetflow logs``' ``STEP.ATTEMPT | `` prefix."""
    return sorted(line.split(" | ", 1)[-1] for line in text.splitlines() if "allreduce sum = 3 (expected 3) ok" in line)


def test_torch_and_mpi_gangs_run_every_rank_and_clean_up(hf: Hetflow, tmp_path: Path, mpi_image: str) -> None:
    hf("run", write(tmp_path, GANGS))
    rid = hf.last_run()
    steps = {s["step"]: s for s in hf.show(rid)["steps"]}
    assert {(n, s["state"], s["attempts"]) for n, s in steps.items()} == {
        ("torch", "succeeded", 1),
        ("mpi", "succeeded", 1),
    }
    # torch: each replica ran the program and printed its own line, shown prefixed with its
    # rank as torchrun does; --rank picks one; rank 0's /out is the step's
    assert [line.split(":")[0] for line in ok_lines(hf("logs", rid, "torch").stdout)] == ["[rank0]", "[rank1]"]
    rank1 = hf("logs", rid, "torch", "--rank", "1").stdout
    assert len(ok_lines(rank1)) == 1 and "rank 1/2" in rank1
    assert (step_out(hf, rid, "torch") / "rank.txt").read_text().strip() == "0"
    # mpi: mpirun in replica 0 gathers every rank's output; the ranks ran in both containers
    lines = ok_lines(hf("logs", rid, "mpi").stdout)
    assert [line.split(" on ")[0] for line in lines] == ["rank 0/2", "rank 1/2"]
    hosts = {line.split(" on ")[1].split(":")[0] for line in lines}
    assert len(hosts) == 2, lines  # one rank per replica container
    # nothing left behind: containers and networks go with the attempt
    ps = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"label=hetflow.run={rid}", "--format", "json"],
        capture_output=True,
        text=True,
        env=hf.env,
        check=True,
    )
    assert json.loads(ps.stdout or "[]") == []
    nets = subprocess.run(
        ["podman", "network", "ls", "--format", "{{.Name}}"], capture_output=True, text=True, env=hf.env, check=True
    ).stdout.split()
    assert not [n for n in nets if rid in n]


def test_a_failing_replica_fails_and_retries_the_whole_gang(hf: Hetflow, tmp_path: Path, mpi_image: str) -> None:
    flaky = f"""
apiVersion: hetflow/v1
name: flaky
steps:
  g:
    image: {MPI_IMAGE}
    command: [sh, -c, "if [ $HETFLOW_RANK = 1 ]; then exit 5; fi; sleep 60"]
    resources: {{cpus: 0.5, memory: 128Mi}}
    retries: 1
    gang: {{replicas: 2}}
"""
    proc = hf("run", write(tmp_path, flaky), check=False)
    assert proc.returncode != 0
    rid = hf.last_run()
    (g,) = hf.show(rid)["steps"]
    assert (g["state"], g["attempts"]) == ("failed", 2)
    assert "5" in str(g.get("exit_code", "")) or "5" in (g.get("reason") or "")
