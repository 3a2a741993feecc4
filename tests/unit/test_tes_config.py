"""The TES service's config: ``s3:`` names the endpoint (credentials stay in the environment),
and a bad endpoint is refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.errors import UsageError
from hetflow.tes import load_config


def test_s3_endpoint_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tes.yaml"
    path.write_text("s3: {endpoint: 'http://127.0.0.1:9000'}\n")
    config = load_config(path)
    assert config.s3 is not None and config.s3.endpoint == "http://127.0.0.1:9000"
    assert load_config(None).s3 is None


@pytest.mark.parametrize(
    ("text", "where"),
    [("s3: {endpoint: 'ftp://x'}\n", "s3.endpoint"), ("s3: {secret_key: abc}\n", "s3.secret_key")],
)
def test_bad_s3_settings_name_the_field(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "tes.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=rf"tes.yaml: {where}: "):
        load_config(path)


def test_task_network_is_off_unless_the_config_allows_it(tmp_path: Path) -> None:
    assert load_config(None).task_network is False
    path = tmp_path / "tes.yaml"
    path.write_text("task_network: true\n")
    assert load_config(path).task_network is True
    path.write_text("task_network: maybe\n")
    with pytest.raises(UsageError, match=r"tes.yaml: task_network: "):
        load_config(path)
