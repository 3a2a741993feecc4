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
"""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.images import (
    Descriptor,
    Resolution,
    canonical_json,
    digest_of,
    normalize_arch,
    parse_index,
    requirements_of,
    resolve,
)
from hetflow.inventory import Node

__all__ = ["Filtered", "NoBuildFits", "filter_index", "for_runtimes"]


@dataclass(frozen=True)
class Filtered:
    """The view: its bytes and digest, and the resolution that chose its one entry."""

    body: bytes
    digest: str
    resolution: Resolution


@dataclass(frozen=True)
class NoBuildFits:
    """No entry of the index runs on the machine type; ``reasons`` says why, per entry."""

    resolution: Resolution

    @property
    def reasons(self) -> list[str]:
        return [line.strip() for line in self.resolution.explain()[1:]]


def filter_index(raw: bytes, node: Node) -> Filtered | NoBuildFits:
    """``node``'s view of the index ``raw``.  Raises ``BadDocumentError`` (from
    ``parse_index``) when ``raw`` is not an index."""
    index = parse_index(raw)
    resolution = resolve(index, node)
    if resolution.chosen is None:
        return NoBuildFits(resolution)
    body = canonical_json(index.model_copy(update={"manifests": [for_runtimes(resolution.chosen)]}))
    return Filtered(body, digest_of(body), resolution)


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
