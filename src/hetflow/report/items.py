"""A fan-out item's values, as recorded with its run (``run_expansions``): shown beside
the item's step in ``show``, ``--json``, the report and the dashboard, e.g. ``train.3
[lr=0.01,bs=32]`` (issue 25: only ``train.0..4`` was shown)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hetflow.spec import FANOUT_SEP, item_text


def step_items(expansions: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Each item's values by its step (``X.i``), from the run's recorded expansions."""
    out: dict[str, Any] = {}
    for parent, items_json in expansions:
        for i, item in enumerate(json.loads(items_json)):
            out[f"{parent}{FANOUT_SEP}{i}"] = item
    return out


def item_label(item: Any) -> str:
    """``[lr=0.01,bs=32]`` for a mapping, ``[a.txt]`` for a file item, ``[0.1]`` for a value."""
    return f"[{item_text(item)}]"


def item_labels(expansions: Sequence[tuple[str, str]]) -> dict[str, str]:
    return {step: item_label(item) for step, item in step_items(expansions).items()}
