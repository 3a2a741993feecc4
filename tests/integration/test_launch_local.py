"""What a local run asks podman (issue 43: a step costs what a shell loop of ``podman run``
does): a new run lists nothing before its first step (no ``podman ps``, no ``podman network
ls``), and a step's environment file is gone once the run ends."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, run_containers, step_out, write


def recording_podman(folder: Path, log: Path) -> Path:
    """A ``podman`` that appends each call's arguments to ``log``, then runs the real one."""
    real = shutil.which("podman")
    assert real is not None
    folder.mkdir()
    shim = folder / "podman"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {shlex.quote(str(log))}\nexec {shlex.quote(real)} "$@"\n')
    shim.chmod(0o755)
    return shim


def command(line: str) -> list[str]:
    """A recorded call's verb and first argument, past podman's global options."""
    words = line.split()
    while words and words[0] in ("--hooks-dir", "--runtime"):
        words = words[2:]
    return words[:2]


def test_a_new_runs_steps_are_podman_runs_and_their_env_leaves_nothing(tmp_path: Path, hf: Hetflow) -> None:
    calls, private_tmp = tmp_path / "calls", tmp_path / "tmp"
    private_tmp.mkdir()
    shim = recording_podman(tmp_path / "bin", calls)
    steps = "".join(
        f'  s{i}:\n    image: {BUSYBOX}\n    command: [sh, -c, "echo $WORD{i} > /out/w"]\n'
        f'    env: {{WORD{i}: "w{i}rd"}}\n    outputs: [w]\n'
        for i in range(3)
    )
    wf = write(tmp_path, f"apiVersion: hetflow/v1\nname: launches\nsteps:\n{steps}")
    done = hf("run", "-q", "--no-cache", wf, extra_env={"HETFLOW_ENGINE": str(shim), "TMPDIR": str(private_tmp)})
    assert done.returncode == 0
    run_id = hf.last_run()
    for i in range(3):  # each step read its own environment
        assert (step_out(hf, run_id, f"s{i}") / "w").read_text() == f"w{i}rd\n"
    # the OCI runtime's probe (once per machine state, its key names this podman) is not the run's
    lines = [line for line in calls.read_text().splitlines() if "hetflow-oci-probe" not in line]
    asked = [command(line) for line in lines]
    runs = [line for line in lines if f" run --sig-proxy=false --name hf-{run_id}-" in line]
    assert len(runs) == 3 and len([a for a in asked if a[0] == "run"]) == 3  # attached, one a step
    # nothing listed (a new run has no container); per step its run and the env file's
    # ``container exists`` (the file goes once podman has made the container: a FIFO tried
    # instead left a killed executor's podman run blocked on it for ever); then the removals
    # (with the usage read first) and image checks (kept between runs)
    assert {a[0] for a in asked} <= {"run", "inspect", "rm", "image", "manifest", "container"}, asked
    assert [a for a in asked if a[0] == "container" and a[1] != "exists"] == [], asked
    assert list(private_tmp.glob("hetflow-env-*")) == []  # no env file, nor its folder, is left
    assert run_containers(run_id) == []
