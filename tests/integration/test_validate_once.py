"""`hetflow validate` finds every problem of a file in one pass (issue 42): schema errors,
reference errors and the run-time checks (data, images, secrets, a request no node meets)
on the steps that parsed, in the file's order, each with its line; real CLI, real podman
image store (nothing is started)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, write

# Three kinds of problem, interleaved in the file: before issue 42 validate reported the two
# schema errors (lines 11 and 29), then, once they were fixed, the reference errors, then the rest.
WORKFLOW = f"""apiVersion: hetflow/v1
name: many
data:
  raw: {{path: ./no-such-folder}}
steps:
  prep:
    image: {BUSYBOX}
    command: [echo, "{{{{ params.missing }}}}"]
  shape:
    image: {BUSYBOX}
    resources: {{cpus: lots}}
    command: [true]
  ghost:
    image: localhost/hetflow-test/no-such-image:1
    command: [true]
  train:
    image: {BUSYBOX}
    needs: [nowhere]
    command: [true]
  big:
    image: {BUSYBOX}
    resources: {{cpus: 4096}}
    secrets: [HF_VALIDATE_ONCE_UNSET]
    command: [true]
  after_shape:
    image: {BUSYBOX}
    needs: [shape]
    command: [true]
    comand: [typo]
"""
EXPECTED = [
    (4, "error", "data 'raw': no such file or directory 'no-such-folder'"),
    (8, "error", "'{{ params.missing }}' names no param"),
    (11, "error", "steps.shape.resources.cpus: Input should be a valid number"),
    (14, "error", "image 'localhost/hetflow-test/no-such-image:1' is not in podman's image store"),
    (18, "error", "step 'train' needs unknown step 'nowhere'"),
    (22, "error", "step 'big' asks for 4096 CPUs; this machine has"),
    (23, "note", "step 'big': secret 'HF_VALIDATE_ONCE_UNSET' is not set here"),
    (29, "error", "unknown key 'comand' in steps.after_shape (did you mean 'command'?)"),
]


def test_validate_reports_schema_reference_and_runtime_problems_at_once(hf: Hetflow, tmp_path: Path) -> None:
    path = write(tmp_path, WORKFLOW)
    proc = hf("validate", path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.replace("\n ", " ").splitlines() if line.startswith(path)]
    for (line, severity, message), text in zip(EXPECTED, said, strict=False):
        assert text.startswith(f"{path}:{line}: {severity}: "), (text, line)
        assert message in text, (text, message)
    assert len(said) == len(EXPECTED), "\n".join(said)


def test_validate_json_lists_them_in_the_file_order(hf: Hetflow, tmp_path: Path) -> None:
    path = write(tmp_path, WORKFLOW)
    out = json.loads(hf("validate", "--json", path, check=False).stdout)
    assert out["valid"] is False
    assert [(p["line"], p["severity"]) for p in out["problems"]] == [(line, sev) for line, sev, _ in EXPECTED]
    assert out["steps"] == 3  # prep, ghost and big parsed and were checked on this machine


def test_a_file_that_cannot_be_read_is_still_one_json_answer(hf: Hetflow, tmp_path: Path) -> None:
    proc = hf("validate", "--json", str(tmp_path / "gone.yaml"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] is False and [p["message"] for p in out["problems"]] == [
        "no such file; give the path of a workflow YAML"
    ]
