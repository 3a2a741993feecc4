"""A Ray step task's restore (``backends.ray.restore.restore_container``, issue 27) with a
podman that does what it is asked: the image gets the new attempt's identity and podman's
autoremove off (the step was started with ``--rm``; a restored container that ended before
``podman wait`` looked removed itself and its exit code: a finished attempt read as exit 125,
seen on a loaded machine), and the outputs kept with the checkpoint are in the new /out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetflow.execute.backends.ray import restore as ray_restore
from hetflow.execute.checkpoint.archive import config_value
from tests.unit.test_slurm_checkpoint import AUTOREMOVE, _last, _restoring


def _podman(tmp_path: Path, code: int) -> str:
    """A podman that notes its arguments, says nothing to ``inspect`` and ends ``code`` otherwise."""
    binary = tmp_path / "podman"
    binary.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/said\n[ "$1" = inspect ] && exit 1\nexit {code}\n')
    binary.chmod(0o755)
    return str(binary)


def test_a_restored_ray_step_keeps_its_exit_code_for_podman_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_restore, "criu_env", lambda env: dict(env))
    image, made = _restoring(tmp_path)
    spec = made.container  # type: ignore[attr-defined]
    assert ray_restore.restore_container(_podman(tmp_path, 0), spec, made.restore, {}) == ""  # type: ignore[attr-defined]
    assert config_value(image, "name") == spec.name
    assert json.loads(_last(image, "spec.dump"))["annotations"][AUTOREMOVE] == "FALSE"
    assert json.loads(_last(image, "config.dump"))["spec"]["annotations"][AUTOREMOVE] == "FALSE"
    assert (tmp_path / "st" / "2" / "n").read_text() == "7\n"  # the kept outputs, in this attempt's /out
    assert f"container restore --import {image}" in (tmp_path / "said").read_text()


def test_a_ray_restore_podman_refuses_leaves_nothing_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ray_restore, "criu_env", lambda env: dict(env))
    image, made = _restoring(tmp_path)
    why = ray_restore.restore_container(_podman(tmp_path, 1), made.container, made.restore, {})  # type: ignore[attr-defined]
    assert why.startswith(f"restore from {image} failed"), why
    assert not any((tmp_path / "st" / "2").iterdir())  # the copied outputs are gone again
    assert f"rm -f --ignore {made.container.name}" in (tmp_path / "said").read_text()  # type: ignore[attr-defined]
