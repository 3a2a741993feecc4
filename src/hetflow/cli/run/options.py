"""Options of ``run`` and ``resume`` that set up this process before a run is recorded: the
secrets file a step's secrets are read from, and the grace of a stop made on a signal."""

from __future__ import annotations

import os
from pathlib import Path

from hetflow.errors import UsageError


def secrets_file_option(path: Path | None) -> None:
    """--secrets-file: where this process (and a detached executor it starts, which inherits
    its environment) reads step secrets; the path is passed on, never the values."""
    from hetflow.execute import SECRETS_FILE_ENV

    if path is not None:
        if not path.is_file():
            raise UsageError(f"--secrets-file {path}: no such file (it holds NAME=VALUE lines)")
        os.environ[SECRETS_FILE_ENV] = str(path.resolve())


def grace_option(option: str | None) -> int | None:
    """The grace of a stop the executor makes on a signal: --grace, else HETFLOW_STOP_GRACE."""
    from hetflow.execute import grace_from_env, parse_grace

    return parse_grace(option) if option is not None else grace_from_env(os.environ)
