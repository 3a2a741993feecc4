"""A step's cache key: the sha256 of a canonical JSON of what decides its result (see
``hetflow.execute.data.cache``'s docstring for what is in it and what is not), computed the
one way the runner's cache pass, the dry run and resume share (``StepKeys``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetflow.execute.data.outputs import sha256_of
from hetflow.execute.secrets import secret_digests
from hetflow.spec import DATA_PREFIX, fanout_parent
from hetflow.state import OutputRecord

if TYPE_CHECKING:  # the spec's models and the data manifest: `hetflow cache ls` needs neither
    from hetflow.execute.data.inputs import DataManifest
    from hetflow.spec import Step, Variant, Workflow

KEY_VERSION = 1


@dataclass(frozen=True)
class Key:
    digest: str
    text: str  # the canonical JSON hashed (shown by `hetflow cache show`)


def cache_key(
    *,
    workflow: str,
    step_name: str,
    step: Step,
    variant_name: str,
    variant: Variant,
    image_identity: str,
    inputs: Mapping[str, str],
    secrets: Mapping[str, str] | None = None,
) -> Key:
    """The key of one step's result (see the module's docstring for what is in it).
    ``secrets``: NAME -> salted digest of its value (``execute.secrets``), never the value;
    absent for a step without secrets, so keys made before secrets existed still match.
    A fan-out's item (``X.3``) is keyed by its step (``X``), not its index: a file added to a
    data set shifts the indexes but leaves the other items' results reusable."""
    parts = (
        workflow,
        fanout_parent(step_name) or step_name,
        image_identity,
        variant_name,
        tuple(variant.command),
        tuple(sorted(variant.env.items())),
        step.network,
        tuple(sorted(step.outputs)),
        tuple(sorted(inputs.items())),
        tuple(sorted(secrets.items())) if secrets else None,
    )
    # A fan-out's items repeat a few documents (issue 43: a 10,000-item rerun has 100): each
    # distinct one is written and hashed once.  The parts are strings, tuples of strings and
    # one bool (``network``, whose False/True a 0/1 cannot stand for: it is always a bool).
    known = _KEYS.get(parts)
    if known is not None:
        return known
    doc: dict[str, Any] = {
        "version": KEY_VERSION,
        "workflow": workflow,
        "step": parts[1],
        "image": image_identity,
        "variant": variant_name,
        "command": list(parts[4]),
        "env": dict(parts[5]),
        "network": step.network,
        "outputs": list(parts[7]),
        "inputs": dict(parts[8]),
    }
    if parts[9] is not None:
        doc["secrets"] = dict(parts[9])
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    key = Key(hashlib.sha256(text.encode()).hexdigest(), text)
    if len(_KEYS) < _KEPT_KEYS:
        _KEYS[parts] = key
    return key


_KEYS: dict[tuple[Any, ...], Key] = {}  # cache_key's parts -> the key (pure: the same parts, the same key)
_KEPT_KEYS = 100_000


def input_digests(
    step: Step,
    outputs_of: Callable[[str], Sequence[OutputRecord]],
    out_dir: Callable[[str], Path],
    data: DataManifest,
    seen: Mapping[str, str] | None = None,
) -> dict[str, str] | None:
    """input key -> content digest; None when one cannot be known (the step is not cached).
    ``seen``: data reference -> the digest an attempt's launch found (``watch.Look``), which
    wins over the manifest's."""
    digests: dict[str, str] = {}
    for key, ref in step.inputs.items():
        if ref.startswith(DATA_PREFIX):
            if seen is not None and ref in seen:
                digests[key] = "data:" + seen[ref]
                continue
            try:
                digests[key] = "data:" + data.digest(ref)
            except KeyError:
                return None
            continue
        parent, _, rel = ref.partition("/")
        records = {r.name: r for r in outputs_of(parent)}
        if rel in records:
            digests[key] = records[rel].sha256
            continue
        inside = [r for r in records.values() if rel.startswith(r.name.rstrip("/") + "/")]
        holds = sorted((n, r.sha256) for n, r in records.items() if n.startswith(rel.rstrip("/") + "/"))
        if inside:
            path = out_dir(parent) / rel
            if not path.exists():
                return None
            digests[key] = sha256_of(path)
        elif holds:
            digests[key] = hashlib.sha256(json.dumps(holds).encode()).hexdigest()
        else:
            return None
    return digests


@dataclass(frozen=True)
class StepKeys:
    """The one way a step's cache key is computed, by the runner's cache pass, the dry run
    and resume alike: each gives how it knows an image's identity, an upstream step's recorded
    outputs, where they lie, the run's data and where the secrets' salt is.

    ``identity(image)``: the image's content identity, None when unknown (the step is then not
    cached); ``refs_when_unknown``: an input whose content cannot be known is keyed by its
    reference instead of making the key unknown (resume compares two definitions that way)."""

    identity: Callable[[str], str | None]
    outputs_of: Callable[[str], Sequence[OutputRecord]]
    out_dir: Callable[[str], Path]
    data: DataManifest
    secrets_root: Path
    refs_when_unknown: bool = False

    def __call__(self, wf: Workflow, name: str, vname: str, seen: Mapping[str, str] | None = None) -> Key | None:
        """The key of ``name`` run as variant ``vname`` of ``wf``; None when it is not cached
        (the variant does not exist, an image or input cannot be known).  ``seen``: the data
        digests its attempt's launch found (``input_digests``)."""
        step = wf.steps[name]
        variant = step.resolved_variants().get(vname)
        if variant is None:
            return None
        identity = self.identity(variant.image)
        inputs = input_digests(step, self.outputs_of, self.out_dir, self.data, seen)
        if inputs is None and self.refs_when_unknown:
            inputs = dict(step.inputs)
        if identity is None or inputs is None:
            return None
        return cache_key(
            workflow=wf.name,
            step_name=name,
            step=step,
            variant_name=vname,
            variant=variant,
            image_identity=identity,
            inputs=inputs,
            secrets=secret_digests(step.secrets, self.secrets_root),
        )
