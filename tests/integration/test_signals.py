"""Signals stop a run as `hetflow stop` does (issue 22): SIGTERM or SIGINT to `hetflow run`
stops its containers within the grace, records the run stopped (resumable) and exits 128 +
the signal; a step that had finished is recorded finished; a second signal kills every
container at once; `hetflow stop --grace` gives a step the time to save its work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, podman, run_containers, write

# busybox sh as a container's PID 1 ignores SIGTERM unless it traps it; these steps end on it
SLEEPER = "trap 'exit 143' TERM; echo started; sleep {t} & wait; echo 1 > /out/done"
# Sleeps {t} s on its first attempt only: a stop must find it running however loaded the
# machine is (a 3 s sleeper ended on its own before a late SIGTERM reached it, and was rightly
# kept as succeeded), and the resume after it is quick.
FIRST_SLEEPS = (
    "trap 'exit 143' TERM; echo started; if [ $HETFLOW_ATTEMPT = 1 ]; then sleep {t} & wait; fi; echo 1 > /out/done"
)
TWO = f"""apiVersion: hetflow/v1
name: sig
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "{{a}}"]
  b:
    image: {BUSYBOX}
    command: [sh, -c, "{{b}}"]
"""


def _wf(tmp: Any, a: str, b: str, name: str = "wf.yaml") -> str:
    return write(tmp, TWO.replace("{a}", a).replace("{b}", b), name)


def _start(hf: Hetflow, wf: str, *args: str, **env: str) -> subprocess.Popen[str]:
    """`hetflow run` in the foreground, as a shell job: its own process group, the one a
    terminal's Ctrl-C (or systemd's, Slurm's, `timeout`'s SIGTERM) reaches."""
    return subprocess.Popen(
        [sys.executable, "-m", "hetflow.cli.main", "run", "-q", wf, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**hf.env, **env},
        start_new_session=True,
    )


def _run_id(hf: Hetflow) -> str:
    """The run's id, from the first ``hetflow ps`` that lists it (not one more ps after it)."""
    listed: list[dict[str, Any]] = []
    hf.wait_for(lambda: bool(listed.extend(json.loads(hf("ps", "--all", "--json").stdout)) or listed))
    return str(listed[0]["id"])


def _steps(hf: Hetflow, run_id: str) -> dict[str, dict[str, Any]]:
    return {s["step"]: s for s in hf.show(run_id)["steps"]}


def _container_states(run_id: str) -> list[str]:
    return podman("ps", "-a", "--filter", f"label=hetflow.run={run_id}", "--format", "{{.State}}")


def _ended(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_sigterm_stops_the_run_and_resume_completes_it(hf: Hetflow, tmp_path: Any) -> None:
    proc = _start(hf, _wf(tmp_path, FIRST_SLEEPS.format(t=120), FIRST_SLEEPS.format(t=120)), "--grace", "5s")
    run_id = _run_id(hf)
    hf.wait_for(lambda: {s["state"] for s in _steps(hf, run_id).values()} == {"running"})
    os.killpg(proc.pid, signal.SIGTERM)
    code, out = _ended(proc)
    assert code == 143, out
    assert f"hetflow resume {run_id}" in out
    assert run_containers(run_id, running=True) == []  # none left running when the command returned
    show = hf.show(run_id)
    assert show["state"] == "stopped" and "SIGTERM" in show["message"]
    assert {s["state"] for s in show["steps"]} == {"stopped"}
    hf("resume", "-q", run_id)
    assert {s["state"] for s in hf.show(run_id)["steps"]} == {"succeeded"}


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.5], ids=["at-once", "100ms", "500ms"])
def test_sigint_after_a_step_finished_keeps_its_result(hf: Hetflow, tmp_path: Any, delay: float) -> None:
    proc = _start(hf, _wf(tmp_path, "echo 1 > /out/done", FIRST_SLEEPS.format(t=120)), HETFLOW_STOP_GRACE="5s")
    run_id = _run_id(hf)
    a = f"hf-{run_id}-a-1"

    def a_exited() -> bool:
        states = podman("ps", "-a", "--filter", f"name=^{a}$", "--format", "{{.State}}")
        return states == ["exited"] or _steps(hf, run_id)["a"]["state"] == "succeeded"

    hf.wait_for(a_exited)
    time.sleep(delay)  # the seeded moment after a's exit
    os.killpg(proc.pid, signal.SIGINT)
    code, out = _ended(proc)
    assert code == 130, out
    steps = _steps(hf, run_id)
    assert steps["a"]["state"] == "succeeded" and steps["a"]["exit_code"] == 0
    assert hf.show(run_id)["state"] == "stopped"
    hf("resume", "-q", run_id)
    steps = _steps(hf, run_id)
    assert steps["a"]["attempts"] == 1 and steps["a"]["state"] == "succeeded"  # not run again
    assert steps["b"]["state"] == "succeeded"


