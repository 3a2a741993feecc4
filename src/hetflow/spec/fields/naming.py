"""How step names and input references are spelled: a fan-out item's name, a data set's
reference.  Kept apart from the models so that readers of the state store (``hetflow ps``,
``show``) can split names without loading pydantic and the whole spec."""

from __future__ import annotations

FANOUT_SEP = "."  # item i of fan-out step X is the step "X.i" (step names have no dots)


def fanout_parent(name: str) -> str | None:
    """``align.3`` -> ``align``; None for a step that is not a fan-out item."""
    head, sep, tail = name.rpartition(FANOUT_SEP)
    return head if sep and tail.isdigit() else None


DATA_PREFIX = "data."  # inputs: {ref: data.NAME} or data.NAME/path/in/it
