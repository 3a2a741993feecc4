"""The steps of the workflow recorded with a run, read back as plain JSON.

Its own module, with no imports of the engines: ``hetflow logs`` reads a run's gangs and
secrets' names from it, and should load no backend to do so (tests/unit/test_cli_imports.py)."""

from __future__ import annotations

import json
from typing import Any


def recorded_steps(spec_json: str) -> dict[str, dict[str, Any]]:
    """The steps of the workflow recorded with a run, as plain JSON by name ({} where it cannot
    be read): what a stop, a resume and ``hetflow logs`` read back field by field (the whole
    dump does not validate again: a default such as ``gpu_vendor: nvidia`` is written out, and
    a step that asks for no GPU refuses it)."""
    try:
        steps = json.loads(spec_json).get("steps", {})
    except (ValueError, AttributeError):
        return {}
    return {n: s for n, s in steps.items() if isinstance(s, dict)} if isinstance(steps, dict) else {}


def recorded_secrets(spec_json: str) -> set[str]:
    """The names of the secrets the recorded workflow's steps take (``Step.secrets``)."""
    names: set[str] = set()
    for step in recorded_steps(spec_json).values():
        secrets = step.get("secrets")
        if isinstance(secrets, list):
            names |= {n for n in secrets if isinstance(n, str)}
    return names
