"""What a resume changes when the workflow file was edited since the run was recorded
(Nextflow's ``-resume``: the current definition is applied, finished work whose inputs did
not change is kept).

A succeeded step is kept when its cache key (``cache.cache_key``: image identity, variant,
command, env, network, outputs, inputs' content) is the same under the old and the new
definition; otherwise it and everything downstream of it run again.  Edits that do not enter
the key (publish, resources, retries, needs...) take effect for the steps that run anyway
(failed, stopped, skipped, pending); a succeeded step is kept as it is, and not re-published:
its result does not depend on them, and publishing again what already succeeded is what a
fresh ``hetflow run`` (from the cache) is for.

``compare`` is pure: the session gives it the two workflows, the step records and how to
compute a key, and applies the answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetflow.execute.data.cachekey import Key
from hetflow.spec import DATA_PREFIX, Step, Workflow, descendants, edges_of
from hetflow.state import SUCCEEDED, InputsSeen, StepRecord

# the key's fields (cache.cache_key's document), as resume names them
KEY_LABELS: Mapping[str, str] = {
    "version": "key format",
    "workflow": "workflow name",
    "step": "step name",
    "image": "image identity",
    "variant": "variant",
    "command": "command",
    "env": "env",
    "network": "network",
    "outputs": "outputs",
    "inputs": "inputs' content",
}
# Step fields that enter the key (directly, or through a variant's image/command/env)
_KEY_FIELDS = frozenset({"image", "command", "env", "network", "outputs", "inputs", "variants"})
_VARIANT_KEY_FIELDS = frozenset({"image", "command", "env"})

CHANGED, DOWNSTREAM, ADDED, REMOVED, EDITED, KEPT = "changed", "downstream", "added", "removed", "edited", "kept"
DATA = "data"  # its data inputs differ from those its result was made from (``compare_data``)


@dataclass(frozen=True)
class Change:
    """One step's part in an applied edit.  ``parts``: the key parts that differ (changed),
    the definition's fields that differ (edited, kept), or the upstream step (downstream)."""

    step: str
    kind: str
    parts: tuple[str, ...] = ()

    def text(self) -> str:
        parts = ", ".join(self.parts)
        return {
            CHANGED: f"{self.step}: changed ({parts}): runs again",
            DATA: f"{self.step}: its data changed ({parts}): runs again",
            DOWNSTREAM: f"{self.step}: runs again: upstream step {parts} changed",
            ADDED: f"{self.step}: new step: runs",
            REMOVED: f"{self.step}: removed from the workflow: dropped from what runs (its attempts are kept)",
            EDITED: f"{self.step}: definition of {parts} changed: takes effect as it runs again",
            KEPT: (
                f"{self.step}: definition of {parts} changed; kept: it succeeded and its result does not depend on"
                " that (not re-published; a new 'hetflow run' publishes from the cache)"
            ),
        }[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "change": self.kind, "parts": list(self.parts), "text": self.text()}


@dataclass(frozen=True)
class Amendment:
    """What applying the edited workflow (and the data as it is now) does; ``rerun``: succeeded
    steps that go back to pending (changed ones and what follows them); ``data``: what changed
    in the run's data, in words."""

    changes: tuple[Change, ...] = ()
    data: tuple[str, ...] = ()

    @property
    def rerun(self) -> tuple[str, ...]:
        return tuple(c.step for c in self.changes if c.kind in (CHANGED, DOWNSTREAM, DATA))

    @property
    def edited(self) -> bool:
        """Whether the workflow's definition changed (not only its data)."""
        return any(c.kind not in (DATA, DOWNSTREAM) for c in self.changes)

    def with_data(self, other: Amendment) -> Amendment:
        """This edit's changes and ``other``'s (the data's), a step the edit sends back already
        keeping its own reason."""
        mine = {c.step: c for c in self.changes}
        for c in other.changes:
            if c.step not in mine or mine[c.step].kind not in (CHANGED, DOWNSTREAM):
                mine[c.step] = c
        return Amendment(tuple(mine.values()), other.data)

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(c.step for c in self.changes if c.kind == ADDED)

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(c.step for c in self.changes if c.kind == REMOVED)


KeyOf = Callable[[Workflow, str, str], Key | None]


def key_parts(old: Key | None, new: Key | None) -> tuple[str, ...]:
    """The key's parts that differ, named for people (``KEY_LABELS``); () when equal."""
    if old is None or new is None:
        return () if old is None and new is None else ("variant",)  # the variant is gone (or new)
    if old.digest == new.digest:
        return ()
    a, b = json.loads(old.text), json.loads(new.text)
    return tuple(KEY_LABELS.get(k, k) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k))


