"""The GA4GH TES compliance suite (third_party/tes/openapi-test-runner, in a venv of its own:
``make tes-compliance-venv``) against a real ``hetflow tes serve`` whose tasks run in real
podman containers ("alpine" and "ubuntu:20.04" are local busybox stand-ins, as no registry
is reachable here).

Every test passes but one, listed in ``CANNOT_PASS`` with why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from demo.images import build_tiny_image

from tests.integration.hfkit import free_port
from tests.integration.teskit import remove_runs

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "third_party/tes/openapi-test-runner"
SUITE = ROOT / "build/tes-compliance-venv/bin/openapi-test-runner"
# (test file, job) -> why it cannot pass against any server that runs its tasks for real
CANNOT_PASS = {
    ("tests/create_task_ignore_error.yml", "get_task"): (
        "it reads logs[0].logs in the same instant as the task is created, before any executor "
        "could have run (no polling in that test); the same check passes once the task has run: "
        "tests/integration/test_tes_tasks.py::test_ignore_error"
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    build_tiny_image("localhost/alpine:latest")
    build_tiny_image("localhost/ubuntu:20.04")
    home = tmp_path_factory.mktemp("tes-home")
    port = free_port()
    env = {**os.environ, "HETFLOW_HOME": str(home)}
    argv = [sys.executable, "-m", "hetflow.cli.main", "tes", "serve", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/ga4gh/tes/"
        for _ in range(200):
            try:
                if httpx.get(url + "v1/service-info", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)  # the server's start, which says nothing when it is up
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        remove_runs(home, env)  # tasks the suite left running, or ended as the server stopped


def test_compliance_suite_passes(server: str, tmp_path: Path) -> None:
    assert SUITE.exists(), f"no compliance venv ({SUITE}): make test builds it (make tes-compliance-venv)"
    work = tmp_path / "runner"
    shutil.copytree(RUNNER, work)  # the runner writes its web report under its working folder
    out = subprocess.run(
        [str(SUITE), "report", "--server", server, "--version", "1.1.0", "-o", str(tmp_path)],
        cwd=work, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    report = json.loads((tmp_path / "report.json").read_text())
    failed = {}
    for phase in report["phases"]:
        for test in phase["tests"]:
            bad = [c for c in test["cases"] if c["status"] != "PASS"]
            if bad:
                failed[(phase["phase_name"], test["test_name"])] = bad[0].get("message", "")
    unexpected = {k: v for k, v in failed.items() if k not in CANNOT_PASS}
    assert not unexpected, f"{unexpected}\n{out.stdout[-3000:]}"
    assert report["summary"]["passed"] > 100, report["summary"]
