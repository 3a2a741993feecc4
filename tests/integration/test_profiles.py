"""Profiles and params files through the real CLI: a profile's resource override reaches the
container's cgroup (in the detached executor and in a resume, which read the run back from
the store), the params file and -p reach the command, a bad profile is refused with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.hfkit import Hetflow

# cgroup v2 names the limit memory.max, v1 memory.limit_in_bytes (kernel docs: cgroup-v2.rst, cgroup-v1/memory.rst)
LIMIT = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
CODE = "{{ params.code }}"


def _files(tmp_path: Path, image: str) -> tuple[Path, Path, Path]:
    wf = tmp_path / "wf.yaml"
    wf.write_text(
        f"""apiVersion: hetflow/v1
name: prof
params: {{greeting: hello, n: 1, code: 0}}
templates:
  bb: {{image: {image}, resources: {{memory: 64Mi}}}}
steps:
  show:
    use: bb
    command: [sh, -c, "echo greeting={{{{ params.greeting }}}} n={{{{ params.n }}}}; {LIMIT}; exit {CODE}"]
"""
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        """params: {greeting: base, n: 0}
profiles:
  small:
    params: {greeting: small}
    resources: {template: {bb: {memory: 96Mi}}}
  big:
    resources: {step: {show: {memory: 128Mi}}}
  typo:
    resources: {template: {bbb: {cpus: 2}}}
"""
    )
    params = tmp_path / "p.yaml"
    params.write_text("n: 7\ncode: 0\n")
    return wf, config, params


def test_a_profile_reaches_the_container_and_a_params_file_the_command(
    hf: Hetflow, tmp_path: Path, busybox: str
) -> None:
    wf, config, params = _files(tmp_path, busybox)
    # detached: the executor is another process that reads the run back from the store
    run_id = hf(
        "run", "--detach", "--no-cache", str(wf), "--config", str(config), "--profile", "small,big",
        "--params-file", str(params), "-p", "code=3",
    ).stdout.strip()  # fmt: skip
    hf.wait_for(lambda: hf.show(run_id)["state"] == "failed")
    logs = hf("logs", run_id, "show").stdout
    # greeting: the profile over the settings file; n: the params file over both; code: -p over the params file
    assert "greeting=small n=7" in logs
    assert str(128 * 2**20) in logs  # the later profile's step override over the earlier one's template override
    # resume reads the run back: the merged params (code=3 too, so the step fails again) and the limit
    hf("resume", run_id, "-q", check=False)
    lines = hf("logs", run_id, "show").stdout.splitlines()
    assert len([line for line in lines if line.endswith(str(128 * 2**20))]) == 2, lines
    assert len([line for line in lines if line.endswith("greeting=small n=7")]) == 2, lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "--profile", "bgi"],
            "config.yaml has no profile 'bgi' (did you mean 'big'?); its profiles: small, big, typo",
        ),
        (["run", "--params-file", "LIST"], "p.yaml:1: a params file is a mapping of param names to values"),
        (
            ["validate", "--profile", "typo"],
            "config.yaml:9: error: profile 'typo': resources.template.bbb: workflow 'prof' has no template 'bbb'"
            " (did you mean 'bb'?); its templates: bb",
        ),
    ],
    ids=["run-unknown-profile", "run-params-file-not-a-mapping", "validate-override-of-no-template"],
)
def test_a_bad_profile_or_params_file_exits_2_and_names_it(
    hf: Hetflow, tmp_path: Path, busybox: str, args: list[str], message: str
) -> None:
    wf, config, params = _files(tmp_path, busybox)
    params.write_text("- n\n")
    args = [str(params) if a == "LIST" else a for a in args]
    proc = hf(args[0], str(wf), "--config", str(config), *args[1:], check=False)
    assert proc.returncode == 2
    assert message in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr
    assert hf("ps", "--all", "--json").stdout.strip() == "[]"  # nothing was recorded