# Not 0: two signals pending at once are one to the kernel (standard signals do not queue,
# signal(7)), and to Python, whose handler runs once for both.
@pytest.mark.parametrize("gap", [0.05, 0.3, 1.5], ids=["50ms", "300ms", "during-stop"])
def test_a_second_sigint_kills_every_container(hf: Hetflow, tmp_path: Any, gap: float) -> None:
    deaf = "trap '' TERM; echo started; sleep 60"  # ignores SIGTERM: only a kill ends it before the grace
    proc = _start(hf, _wf(tmp_path, deaf, deaf), HETFLOW_STOP_GRACE="45s")
    run_id = _run_id(hf)
    hf.wait_for(lambda: {s["state"] for s in _steps(hf, run_id).values()} == {"running"})
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(gap)
    os.killpg(proc.pid, signal.SIGINT)
    code, out = _ended(proc, timeout=30)  # well inside the 45-s grace: the second signal killed them
    assert code == 130, out
    assert set(_container_states(run_id)) <= {"exited"}  # none running, none left "stopping"
    show = hf.show(run_id)
    assert show["state"] == "stopped" and {s["state"] for s in show["steps"]} == {"stopped"}


SAVER = "trap 'echo saved; exit 0' TERM; echo started; sleep 60 & wait"


@pytest.mark.parametrize(("grace", "saved"), [("5s", True), ("0", False)], ids=["grace-5s", "grace-0"])
def test_stop_grace_lets_a_step_save_its_work(hf: Hetflow, tmp_path: Any, grace: str, saved: bool) -> None:
    run_id = hf("run", "-d", _wf(tmp_path, SAVER, "echo 1 > /out/done")).stdout.strip()
    hf.wait_for(lambda: "started" in hf("logs", run_id, "a", check=False).stdout)
    hf("stop", run_id, "--grace", grace)
    assert run_containers(run_id, running=True) == []
    assert ("saved" in hf("logs", run_id, "a").stdout) is saved
    assert hf.show(run_id)["state"] == "stopped"


@pytest.mark.parametrize("command", ["stop", "run", "resume"])
@pytest.mark.parametrize("bad", ["abc", "10x", "-5s"], ids=["word", "unit", "negative"])
def test_a_bad_grace_is_refused_before_anything_is_done(hf: Hetflow, tmp_path: Any, command: str, bad: str) -> None:
    target = _wf(tmp_path, "true", "true") if command == "run" else "anyrun"
    proc = hf(command, target, "--grace", bad, check=False)
    assert proc.returncode == 2
    assert f"--grace {bad!r}" in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []  # no run recorded


def test_a_bad_grace_in_the_environment_is_refused(hf: Hetflow, tmp_path: Any) -> None:
    proc = hf("run", _wf(tmp_path, "true", "true"), check=False, extra_env={"HETFLOW_STOP_GRACE": "soon"})
    assert proc.returncode == 2 and "HETFLOW_STOP_GRACE 'soon'" in proc.stderr + proc.stdout
    assert json.loads(hf("ps", "--all", "--json").stdout) == []


