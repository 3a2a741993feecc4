"""``hetflow schema``: the JSON Schema of a workflow file, for editors.

The schema is generated from the workflow models by ``python -m tools.docref`` and shipped in the
package (``share/workflow.schema.json``; tests/unit/test_docs.py fails when it is stale).
An editor with the YAML language server checks a workflow as it is typed when the file's
first line names it: ``# yaml-language-server: $schema=PATH``."""

from __future__ import annotations

import sys

import typer

from hetflow.config import SHARE

SCHEMA = SHARE / "workflow.schema.json"


def register(app: typer.Typer) -> None:
    app.command()(schema)


def schema(
    path: bool = typer.Option(False, "--path", help="Print where the installed schema file is instead."),
) -> None:
    """Print the JSON Schema of workflow files (`hetflow schema > workflow.schema.json`)."""
    sys.stdout.write(f"{SCHEMA}\n" if path else SCHEMA.read_text(encoding="utf-8"))
