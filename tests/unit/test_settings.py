"""Backend settings: file, then environment, then flags; every bad value named."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.errors import UsageError
from hetflow.execute.settings import Settings, load_settings


def test_defaults_without_a_file(tmp_path: Path) -> None:
    assert load_settings(None, tmp_path, {}) == Settings()


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "backend: slurm\ncluster: /c.yaml\nworkdir: /shared\nslurm: {partition: cpu, account: a1}\n"
    )
    s = load_settings(None, tmp_path, {"HETFLOW_SLURM_PARTITION": "gpu"})
    assert (s.backend, s.cluster, s.workdir, dict(s.section("slurm"))) == (
        "slurm",
        "/c.yaml",
        "/shared",
        {"partition": "gpu", "account": "a1"},
    )
    s = load_settings(None, tmp_path, {"HETFLOW_BACKEND": "ray"}, backend="local")
    assert s.backend == "local"
    assert Settings.from_json(s.to_json()) == s


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("backend: pbs\n", {}, "backend 'pbs' is not one of local, slurm, ray"),
        ("bakend: slurm\n", {}, "unknown key(s) bakend"),
        ("backend: slurm\n", {}, "the slurm backend plans on a cluster file: give --cluster FILE"),
        ("slurm: [a]\n", {}, "'slurm' must be a mapping"),
        ("- a\n", {}, "settings are a mapping"),
    ],
    ids=["unknown-backend", "typo-key", "slurm-without-cluster", "section-not-mapping", "not-a-mapping"],
)
def test_bad_settings_are_named(tmp_path: Path, text: str, kwargs: dict[str, str], message: str) -> None:
    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(UsageError) as info:
        load_settings(None, tmp_path, {}, **kwargs)
    assert message in str(info.value)


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_settings(tmp_path / "nope.yaml", tmp_path, {})
