"""Input bounds (issue 37): templates filled and checked in every field that takes them, and
fan-out limits checked before anything is expanded.  The real CLI; real podman containers.

- ``publish: {to: "{{ params.to }}"}`` publishes where the param says (it went to a folder
  literally named ``{{ params.to }}``); params fill image, inputs and outputs as they fill
  the command; an unknown param there is refused at validate and run with file:line.
- ``foreach: {range: N}`` and ``matrix:`` sizes are computed, not listed: a huge one is
  refused at once with its size and the limit (under a 2 GiB address-space limit the old
  code ran out of memory listing it).
- A fan-out over a step's output (or over a data file's lines) holding more items than the
  limit fails that fan-out step, naming the step, the file, the count and the limit.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

TEMPLATED = f"""
apiVersion: hetflow/v1
name: tmpl
params: {{to: res, name: r.txt, image: "{BUSYBOX}"}}
steps:
  make:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    command: [sh, -c, "echo made > /out/{{{{ params.name }}}}"]
    outputs: ["{{{{ params.name }}}}"]
    publish: {{to: "{{{{ params.to }}}}"}}
  use:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    inputs: {{x: "make/{{{{ params.name }}}}"}}
    command: [sh, -c, "cat /in/x/{{{{ params.name }}}} > /out/seen.txt"]
    outputs: [seen.txt]
"""
IMAGE = f"image: {BUSYBOX}"  # the first one is make's


def test_params_fill_publish_to_image_inputs_and_outputs(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, TEMPLATED.replace(IMAGE, 'image: "{{ params.image }}"', 1))
    hf("run", wf)
    run_id = hf.last_run()
    assert (tmp_path / "res" / "r.txt").read_text() == "made\n"
    assert (step_out(hf, run_id, "use") / "seen.txt").read_text() == "made\n"
    assert not [p for p in tmp_path.iterdir() if "{{" in p.name]
    hf("run", wf, "-p", "to=elsewhere", "-p", "name=s.txt")
    assert (tmp_path / "elsewhere" / "s.txt").read_text() == "made\n"


@pytest.mark.parametrize(
    ("field", "wrong", "line"),
    [
        ('publish: {to: "{{ params.to }}"}', 'publish: {to: "{{ params.nto }}"}', 11),
        ('outputs: ["{{ params.name }}"]', 'outputs: ["{{ params.nname }}"]', 10),
        (IMAGE, 'image: "{{ params.nimage }}"', 7),
        ('inputs: {x: "make/{{ params.name }}"}', 'inputs: {x: "make/{{ params.nname }}"}', 15),
    ],
    ids=["publish-to", "outputs", "image", "inputs"],
)
def test_an_unknown_param_in_a_templated_field_is_refused_with_its_line(
    hf: Hetflow, tmp_path: Path, field: str, wrong: str, line: int
) -> None:
    wf = write(tmp_path, TEMPLATED.replace(field, wrong, 1))
    for command in (["validate", wf], ["run", wf]):
        proc = hf(*command, check=False)
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert f"wf.yaml:{line}:" in proc.stderr and "'{{ params.n" in proc.stderr, proc.stderr
        assert "names no param" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []


def limited(hf: Hetflow, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI under a 2 GiB address-space limit: listing a fan-out's items to count
    them runs out of memory there; computing its size does not."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "hetflow.cli.main", *args],
        capture_output=True,
        text=True,
        env=hf.env,
        preexec_fn=cap,
        timeout=300,
        check=False,
    )


AXIS = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
HUGE = {
    "range": ("foreach: {range: 1000000000000}", "1000000000000 items"),
    "range-step": ("foreach: {range: [0, 3000000000, 7]}", "428571429 items"),
    "matrix": (
        f"matrix: {{a: {AXIS}, b: {AXIS}, c: {AXIS}, d: {AXIS}, e: {AXIS}, f: {AXIS}, g: {AXIS}, h: {AXIS}}}",
        "100000000 items",
    ),
    "matrix-exclude": (
        f"matrix: {{a: {AXIS}, b: {AXIS}, c: {AXIS}, d: {AXIS}, e: {AXIS}, f: {AXIS}, g: {AXIS}, exclude: [{{a: 0}}]}}",
        "9000000 items",
    ),
}


@pytest.mark.parametrize("kind", list(HUGE), ids=list(HUGE))
def test_a_huge_static_fanout_is_refused_with_its_size_before_listing(hf: Hetflow, tmp_path: Path, kind: str) -> None:
    fan, size = HUGE[kind]
    wf = write(
        tmp_path,
        f"apiVersion: hetflow/v1\nname: huge\nsteps:\n  big:\n    image: {BUSYBOX}\n    {fan}\n"
        "    command: [echo, '{{ index }}']\n",
    )
    for command in ("validate", "run"):
        proc = limited(hf, command, wf)
        assert proc.returncode == 2, (proc.stdout, proc.stderr[-2000:])
        assert "wf.yaml:6:" in proc.stderr and f"step 'big' fans out to {size}; at most 100000" in proc.stderr
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


# 100,001 non-empty lines: one over the limit
RUNTIME = f"""
apiVersion: hetflow/v1
name: many
steps:
  list:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    command: [sh, -c, "seq 1 100001 > /out/names.txt"]
    outputs: [names.txt]
  each:
    image: {BUSYBOX}
    resources: {{cpus: 0.2, memory: 32Mi}}
    foreach: {{lines: list/names.txt}}
    command: [echo, "{{{{ item }}}}"]
"""


def test_a_fanout_over_a_steps_output_has_the_same_limit_at_run_time(hf: Hetflow, tmp_path: Path) -> None:
    run_id = hf("run", "-d", write(tmp_path, RUNTIME)).stdout.strip()
    hf.wait_for(lambda: hf.show(run_id)["state"] not in ("pending", "running"), timeout=180)
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert sorted(steps) == ["each", "list"], sorted(steps)[:5]  # never expanded
    assert steps["each"]["state"] == "failed"
    why = steps["each"]["reason"]
    for part in ("'each'", "list/names.txt", "more than 100000 items", "at most 100000"):
        assert part in why, why


def test_a_fanout_over_a_data_files_lines_is_limited_at_submit(hf: Hetflow, tmp_path: Path) -> None:
    (tmp_path / "names.txt").write_text("".join(f"{i}\n" for i in range(100_001)))
    wf = write(
        tmp_path,
        f"apiVersion: hetflow/v1\nname: many\ndata:\n  names: names.txt\nsteps:\n  each:\n    image: {BUSYBOX}\n"
        "    foreach: {lines: data.names}\n    command: [echo, '{{ item }}']\n",
    )
    proc = hf("run", wf, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    for part in ("'each'", "names.txt", "more than 100000 items", "at most 100000"):
        assert part in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []
