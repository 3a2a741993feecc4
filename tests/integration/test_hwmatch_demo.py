"""`python -m demo.hwmatch`, the end of `make demo`, end to end (about 30 s): it must
pass its own checks and leave neither the registry nor the proxy running."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.registry import require_tools

pytestmark = pytest.mark.integration


def _listening(host_port: str) -> bool:
    host, _, port = host_port.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def test_the_demo_passes_and_cleans_up(tmp_path: Path) -> None:
    require_tools("docker-registry", "podman", "gcc")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HETFLOW_", "SUDO_"))}
    env["HETFLOW_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "demo.hwmatch", "--workdir", str(tmp_path / "demo")],
        env=env,
        cwd=Path(__file__).resolve().parents[2],  # demo/ is a package of the checkout, not installed
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    assert "hwdemo: all checks passed" in done.stdout
    for build in ("BUILD=generic", "BUILD=v3", "BUILD=gpu-sm80"):
        assert build in done.stdout
    registry = re.search(r"docker-registry serving http://(\S+)", done.stdout)
    proxy = re.search(r"--listen (\S+)", done.stdout)
    assert registry and proxy
    assert not _listening(registry.group(1)) and not _listening(proxy.group(1))
    written = (tmp_path / "demo" / "workflow.yaml").read_text()
    assert written.count(f'image: "{registry.group(1)}/hetflow-examples/whichbuild:latest"') == 2
