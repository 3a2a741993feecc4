"""Which container engine hetflow drives: HETFLOW_ENGINE, else podman, else docker; a runtime
it does not drive is refused by name, naming the variable and what it drives."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.config import find_engine
from hetflow.errors import EngineError


def bin_dir(tmp_path: Path, *names: str) -> str:
    """A PATH of one folder holding an executable per name."""
    for name in names:
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    return str(tmp_path)


@pytest.mark.parametrize(
    ("installed", "wanted", "found"),
    [
        (["podman", "docker"], None, "podman"),
        (["docker"], None, "docker"),
        (["podman", "docker"], "docker", "docker"),
        (["podman-recorder"], "podman-recorder", "podman-recorder"),  # a wrapper taking podman's arguments
    ],
    ids=["podman-first", "docker-else", "docker-asked", "wrapper"],
)
def test_the_engine_found(tmp_path: Path, installed: list[str], wanted: str | None, found: str) -> None:
    env = {"PATH": bin_dir(tmp_path, *installed)} | ({"HETFLOW_ENGINE": wanted} if wanted else {})
    assert Path(find_engine(env)).name == found


@pytest.mark.parametrize(
    ("installed", "wanted", "says"),
    [
        (
            ["apptainer", "podman"],
            "apptainer",
            "HETFLOW_ENGINE=apptainer: hetflow drives podman and docker only; apptainer is not supported",
        ),
        ([], "/usr/local/bin/singularity", "singularity is not supported"),
        ([], "nerdctl", "nerdctl is not supported"),
        (["podman"], "podmn", "HETFLOW_ENGINE=podmn is not on PATH; it names the container engine: podman or docker"),
        ([], None, "no container engine found (looked for podman, docker on PATH); install podman"),
    ],
    ids=["apptainer-installed", "singularity-path", "nerdctl", "typo", "none-installed"],
)
def test_an_engine_hetflow_cannot_drive_is_refused_saying_what_it_drives(
    tmp_path: Path, installed: list[str], wanted: str | None, says: str
) -> None:
    env = {"PATH": bin_dir(tmp_path, *installed)} | ({"HETFLOW_ENGINE": wanted} if wanted else {})
    with pytest.raises(EngineError) as caught:
        find_engine(env)
    assert says in str(caught.value)
