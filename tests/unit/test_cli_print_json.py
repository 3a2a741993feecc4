"""``print_json``: indented for people, compact (json's C encoder) once a document is a
megabyte or more, as `ps --all --json` of 10,000-step runs is; the same data either way."""

from __future__ import annotations

import json

import pytest

from hetflow.cli.common import JSON_INDENT_BELOW, print_json


def test_small_documents_are_indented_and_big_ones_compact(capsys: pytest.CaptureFixture[str]) -> None:
    small = {"runs": [{"id": "r1", "steps": ["a", "b"]}]}
    print_json(small)
    out = capsys.readouterr().out
    assert out.startswith('{\n  "runs"') and json.loads(out) == small
    big = {"steps": [{"step": f"work.{i}", "state": "succeeded"} for i in range(JSON_INDENT_BELOW // 40)]}
    print_json(big)
    out = capsys.readouterr().out
    assert "\n  " not in out and json.loads(out) == big
