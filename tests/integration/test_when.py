"""`when:` on a step (issue 25), with real podman: a params condition, a condition on an
upstream step's small output (a boolean file, a number), a fan-out item's condition, and
what follows a skipped step; the run succeeds, each skipped step says why, and the dry run
says the same before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow

WORKFLOW = f"""apiVersion: hetflow/v1
name: conditions
params: {{mode: quick}}
steps:
  check:
    image: {BUSYBOX}
    command: [sh, -c, 'echo false > /out/ok.txt; echo 3 > /out/n.txt']
    outputs: [ok.txt, n.txt]
  full:
    image: {BUSYBOX}
    command: [sh, -c, 'echo full > /out/r']
    outputs: [r]
    when: "{{{{ params.mode }}}} == 'full'"
  after-full:
    image: {BUSYBOX}
    command: [sh, -c, 'cat /in/r/r > /out/r']
    inputs: {{r: full/r}}
    outputs: [r]
  gated:
    image: {BUSYBOX}
    command: [sh, -c, 'echo gated > /out/r']
    outputs: [r]
    when: "output('check/ok.txt')"
  counted:
    image: {BUSYBOX}
    command: [sh, -c, 'echo counted > /out/r']
    outputs: [r]
    when: "output('check/n.txt') >= 2 and params.mode != 'off'"
  sweep:
    image: {BUSYBOX}
    foreach: [0.1, 0.01]
    command: [sh, -c, 'echo {{{{ item }}}} > /out/r']
    outputs: [r]
    when: "{{{{ item }}}} > 0.05"
"""


def test_conditions_skip_what_they_say_and_the_run_succeeds(hf: Hetflow, tmp_path: Path) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW)

    preview = json.loads(hf("run", "--dry-run", "--json", "--no-cache", str(wf)).stdout)
    planned = {s["step"]: (s["status"], s["why"]) for s in preview["steps"]}
    assert planned["full"] == ("skipped", "condition false: when: {{ params.mode }} == 'full'")
    assert planned["after-full"] == ("skipped", "condition false: upstream step 'full' skipped")
    assert planned["sweep.1"][0] == "skipped" and planned["sweep.0"][0] == "runs"
    assert planned["gated"][0] == "runs" and planned["gated"][1].startswith("if when: output('check/ok.txt')")

    done = hf("run", "-q", "--no-cache", str(wf), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    data = hf.show(hf.last_run())
    assert data["state"] == "succeeded"
    got = {s["step"]: (s["state"], s["reason"]) for s in data["steps"]}
    assert got["full"] == ("skipped", "condition false: when: {{ params.mode }} == 'full'")
    assert got["after-full"] == ("skipped", "condition false: upstream step 'full' skipped")
    assert got["gated"] == ("skipped", "condition false: when: output('check/ok.txt')")
    assert got["sweep.1"] == ("skipped", "condition false: when: 0.01 > 0.05")
    assert {s: got[s][0] for s in ("check", "counted", "sweep.0")} == dict.fromkeys(
        ("check", "counted", "sweep.0"), "succeeded"
    )

    full = hf("run", "-q", "--no-cache", "-p", "mode=full", str(wf))
    assert full.returncode == 0
    states = hf.step_states(hf.last_run())
    assert states["full"] == states["after-full"] == "succeeded"


def test_a_condition_that_cannot_be_evaluated_fails_its_step_and_a_bad_one_is_refused(
    hf: Hetflow, tmp_path: Path
) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text(WORKFLOW.replace("output('check/n.txt') >= 2", "output('check/n.txt') > 'x'"))
    done = hf("run", "-q", "--no-cache", str(wf), check=False)
    assert done.returncode == 1
    counted = next(s for s in hf.show(hf.last_run())["steps"] if s["step"] == "counted")
    assert counted["state"] == "failed" and "cannot compare 3 with 'x'" in counted["reason"]

    wf.write_text(WORKFLOW.replace("output('check/ok.txt')\"", "output('check/nope.txt')\""))
    bad = hf("validate", str(wf), check=False)
    assert bad.returncode == 2
    assert "reads 'check/nope.txt', which 'check' does not declare (its outputs: ok.txt, n.txt)" in bad.stderr
