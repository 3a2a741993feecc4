"""A DAG through `hetflow run` in real containers: outputs passed, state recorded."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

DAG = f"""
apiVersion: hetflow/v1
name: dag
params: {{greeting: hello}}
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo {{{{ params.greeting }}}} > /out/a.txt; mkdir /out/d; echo x > /out/d/x"]
    outputs: [a.txt, d]
  b:
    inputs: {{x: a/a.txt}}
    image: {BUSYBOX}
    command: [sh, -c, "cat /in/x/a.txt > /out/b.txt; echo world >> /out/b.txt; echo to-stdout; echo to-stderr >&2"]
    outputs: [b.txt]
  c:
    needs: [a]
    inputs: {{d: a/d}}
    image: {BUSYBOX}
    command: [sh, -c, "cat /in/d/d/x > /out/c.txt; touch /in/d/d/y 2>/dev/null && echo writable >> /out/c.txt; true"]
    outputs: [c.txt]
"""


def test_dag_runs_to_completion_with_outputs_passed(hf: Hetflow, tmp_path: Path) -> None:
    proc = hf("run", write(tmp_path, DAG), "-p", "greeting=bonjour")
    assert "succeeded" in proc.stdout
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert {s["step"]: s["state"] for s in data["steps"]} == dict.fromkeys("abc", "succeeded")
    assert (step_out(hf, run_id, "b") / "b.txt").read_text() == "bonjour\nworld\n"
    # inputs are mounted read-only: the write into /in failed
    assert (step_out(hf, run_id, "c") / "c.txt").read_text() == "x\n"
    outputs = {(o["step"], o["name"]): o for o in data["outputs"]}
    b_txt = step_out(hf, run_id, "b") / "b.txt"
    assert outputs[("b", "b.txt")]["sha256"] == hashlib.sha256(b_txt.read_bytes()).hexdigest()
    # b's container ran after a finished: its start is not before a's end
    steps = {s["step"]: s for s in data["steps"]}
    assert steps["b"]["started"] >= steps["a"]["ended"] - 0.01
    logs = hf("logs", run_id, "b")
    assert "to-stdout" in logs.stdout and "to-stderr" in logs.stderr
    # containers are removed once their result is recorded
    assert hf("ps", "--json").stdout.strip() == "[]"


def test_missing_output_fails_the_step(hf: Hetflow, tmp_path: Path) -> None:
    wf = f"""
apiVersion: hetflow/v1
name: lazy
steps:
  lazy:
    image: {BUSYBOX}
    command: [true]
    outputs: [result.txt]
"""
    proc = hf("run", write(tmp_path, wf), check=False)
    assert proc.returncode == 1
    step = hf.show(hf.last_run())["steps"][0]
    assert step["state"] == "failed"
    assert "did not write declared output(s) result.txt" in step["reason"]


def test_retry_with_backoff_then_success(hf: Hetflow, tmp_path: Path) -> None:
    wf = f"""
apiVersion: hetflow/v1
name: flaky
steps:
  flaky:
    retries: 2
    image: {BUSYBOX}
    command: [sh, -c, "echo attempt $HETFLOW_ATTEMPT; [ $HETFLOW_ATTEMPT -ge 3 ] || exit 7; echo ok > /out/ok"]
    outputs: [ok]
"""
    hf("run", write(tmp_path, wf))
    data = hf.show(hf.last_run())
    step = data["steps"][0]
    assert step["state"] == "succeeded" and step["attempts"] == 3
    history = step["attempt_history"]
    assert [a["exit_code"] for a in history] == [7, 7, 0]
    assert [a["container"] for a in history] == [f"hf-{data['id']}-flaky-{n}" for n in (1, 2, 3)]
    # exponential backoff: the second wait (0.4 s) is about twice the first (0.2 s)
    gap1 = history[1]["started"] - history[0]["ended"]
    gap2 = history[2]["started"] - history[1]["ended"]
    assert gap1 >= 0.2 and gap2 >= 0.4


def test_retries_exhausted_fails_and_skips_dependents(hf: Hetflow, tmp_path: Path) -> None:
    wf = f"""
apiVersion: hetflow/v1
name: broken
steps:
  bad:
    retries: 1
    image: {BUSYBOX}
    command: [sh, -c, "echo boom >&2; exit 3"]
    outputs: [x]
  after:
    needs: [bad]
    image: {BUSYBOX}
    command: [true]
"""
    proc = hf("run", write(tmp_path, wf), check=False)
    assert proc.returncode == 1
    steps = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}
    assert steps["bad"]["state"] == "failed" and steps["bad"]["attempts"] == 2
    assert "exited with code 3" in steps["bad"]["reason"] and "boom" in steps["bad"]["reason"]
    assert steps["after"]["state"] == "skipped"
    assert "Traceback" not in proc.stdout + proc.stderr