def definition_parts(old: Step, new: Step) -> tuple[str, ...]:
    """The fields of a step's definition that differ but do not enter its key (publish,
    resources, retry, needs...); a variant's own ones as ``variant NAME: FIELD``."""
    a, b = old.model_dump(), new.model_dump()
    parts = [f for f in sorted(a.keys() | b.keys()) if f not in _KEY_FIELDS and a.get(f) != b.get(f)]
    if old.variants is not None or new.variants is not None:
        ov, nv = old.resolved_variants(), new.resolved_variants()
        for name in sorted(ov.keys() | nv.keys()):
            if name not in ov or name not in nv:
                parts.append(f"variant {name} ({'added' if name in nv else 'removed'})")
                continue
            va, vb = ov[name].model_dump(), nv[name].model_dump()
            parts += [
                f"variant {name}: {f}"
                for f in sorted(va.keys() | vb.keys())
                if f not in _VARIANT_KEY_FIELDS and va.get(f) != vb.get(f)
            ]
    return tuple(parts)


def _all_parts(old: Step, new: Step) -> tuple[str, ...]:
    """Everything that differs in a step that runs again anyway (key fields by name too)."""
    a, b = old.model_dump(), new.model_dump()
    return tuple(f for f in sorted(a.keys() | b.keys()) if a.get(f) != b.get(f))


def compare(old: Workflow, new: Workflow, steps: Sequence[StepRecord], key_of: KeyOf) -> Amendment:
    """What applying ``new`` to a run recorded with ``old`` does, step by step (in the run's
    order, new steps last).  ``key_of(workflow, step, variant)``: the step's key under that
    workflow, None when the variant does not exist there."""
    records = {s.step: s for s in steps}
    changes: dict[str, Change] = {}
    for name, rec in records.items():
        if name not in new.steps:
            changes[name] = Change(name, REMOVED)
            continue
        if name not in old.steps:
            continue  # not in the recorded workflow (cannot happen but for a damaged store): left as it is
        if rec.state == SUCCEEDED and rec.variant:
            differ = key_parts(key_of(old, name, rec.variant), key_of(new, name, rec.variant))
            if differ:
                changes[name] = Change(name, CHANGED, differ)
                continue
            edits = definition_parts(old.steps[name], new.steps[name])
            if edits:
                changes[name] = Change(name, KEPT, edits)
        else:
            edits = _all_parts(old.steps[name], new.steps[name])
            if edits:
                changes[name] = Change(name, EDITED, edits)
    _downstream(changes, records, new)
    ordered = [changes[s] for s in records if s in changes]
    ordered += [Change(s, ADDED) for s in new.steps if s not in records]
    return Amendment(tuple(ordered))


def _downstream(changes: dict[str, Change], records: Mapping[str, StepRecord], wf: Workflow) -> None:
    """Every succeeded step below a changed one runs again too (``changes`` completed)."""
    edges = edges_of(wf)
    for name in [c.step for c in changes.values() if c.kind in (CHANGED, DATA)]:
        for d in sorted(descendants(edges, name)):
            below = records.get(d)
            if below is not None and below.state == SUCCEEDED and (d not in changes or changes[d].kind == KEPT):
                changes[d] = Change(d, DOWNSTREAM, (name,))


def compare_data(
    wf: Workflow,
    steps: Sequence[StepRecord],
    now: Mapping[str, Mapping[str, str]],
    made_from: Mapping[str, InputsSeen],
    found: Mapping[str, str],
) -> Amendment:
    """What the run's data as it is now changes (``hetflow resume`` re-hashes ``data:``, as
    ``run`` and ``--dry-run`` do): a succeeded step whose data inputs differ from those its
    result was made from, or that ran while they changed, runs again with what follows it.
    ``now``: step -> data reference -> digest now; ``made_from``: step -> what its result was
    made from; ``found``: data set -> what changed in it, in words."""
    records = {s.step: s for s in steps}
    changes: dict[str, Change] = {}
    for name, rec in records.items():
        if rec.state != SUCCEEDED or name not in now or name not in made_from:
            continue
        then = made_from[name]
        if then.changed:
            changes[name] = Change(name, DATA, (f"while it ran: {then.changed}",))
            continue
        moved = [ref for ref, digest in sorted(now[name].items()) if then.digests.get(ref) != digest]
        if moved:
            parts = tuple(f"{ref}: {found.get(ref[len(DATA_PREFIX) :].split('/', 1)[0], 'changed')}" for ref in moved)
            changes[name] = Change(name, DATA, parts)
    _downstream(changes, records, wf)
    return Amendment(tuple(changes[s] for s in records if s in changes))
