"""What the ``hetflow images`` commands call: inspect an image, resolve it for a node,
build an index.  Each returns a JSON-able result (``to_json``) with a rich rendering.

Each takes an ``ImageSource`` (``source``): how the image is reached, a registry's TLS and
credentials or local podman storage, one value its caller builds once.  An image that is
not an index is one build: it is still checked against the node (its os/architecture), and
its result says "not an index".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hetflow.errors import NoFitError
from hetflow.images.distribution.index_build import BuildSpec, BuiltIndex, build_index, parse_build_entry
from hetflow.images.errors import BadDocumentError
from hetflow.images.localimages import LocalImage, LocalImages, PodmanImages
from hetflow.images.matching.match import requirements_of, resolve
from hetflow.images.oci import Descriptor, platform_string
from hetflow.images.reference import parse_reference
from hetflow.images.source import ImageSource, local_name
from hetflow.inventory import Node

__all__ = [
    "EntryInfo",
    "ImageSource",
    "InspectResult",
    "LocalImage",
    "LocalImages",
    "PodmanImages",
    "ResolveResult",
    "VerdictInfo",
    "build_index_image",
    "inspect_image",
    "resolve_image",
]

NOT_AN_INDEX = "not an index: a single build, used as is when its platform fits"
_FROZEN = ConfigDict(frozen=True)


# --- results -------------------------------------------------------------------------------


class EntryInfo(BaseModel):
    """One build of an image: where it is and what it needs."""

    model_config = _FROZEN

    digest: str
    media_type: str
    size: int
    platform: str  # os/architecture[/variant], or "any"
    features: list[str]  # platform.features as written
    requirements: list[str]  # what hetflow reads from platform, features and annotations
    problems: list[str]  # requirements hetflow cannot check (they reject the entry)
    annotations: dict[str, str]

    @classmethod
    def of(cls, desc: Descriptor) -> EntryInfo:
        req = requirements_of(desc)
        return cls(
            digest=desc.digest,
            media_type=desc.media_type,
            size=desc.size,
            platform=platform_string(desc.platform),
            features=list(desc.platform.features) if desc.platform else [],
            requirements=req.labels() or ["generic"],
            problems=[*req.unknown, *([req.not_image] if req.not_image else [])],
            annotations=dict(desc.annotations or {}),
        )


class InspectResult(BaseModel):
    """An image's builds.  ``digest`` is the index's (or the single manifest's) digest;
    ``image_id`` is set for local images."""

    model_config = _FROZEN

    reference: str
    source: str  # "registry" or "local"
    digest: str | None
    media_type: str
    is_index: bool
    note: str | None = None
    image_id: str | None = None
    entries: list[EntryInfo]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def render(self) -> RenderableType:
        kind = "index" if self.is_index else "image"
        head = Text(f"{self.reference}  ({self.source} {kind}, {self.digest or self.image_id or 'no digest'})")
        table = Table(show_header=True, header_style="bold")
        for column in ("#", "digest", "platform", "needs", "problems"):
            table.add_column(column)
        for i, entry in enumerate(self.entries):
            table.add_row(
                str(i), _short(entry.digest), entry.platform, ", ".join(entry.requirements), "; ".join(entry.problems)
            )
        parts: list[RenderableType] = [head, table]
        if self.note:
            parts.append(Text(self.note, style="dim"))
        return Group(*parts)


class VerdictInfo(BaseModel):
    """One build judged against the node."""

    model_config = _FROZEN

    digest: str
    platform: str
    requirements: list[str]
    ok: bool
    chosen: bool
    reasons: list[str]
    specificity: list[int]


class ResolveResult(BaseModel):
    """The build chosen for a node (``chosen`` digest, None when nothing fits), the
    reference to pull it by (``pinned``), and every build's verdict in index order."""

    model_config = _FROZEN

    reference: str
    node: str
    source: str
    digest: str | None  # of the index (or single manifest) that was read
    is_index: bool
    chosen: str | None
    pinned: str | None
    note: str | None = None
    image_id: str | None = None
    explanation: list[str]
    verdicts: list[VerdictInfo]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def explain(self) -> list[str]:
        return [*self.explanation, *([self.note] if self.note else [])]

    def require_chosen(self) -> str:
        """The chosen digest, or NoFitError listing why each build was turned down."""
        if self.chosen is None:
            reasons = [f"{_short(v.digest)} {v.platform}: {'; '.join(v.reasons)}" for v in self.verdicts]
            raise NoFitError(
                f"no build of {self.reference} fits node {self.node}:\n  "
                + "\n  ".join(reasons or ["the index is empty"])
                + "\nPush a build this node can run (a generic one is the usual fallback) and add it to the index."
            )
        return self.chosen

    def render(self) -> RenderableType:
        if self.chosen:
            head = Text(f"{self.reference} on {self.node}: {self.pinned}", style="bold green")
        else:
            head = Text(f"{self.reference} on {self.node}: no build fits", style="bold red")
        table = Table(show_header=True, header_style="bold")
        for column in ("", "digest", "platform", "needs", "why"):
            table.add_column(column)
        for v in self.verdicts:
            mark, style = ("chosen", "green") if v.chosen else ("fits", "") if v.ok else ("no", "dim")
            table.add_row(
                mark, _short(v.digest), v.platform, ", ".join(v.requirements), "\n".join(v.reasons), style=style
            )
        parts: list[RenderableType] = [head, table]
        if self.note:
            parts.append(Text(self.note, style="dim"))
        return Group(*parts)


def _short(digest: str) -> str:
    algorithm, _, encoded = digest.partition(":")
    return f"{algorithm}:{encoded[:12]}" if encoded else digest


# --- the service -------------------------------------------------------------------------------


def inspect_image(ref: str, source: ImageSource = ImageSource()) -> InspectResult:
    """The builds of image ``ref`` (read from ``source``) and what each needs."""
    read = source.read(ref)
    return InspectResult(
        reference=str(read.ref),
        source=read.source,
        digest=read.digest,
        media_type=read.media_type,
        is_index=read.is_index,
        note=None if read.is_index else NOT_AN_INDEX,
        image_id=read.image_id,
        entries=[EntryInfo.of(d) for d in read.index.manifests],
    )


def resolve_image(ref: str, node: Node, source: ImageSource = ImageSource()) -> ResolveResult:
    """The build of ``ref`` (read from ``source``) that ``node`` should run, and why (see
    ``match.resolve``)."""
    read = source.read(ref)
    resolution = resolve(read.index, node)
    chosen = resolution.chosen
    verdicts = [
        VerdictInfo(
            digest=v.descriptor.digest,
            platform=platform_string(v.descriptor.platform),
            requirements=requirements_of(v.descriptor).labels() or ["generic"],
            ok=v.ok,
            chosen=v.descriptor is chosen,
            reasons=list(v.reasons),
            specificity=list(v.specificity),
        )
        for v in resolution.verdicts
    ]
    pinned = None
    if chosen is not None:
        pinned = f"{read.ref.name}@{chosen.digest}" if chosen.digest.startswith("sha256:") else str(read.ref)
        if read.source == "local" and not read.is_index:
            pinned = local_name(read.ref)  # a local image is run by its name
    return ResolveResult(
        reference=str(read.ref),
        node=node.name,
        source=read.source,
        digest=read.digest,
        is_index=read.is_index,
        chosen=chosen.digest if chosen else None,
        pinned=pinned,
        note=None if read.is_index else NOT_AN_INDEX,
        image_id=read.image_id,
        explanation=resolution.explain(),
        verdicts=verdicts,
    )


def build_index_image(
    ref: str,
    entries: Sequence[str | tuple[str, BuildSpec]],
    source: ImageSource = ImageSource(),
    *,
    annotations: Mapping[str, str] | None = None,
    variant: bool = True,
) -> BuiltIndex:
    """``hetflow images build-index REGISTRY/REPO:TAG TAG=FEATURES...``: assemble the
    per-build tags of REPO (in the registry ``source`` reaches) into one index and push it as TAG."""
    target = parse_reference(ref)
    if target.local:
        raise BadDocumentError(
            f"{ref} is local podman storage; build-index reads and pushes a registry: name REGISTRY/REPO:TAG"
        )
    if target.digest:
        raise BadDocumentError(f"{ref}: the index is pushed under a tag; leave the @digest out")
    parsed: list[tuple[str, BuildSpec]] = [parse_build_entry(e) if isinstance(e, str) else e for e in entries]
    with source.client(target) as client:
        return build_index(
            client,
            target.repository,
            parsed,
            tag=target.tag or "latest",
            annotations=annotations,
            variant=variant,
        )
