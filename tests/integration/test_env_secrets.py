"""A step's env values reach podman through an env file, never a command line: while the
step's container runs, no process on this machine has the value in /proc/PID/cmdline (what
``ps`` shows every local user), the step sees it, and the env file is already gone."""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, run_containers, write


def _cmdlines_with(value: bytes) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if value in cmdline:
            words = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{proc.name}: {words[:200]}")
    return found


def test_a_steps_env_value_is_on_no_command_line_and_its_env_file_is_gone(tmp_path: Path, hf: Hetflow) -> None:
    secret = "xyz-" + secrets.token_hex(8)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    wait = "sleep 0.1; i=$((i+1))"
    wf = f"""apiVersion: hetflow/v1
name: secretenv
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, "echo $SECRET > /out/seen; i=0; while [ ! -e /out/seen.done ] && [ $i -lt 600 ]; do {wait}; done"]
    env: {{SECRET: "{secret}"}}
"""
    hits: list[str] = []
    done = threading.Event()

    def scan() -> None:  # all the while the run starts its container (`podman run` lives a moment only)
        while not done.is_set() and not hits:
            hits.extend(_cmdlines_with(secret.encode()))
            time.sleep(0.005)  # a `podman run` lives far longer than this; the machine is shared

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    runner = hf.popen("run", write(tmp_path, wf), extra_env={"TMPDIR": str(private_tmp)})
    try:
        seen: list[Path] = []

        def started() -> bool:  # the run's work directory, found without a hetflow command per poll
            seen[:] = list(hf.home.glob("runs/*/attempts/s/1/out/seen"))  # the attempt's /out while it runs
            return bool(seen) and seen[0].stat().st_size > 0

        hf.wait_for(started, timeout=90)
        assert seen[0].read_text().strip() == secret  # the step sees it
        run_id = seen[0].parents[4].name  # runs/RUN/attempts/s/1/out/seen
        assert run_containers(run_id, running=True)  # the scan below is made while the container runs
        done.set()
        scanner.join(30)
        assert hits == []  # from the run's start until the container runs, no command line held it
        assert _cmdlines_with(secret.encode()) == []
        hf.wait_for(lambda: not list(private_tmp.glob("hetflow-env-*")), timeout=60)  # removed once started
        (seen[0].parent / "seen.done").touch()
        assert runner.wait(timeout=90) == 0
    finally:
        done.set()
        if runner.poll() is None:
            runner.kill()
            runner.wait()
