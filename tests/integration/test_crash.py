"""A killed executor on this machine (issue 12): ps says so, logs -f ends, stop keeps what
finished, doctor finds and removes real podman leftovers."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, podman, write

WF = f"""apiVersion: hetflow/v1
name: crash
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo hello from a; sleep {{a}}; echo 1 > /out/done"]
    outputs: [done]
  b:
    needs: [a]
    image: {BUSYBOX}
    command: [sh, -c, "sleep {{b}}; echo 1 > /out/done"]
    outputs: [done]
"""


def _kill_executor(hf: Hetflow, run_id: str) -> None:
    pid = hf.show(run_id)["pid"]
    os.kill(pid, signal.SIGKILL)
    hf.wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2])


def test_killed_executor_shows_gone_logs_f_ends_doctor_repairs(hf: Hetflow, tmp_path: Path) -> None:
    run_id = hf("run", "-d", write(tmp_path, WF.format(a=0.2, b=20))).stdout.strip()
    hf.wait_for(lambda: hf.step_states(run_id).get("b") == "running")
    _kill_executor(hf, run_id)

    ps = json.loads(hf("ps", "--json").stdout)
    assert [(r["id"], r["state"], r["executor_gone"]) for r in ps] == [(run_id, "running", True)]
    assert "executor gone: resume or stop" in hf("ps").stdout
    logs = hf("logs", "-f", run_id, check=False, timeout=60)  # ends by itself: a hang fails at the timeout
    assert logs.returncode == 1 and "hello from a" in logs.stdout and "executor" in logs.stderr

    # real leftovers of another run that has ended: a container and a gang network
    hf("run", "-q", write(tmp_path, WF.format(a=0, b=0), "done.yaml"))
    done = hf.last_run()
    podman("create", "--name", f"hf-{done}-x-1", "--label", f"hetflow.run={done}", BUSYBOX, "true")
    podman("network", "create", "--internal", "--label", f"hetflow.run={done}", f"hf-{done}-x-1-net")
    found = json.loads(hf("doctor", "--json").stdout)["leftovers"]
    # a's container too, when the killed executor had not removed it yet (batches: 5 s)
    assert {(f["kind"], f["name"]) for f in found} - {("container", f"hf-{run_id}-a-1")} == {
        ("container", f"hf-{done}-x-1"),
        ("network", f"hf-{done}-x-1-net"),
        ("run", run_id),
    }
    assert f"hf-{done}-x-1" in podman("ps", "-a", "--format", "{{.Names}}")  # the default only lists
    hf("doctor", "--repair")
    assert json.loads(hf("doctor", "--json").stdout)["leftovers"] == []
    assert podman("ps", "-a", "--filter", f"label=hetflow.run={done}", "--format", "{{.Names}}") == []
    assert podman("network", "ls", "--filter", f"label=hetflow.run={done}", "--format", "{{.Name}}") == []
    assert hf.show(run_id)["state"] == "failed"
    # in flight: left for resume (-a: b's 20 s may be over by now on a loaded machine; kept all the same)
    assert f"hf-{run_id}-b-1" in podman("ps", "-a", "--format", "{{.Names}}")

    hf("resume", run_id, "-q", timeout=120)
    data = hf.show(run_id)
    assert data["state"] == "succeeded" and [s["attempts"] for s in data["steps"]] == [1, 1]
    assert podman("ps", "-a", "--filter", f"label=hetflow.run={run_id}", "--format", "{{.Names}}") == []


def test_stop_after_a_crash_keeps_a_result_that_finished_while_down(hf: Hetflow, tmp_path: Path) -> None:
    run_id = hf("run", "-d", write(tmp_path, WF.format(a=3, b=0))).stdout.strip()
    hf.wait_for(lambda: hf.step_states(run_id).get("a") == "running")
    _kill_executor(hf, run_id)
    name = f"hf-{run_id}-a-1"
    hf.wait_for(lambda: name not in podman("ps", "--format", "{{.Names}}"), timeout=30)  # a exits while down

    hf("stop", run_id)
    assert hf.step_states(run_id)["a"] == "running"  # its result waits for resume, not stopped
    hf("resume", run_id, "-q", timeout=120)
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert [(s["step"], s["attempts"]) for s in data["steps"]] == [("a", 1), ("b", 1)]
