"""The OCI runtime podman starts steps with (HETFLOW_OCI_RUNTIME, execute.ociruntime), on real
podman: a step's container runs under the runtime `hetflow nodes` names, as podman inspect's
OCIRuntime says; a forced runtime that is not installed is refused before anything is recorded.

Where crun refuses this kernel's hybrid cgroup layout, auto's choice is runc and says why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, write

WORKFLOW = f"""apiVersion: hetflow/v1
name: runtime
steps:
  one:
    image: {BUSYBOX}
    command: ["true"]
"""


def inspecting_podman(tmp_path: Path) -> tuple[Path, Path]:
    """A podman that, after each ``run`` of a named container, appends that container's
    ``OCIRuntime`` and name to a log (hetflow removes the container only after the run returns)."""
    real = shutil.which("podman")
    assert real is not None
    log, shim = tmp_path / "runtimes.log", tmp_path / "bin" / "podman"
    shim.parent.mkdir()
    shim.write_text(
        "#!/bin/bash\n"
        f'"{real}" "$@"; rc=$?\n'
        'name=""; run=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = --name ] && name=$a; [ "$a" = run ] && run=1; prev=$a; done\n'
        f'if [ -n "$run" ] && [ -n "$name" ]; then "{real}" inspect --format "{{{{.OCIRuntime}}}} {{{{.Name}}}}"'
        f' "$name" >> "{log}" 2>/dev/null; fi\n'
        "exit $rc\n"
    )
    shim.chmod(0o755)
    return shim, log


def step_runtimes(log: Path) -> dict[str, str]:
    """Container name -> its OCI runtime, for the step containers (the probe's are --rm: absent)."""
    pairs = (line.split() for line in log.read_text().splitlines() if line.strip()) if log.exists() else iter(())
    return {name: runtime for runtime, name in pairs if "one" in name}


def test_a_step_runs_under_the_runtime_nodes_names(hf: Hetflow, tmp_path: Path) -> None:
    shim, log = inspecting_podman(tmp_path)
    env = {"HETFLOW_ENGINE": str(shim), "HETFLOW_OCI_RUNTIME": "auto", "XDG_CACHE_HOME": str(tmp_path / "cache")}

    (node,) = json.loads(hf("nodes", "--json", extra_env=env).stdout)
    chosen = node["container_runtime"].split()[0]
    assert chosen in ("runc", "crun"), node["container_runtime"]
    hf("run", "-q", write(tmp_path, WORKFLOW), extra_env=env)

    assert set(step_runtimes(log).values()) == {chosen}
    assert len(step_runtimes(log)) == 1
    cached = json.loads((tmp_path / "cache" / "hetflow" / "oci-runtime.json").read_text())
    assert [c["name"] for c in cached.values()] == [chosen]  # the run used the probe nodes made, not its own


def test_a_forced_runtime_is_the_one_podman_uses(hf: Hetflow, tmp_path: Path) -> None:
    shim, log = inspecting_podman(tmp_path)
    env = {"HETFLOW_ENGINE": str(shim), "HETFLOW_OCI_RUNTIME": "runc", "XDG_CACHE_HOME": str(tmp_path / "cache")}

    hf("run", "-q", write(tmp_path, WORKFLOW), extra_env=env)

    assert list(step_runtimes(log).values()) == ["runc"]
    assert not (tmp_path / "cache" / "hetflow" / "oci-runtime.json").exists()  # forced: no probe
    (node,) = json.loads(hf("nodes", "--json", extra_env=env).stdout)
    assert node["container_runtime"].startswith("runc ")
    assert node["container_runtime"].endswith("(HETFLOW_OCI_RUNTIME=runc)")


def test_forcing_a_runtime_that_is_not_installed_is_refused_naming_the_setting(hf: Hetflow, tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere" / "crun")

    proc = hf("run", write(tmp_path, WORKFLOW), check=False, extra_env={"HETFLOW_OCI_RUNTIME": missing})

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"HETFLOW_OCI_RUNTIME={missing}: no such OCI runtime on PATH" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []  # refused before anything was recorded
