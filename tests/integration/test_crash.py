"""A killed executor on this machine (issue 12): ps says so, logs -f ends, stop keeps what
finished, doctor finds and removes real podman leftovers."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hetflow.execute import pid_alive
from hetflow.execute.backends.local.orphans import launchers
from tests.integration.hfkit import BUSYBOX, Hetflow, monitor_trees, podman, processes, write

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


# An OCI runtime that is runc, except that the first container it creates is held after `runc
# create` (its `runc init` made, podman not yet told) until the test lets it go: the moment a
# kill of the `podman run` clients leaves a container podman records as created, never started.
HOLD_FIRST_CREATE = """#!/bin/sh
for a in "$@"; do
  if [ "$a" = create ] && mkdir {dir}/held 2>/dev/null; then
    runc "$@"; rc=$?
    touch {dir}/created
    while [ ! -e {dir}/go ]; do sleep 0.1; done
    exit $rc
  fi
done
exec runc "$@"
"""
ONE = f"""apiVersion: hetflow/v1
name: unstarted
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo ran > /out/done"]
    outputs: [done]
"""


@pytest.mark.parametrize("with_executor", [True, False], ids=["with-the-executor", "the-podman-run-only"])
def test_a_container_that_never_started_is_run_again_not_failed(
    hf: Hetflow, tmp_path: Path, with_executor: bool
) -> None:
    """issue 37: the `podman run` clients killed mid-create (with the executor: a cgroup-wide
    kill, systemctl stop; alone: the OOM killer) leave a container podman calls created, and
    its conmon and runc init alive.  It never started: requeued outside the retries (no
    retries here) and run again, never 'exited 0 but did not write declared outputs'; its
    conmon and runc init are gone."""
    runtime = tmp_path / "hold-first-create"
    runtime.write_text(HOLD_FIRST_CREATE.format(dir=tmp_path))
    runtime.chmod(0o755)
    run_id = hf("run", "-d", write(tmp_path, ONE), extra_env={"HETFLOW_OCI_RUNTIME": str(runtime)}).stdout.strip()
    hf.wait_for(lambda: (tmp_path / "created").exists(), timeout=120)
    executor = hf.show(run_id)["pid"]
    name = f"hf-{run_id}-a-1"
    clients = launchers("podman", [name])
    assert list(clients.values()) == [name]
    if with_executor:
        _kill_executor(hf, run_id)
    for pid in clients:
        os.killpg(pid, signal.SIGKILL)  # each leads a session of its own
    (tmp_path / "go").touch()
    hf.wait_for(lambda: not any(argv[1:2] == [str(runtime)] for _, argv in processes().values()))  # let go
    if with_executor:
        assert podman("container", "inspect", "--format", "{{.State.Status}}", name) == ["created"]
        hf("resume", "-q", run_id, check=False, timeout=180)
    else:
        hf.wait_for(lambda: hf.show(run_id)["state"] != "running", timeout=120)
        # the run is recorded ended before its executor removes the containers: nothing may be
        # left once the executor itself has ended
        hf.wait_for(lambda: not pid_alive(executor), timeout=120)

    data = hf.show(run_id)
    [a] = data["steps"]
    history = [(x["attempt"], x["state"]) for x in a["attempt_history"]]
    assert (data["state"], history) == ("succeeded", [(1, "stopped"), (2, "succeeded")]), data
    assert "never started" in a["attempt_history"][0]["message"]
    assert monitor_trees(f"hf-{run_id}-") == []  # no conmon, no runc init of the run left
    assert podman("ps", "-a", "--filter", f"label=hetflow.run={run_id}", "--format", "{{.Names}}") == []