def test_sigterm_to_a_detached_executor_stops_the_run(hf: Hetflow, tmp_path: Any) -> None:
    run_id = hf("run", "-d", "--grace", "5s", _wf(tmp_path, SLEEPER.format(t=30), SLEEPER.format(t=30))).stdout.strip()
    hf.wait_for(lambda: {s["state"] for s in _steps(hf, run_id).values()} == {"running"})
    pid = hf.show(run_id)["pid"]
    os.kill(pid, signal.SIGTERM)  # what systemd or Kubernetes would send
    hf.wait_for(lambda: hf.show(run_id)["state"] == "stopped" and not os.path.exists(f"/proc/{pid}/comm"))
    assert run_containers(run_id, running=True) == []
    assert {s["state"] for s in hf.show(run_id)["steps"]} == {"stopped"}


# issue 37: a step that saves on SIGTERM, writes its declared output and exits 0 within its grace
FINISHER = "trap 'echo 1 > /out/done; echo finished; exit 0' TERM; echo started; sleep 60 & wait"
# the same exit 0 without its declared output: a stop, not a success
QUITTER = "trap 'echo quit; exit 0' TERM; echo started; sleep 60 & wait"
SAVE_THEN_NEXT = f"""apiVersion: hetflow/v1
name: grace
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "{{a}}"]
    outputs: [done]{{grace}}
  b:
    needs: [a]
    image: {BUSYBOX}
    command: [sh, -c, "cat /in/a/done > /out/done"]
    inputs: {{a: a/done}}
    outputs: [done]
"""


def _stop_within_grace(hf: Hetflow, tmp_path: Any, how: str, command: str) -> str:
    """Start a run whose step ``a`` runs ``command``, stop it ``how``, return the run id."""
    grace = "\n    stop_grace: 30s" if how == "stop_grace" else ""
    wf = write(tmp_path, SAVE_THEN_NEXT.replace("{a}", command).replace("{grace}", grace))
    proc = _start(hf, wf, "--grace", "30s") if how == "SIGTERM" else None
    run_id = _run_id(hf) if proc is not None else hf("run", "-d", wf).stdout.strip()
    hf.wait_for(lambda: "started" in hf("logs", run_id, "a", check=False).stdout)
    if proc is not None:
        os.killpg(proc.pid, signal.SIGTERM)
        code, out = _ended(proc)
        assert code == 143, out
    else:
        hf("stop", run_id, *(["--grace", "30s"] if how == "stop --grace" else []))
    assert run_containers(run_id, running=True) == []
    assert hf.show(run_id)["state"] == "stopped"
    return run_id


@pytest.mark.parametrize("how", ["stop --grace", "stop_grace", "SIGTERM"])
def test_a_step_that_exits_0_with_its_outputs_during_the_grace_is_succeeded(
    hf: Hetflow, tmp_path: Any, how: str
) -> None:
    """issue 37: whatever stop was going on (hetflow stop --grace, the step's stop_grace, SIGTERM
    to the executor), an attempt that exits 0 with its outputs is succeeded, never run again."""
    run_id = _stop_within_grace(hf, tmp_path, how, FINISHER)
    a = _steps(hf, run_id)["a"]
    assert (a["state"], a["exit_code"]) == ("succeeded", 0), a
    assert [(x["state"], x["exit_code"]) for x in a["attempt_history"]] == [("succeeded", 0)]
    assert "finished" in hf("logs", run_id, "a").stdout
    hf("resume", "-q", run_id)
    steps = _steps(hf, run_id)
    assert (steps["a"]["attempts"], steps["b"]["state"]) == (1, "succeeded")  # a not run again
    assert hf.show(run_id)["state"] == "succeeded"


def test_a_step_that_exits_0_without_its_outputs_during_the_grace_is_stopped(hf: Hetflow, tmp_path: Any) -> None:
    run_id = _stop_within_grace(hf, tmp_path, "stop --grace", QUITTER)
    a = _steps(hf, run_id)["a"]
    assert a["state"] == "stopped" and [x["state"] for x in a["attempt_history"]] == ["stopped"]
    assert a["attempt_history"][0]["exit_code"] == 0  # its exit, beside the stop
