"""A machine type's view of an image index: the one build it should pull.  Pure.

The view keeps everything of the upstream index (schemaVersion, mediaType,
annotations, fields this code does not know) except the entries it drops, and is
written with ``canonical_json``: the same index and the same machine type give the
same bytes, hence the same digest, on every request and across restarts.  Being
other bytes, it is served under its own digest, never under the upstream's.

One change is made to the entry kept: a CPU ``platform.variant`` (amd64 ``v3``, arm64
``v8.2``) is moved into ``platform.features``.  containers/image 5.23 (podman 4.3,
skopeo 1.9) matches the variant literally and asks for ``""`` on amd64, so it would
refuse the one build it is offered ("no image found in image index for architecture
amd64, variant \"\""); the proxy has checked the variant already, and the feature
keeps the need on record (``requirements_of`` reads the same needs from it).

What comes back is the answer only, small enough to keep per index and machine type:
the view's bytes and the chosen entry's digest, or the first ``REASONS_SHOWN`` reasons
nothing fits (each cut at ``REASON_CHARS``) and a count of the rest.  Never the parsed
index or every entry's verdict: for a 4 MB index that was about 27 MB (issue 38), and
describing every rejected entry took 0.5 s.  ``filter_index`` is a plain function of
bytes, so it runs in a worker process (``hetflow.registry.matching.viewcache``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.images import (
    Descriptor,
    canonical_json,
    digest_of,
    normalize_arch,
    parse_index,
    requirements_of,
    resolve,
)
from hetflow.inventory import Node

__all__ = ["REASONS_SHOWN", "REASON_CHARS", "Filtered", "NoBuildFits", "filter_index", "for_runtimes"]

# A 404's list of why no build fits is cut here (issue 23: a 4 MiB index gave a 4 MB body).
REASONS_SHOWN = 20
REASON_CHARS = 300


@dataclass(frozen=True)
class Filtered:
    """The view: its bytes and digest, and the digest of the one entry it keeps."""

    body: bytes
    digest: str
    chosen: str

    @property
    def nbytes(self) -> int:
        return len(self.body) + len(self.digest) + len(self.chosen)


@dataclass(frozen=True)
class NoBuildFits:
    """No entry of the index runs on the machine type; ``reasons`` says why, one line per
    entry for the first ``REASONS_SHOWN``, then ``... and N more`` if there are more."""

    reasons: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        return sum(len(r) for r in self.reasons)


def filter_index(raw: bytes, node: Node) -> Filtered | NoBuildFits:
    """``node``'s view of the index ``raw``.  Raises ``BadDocumentError`` (from
    ``parse_index``) when ``raw`` is not an index."""
    index = parse_index(raw)
    resolution = resolve(index, node)
    if resolution.chosen is None:
        lines = resolution.explain(limit=REASONS_SHOWN)[1:]
        return NoBuildFits(tuple(line.strip()[:REASON_CHARS] for line in lines))
    body = canonical_json(index.model_copy(update={"manifests": [for_runtimes(resolution.chosen)]}))
    return Filtered(body, digest_of(body), resolution.chosen.digest)


def for_runtimes(desc: Descriptor) -> Descriptor:
    """``desc`` with a CPU variant moved into ``platform.features`` (see the module doc)."""
    platform = desc.platform
    if platform is None or not platform.variant or normalize_arch(platform.architecture) not in ("amd64", "arm64"):
        return desc
    needs = requirements_of(desc).labels()
    features = list(platform.features) + [f for f in needs if f not in platform.features]
    moved = desc.model_copy(update={"platform": platform.model_copy(update={"variant": None, "features": features})})
    if requirements_of(moved) != requirements_of(desc):
        return desc  # a variant the features cannot say: leave the entry as it was
    return moved
