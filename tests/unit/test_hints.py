"""Hints on a final failure (issue 42), each kind once a run: an OOM kill with plain
``retries:`` suggests ``retry: {count: N, memory: x2}``; a failing GPU variant suggests ``fallback:``.
The runner tests use the fakes at the engine seam (FakeEngine, a fake clock, fake GPUs:
``tests.unit.builders.world``); the container's exit code is what the fake says.  And a
token-looking value in ``env:`` gets one validate note that says ``use secrets:``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.execute.run.retries import Hints
from hetflow.spec.validate.envsecrets import looks_like_credential
from hetflow.state.models import FAILED
from tests.unit.builders import Outcome, World, gpu, load_steps, node, world

MEMORY_HINT = "`retry: {count: 1, memory: x2}` in place of `retries: 1` asks twice the memory"


def _reasons(w: World) -> dict[str, str]:
    return {s.step: s.reason for s in w.store.steps(w.run.id)}


def test_an_oom_kill_with_plain_retries_suggests_memory_retries_once(tmp_path: Path) -> None:
    body = "".join(f"s{i}:\n  image: x\n  retries: 1\n" for i in range(3))
    w = world(tmp_path, body, outcomes={f"s{i}": [Outcome(137, 1), Outcome(137, 1)] for i in range(3)})

    assert w.execute() == "failed"

    reasons = _reasons(w)
    assert all(
        r.startswith("exited with code 137 (killed (SIGKILL: out of memory, or stopped))") for r in reasons.values()
    )
    hinted = [s for s, r in reasons.items() if MEMORY_HINT in r]
    assert len(hinted) == 1, reasons  # once a run, not once a step
    assert "(plain `retries:` retries with the same memory)" in reasons[hinted[0]]
    assert reasons[hinted[0]].count("hint:") == 1


def test_memory_retries_get_no_memory_hint(tmp_path: Path) -> None:
    w = world(tmp_path, "s:\n  image: x\n  retry: {count: 1, memory: x2}\n", outcomes={"s": [Outcome(137, 1)] * 2})
    assert w.execute() == "failed"
    assert "hint:" not in _reasons(w)["s"]


GPU_STEP = """s{i}:
  variants:
    gpu: {{image: x, resources: {{gpus: 1}}}}
    cpu: {{image: y}}
  retries: 1
"""


def test_a_failing_gpu_variant_suggests_fallback_once(tmp_path: Path) -> None:
    body = "".join(GPU_STEP.format(i=i) for i in range(2))
    w = world(
        tmp_path,
        body,
        node_=node(gpus=(gpu(0), gpu(1))),
        outcomes={f"s{i}": [Outcome(3, 1), Outcome(3, 1)] for i in range(2)},
    )

    assert w.execute() == "failed"

    steps = {s.step: s for s in w.store.steps(w.run.id)}
    assert {s.variant for s in steps.values()} == {"gpu"} and {s.state for s in steps.values()} == {FAILED}
    hint = "hint: the GPU variant 'gpu' failed; `retry: {count: 1, fallback: [gpu, cpu]}` in place of `retries: 1`"
    assert sorted(hint in s.reason for s in steps.values()) == [False, True], [s.reason for s in steps.values()]


@pytest.mark.parametrize(
    ("retry", "said"),
    [
        ("retries: 2", "`retry: {count: 2, fallback: [gpu, cpu]}` in place of `retries: 2` runs variant 'cpu'"),
        ("", "`retry: {count: 1, fallback: [gpu, cpu]}` on the step"),  # no retries: fallback needs one
        ("retry: {count: 1, backoff: 5s}", "`fallback: [gpu, cpu]` added to the step's `retry:`"),
        ("retry: {count: 1, fallback: [cpu]}", None),  # the policy falls back already
    ],
)
def test_the_fallback_hint_fits_the_policy(retry: str, said: str | None) -> None:
    step = load_steps(
        f"s:\n  variants:\n    gpu: {{image: x, resources: {{gpus: 1}}}}\n    cpu: {{image: y}}\n  {retry}\n"
    )
    text = Hints().on_final_failure(step.workflow.steps["s"], "gpu", 3)
    assert (said in text) if said else text == ""


def test_a_cpu_variant_failing_or_a_second_failure_says_nothing_more() -> None:
    s = load_steps("s:\n  variants:\n    gpu: {image: x, resources: {gpus: 1}}\n    cpu: {image: y}\n").workflow.steps[
        "s"
    ]
    hints = Hints()
    assert hints.on_final_failure(s, "cpu", 1) == ""
    assert "fallback" in hints.on_final_failure(s, "gpu", 1)
    assert hints.on_final_failure(s, "gpu", 1) == ""


TOKENS = """apiVersion: hetflow/v1
name: t
steps:
  a:
    image: busybox
    env: {HF_TOKEN: hf_abcdefghijklmnop, MODE: fast, SSH_KEY_PATH: /keys/id}
  b:
    image: busybox
    matrix: {x: [1, 2, 3]}
    env: {DB_PASSWORD: hunter2hunter2, API_KEY: "{{ item.x }}"}
"""


def test_a_token_in_env_gets_one_note_that_says_use_secrets() -> None:
    from hetflow.spec import parse_workflow

    notes = [p for p in parse_workflow(TOKENS, "wf.yaml").notes if "credential" in p.message]
    assert len(notes) == 1  # one for the file, whatever the number of variables and items
    (note,) = notes
    assert (note.line, note.severity) == (6, "note")
    assert "HF_TOKEN of step 'a', DB_PASSWORD of step 'b'" in note.message
    assert "use secrets: [DB_PASSWORD, HF_TOKEN]" in note.message


@pytest.mark.parametrize(
    ("name", "value", "looks"),
    [
        ("GITHUB_TOKEN", "ghp_0123456789abcdef", True),
        ("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG", True),
        ("MODE", "ghp_0123456789abcdef", False),  # not named like one
        ("USE_TOKEN", "true", False),  # a switch
        ("KEY_FILE", "/run/keys/k.pem", False),  # a path
        ("API_KEY", "$API_KEY_FROM_ELSEWHERE", False),  # a reference
    ],
)
def test_what_looks_like_a_credential(name: str, value: str, looks: bool) -> None:
    assert looks_like_credential(name, value) is looks
