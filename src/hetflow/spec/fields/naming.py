"""How step names and input references are spelled: a fan-out item's name, a data set's
reference.  Kept apart from the models so that readers of the state store (``hetflow ps``,
``show``) can split names without loading pydantic and the whole spec."""

from __future__ import annotations

FANOUT_SEP = "."  # item i of fan-out step X is the step "X.i" (step names have no dots)


def fanout_parent(name: str) -> str | None:
    """``align.3`` -> ``align``; None for a step that is not a fan-out item."""
    head, sep, tail = name.rpartition(FANOUT_SEP)
    return head if sep and tail.isdigit() else None


_FILE_ITEM = {"name", "stem", "rel", "path"}  # ``{files: ...}`` items: the name says enough
ITEM_TEXT_MAX = 40  # characters of an item's values in a log prefix or a live line


def item_text(item: object) -> str:
    """A fan-out item's values as people read them: ``lr=0.01,bs=32`` for a mapping, the
    relative path of a ``{files: ...}`` item, the value itself otherwise."""
    if isinstance(item, dict):
        if set(item) == _FILE_ITEM:
            return str(item["rel"])
        return ",".join(f"{k}={_value(v)}" for k, v in item.items())
    return _value(item)


def step_label(name: str, item: object = None) -> str:
    """A step as log prefixes and live lines name it: ``merge``; an item ``qc[0 sample=a]``
    (its index and values, cut at ITEM_TEXT_MAX), or ``qc[0]`` where its values are not known.
    The attempt is written apart (``qc[0 sample=a] #2``), so ``merge.1`` is never read as
    attempt 1 of merge where ``qc.0`` is item 0."""
    parent = fanout_parent(name)
    if parent is None:
        return name
    index = name.rpartition(FANOUT_SEP)[2]
    values = "" if item is None else item_text(item)
    values = "" if values == index else values  # {range: N}: the value is the index
    if len(values) > ITEM_TEXT_MAX:
        values = values[: ITEM_TEXT_MAX - 1] + "…"
    return f"{parent}[{index}{' ' + values if values else ''}]"


def _value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


DATA_PREFIX = "data."  # inputs: {ref: data.NAME} or data.NAME/path/in/it
