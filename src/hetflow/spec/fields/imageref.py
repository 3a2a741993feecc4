"""Image references: ``[registry[:port]/]repository[:tag][@digest]``.

The grammar is the one docker and podman share (distribution's reference package,
grammar.go): the first ``/``-separated part is a registry when it holds a ``.`` or a
``:``; a name with no registry is on Docker Hub (``docker.io``), where one-part names
live under ``library/``.  One hetflow rule on top: ``localhost/name`` (no port) is
podman's name for an image in local storage, with no registry behind it, while
``localhost:5000/name`` is a registry on loopback.

The grammar lives in spec, the bottom layer, so a workflow's ``image:`` is checked when
the file is validated (with its line) rather than by podman at run time;
``hetflow.images.reference`` wraps it with the images package's error.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass, replace

from hetflow.errors import HetflowError

__all__ = ["DOCKER_HUB", "ImageReference", "ReferenceSyntaxError", "parse_reference"]

DOCKER_HUB = "docker.io"
_DOCKER_HUB_API = "registry-1.docker.io"  # where docker.io's /v2/ API actually lives
LOCAL = "localhost"

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
_TAG = re.compile(r"[\w][\w.-]{0,127}\Z")
_DIGEST = re.compile(r"(?P<alg>[a-z0-9]+(?:[+._-][a-z0-9]+)*):(?P<hex>[a-zA-Z0-9=_-]{32,})\Z")
_HOST = re.compile(r"(?:\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?)(?::\d{1,5})?\Z")


class ReferenceSyntaxError(HetflowError, ValueError):
    """An image reference does not parse; the message says what is wrong and what was expected."""


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference.  ``registry`` is None for podman's local storage."""

    registry: str | None
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def local(self) -> bool:
        """True for ``localhost/...``: an image in podman's storage, not on a registry."""
        return self.registry is None

    @property
    def ref(self) -> str:
        """What to ask the registry for: the digest if pinned, else the tag (default latest)."""
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        """``registry/repository`` (``localhost/repository`` for local images)."""
        return f"{self.registry or LOCAL}/{self.repository}"

    @property
    def host(self) -> str:
        """The registry's host name without the port (``localhost`` for local images)."""
        registry = self.registry or LOCAL
        if registry.startswith("["):
            return registry[1 : registry.index("]")]
        return registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry

    @property
    def is_loopback(self) -> bool:
        """True when the registry is on this machine (127.0.0.0/8, ::1, localhost)."""
        if self.host == LOCAL:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def base_url(self, *, insecure: bool = False) -> str:
        """The registry's API root.  ``insecure`` means plain http for a loopback registry
        (what `podman push --tls-verify=false` talks to); elsewhere it stays https and the
        caller turns certificate checks off."""
        if self.registry is None:
            raise ReferenceSyntaxError(f"{self} names an image in local podman storage; it has no registry to ask")
        host = _DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry
        scheme = "http" if insecure and self.is_loopback else "https"
        return f"{scheme}://{host}"

    def with_digest(self, digest: str) -> ImageReference:
        """The same image pinned to ``digest`` (the tag is kept for readability)."""
        return replace(self, digest=digest)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def _bad(text: str, why: str) -> ReferenceSyntaxError:
    return ReferenceSyntaxError(
        f"image reference {text!r}: {why} (expected [REGISTRY[:PORT]/]REPOSITORY[:TAG][@DIGEST])"
    )


def parse_reference(text: str, *, default_registry: str = DOCKER_HUB) -> ImageReference:
    """Parse ``text``; ReferenceSyntaxError says what is wrong and what was expected.

    Each distinct text is parsed once (a 10,000-step workflow names a handful of images);
    the reference is frozen, so sharing it is safe, and an error is raised anew each time."""
    return _parse(text, default_registry)


@functools.lru_cache(maxsize=4096)
def _parse(text: str, default_registry: str) -> ImageReference:
    raw = text
    text = text.strip()
    if not text:
        raise _bad(raw, "it is empty")
    if "://" in text:
        scheme, _, rest = text.partition("://")
        raise _bad(raw, f"leave out the {scheme}:// scheme and write {rest!r}")
    if any(c.isspace() for c in text):
        raise _bad(raw, "it contains white space")
    if text.startswith("-"):
        raise _bad(raw, "it starts with '-', so podman would read it as an option")

    name, at, digest = text.partition("@")
    if at:
        match = _DIGEST.match(digest)
        if not match:
            raise _bad(raw, f"digest {digest!r} is not ALGORITHM:HEX")
        if match["alg"] == "sha256" and not re.fullmatch(r"[a-f0-9]{64}", match["hex"]):
            raise _bad(raw, f"a sha256 digest is 64 lower-case hex digits, not {len(match['hex'])} characters")

    registry: str | None = default_registry
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == LOCAL):
        if not _HOST.match(first):
            raise _bad(raw, f"registry {first!r} is not HOST[:PORT]")
        registry = None if first == LOCAL else first
        name = rest

    tag: str | None = None
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            raise _bad(
                raw, f"tag {tag!r} must be letters, digits, '_', '.' or '-' (at most 128, not starting with . or -)"
            )
    if not name:
        raise _bad(raw, "the repository name is missing")
    for component in name.split("/"):
        if component != component.lower() and _COMPONENT.match(component.lower()):
            raise _bad(raw, f"repository names are lower case; write {name.lower()!r}")
        if not _COMPONENT.match(component):
            raise _bad(
                raw,
                f"repository part {component!r} may hold only a-z, 0-9 and single '.', '_' or '-' between them",
            )
    if registry == DOCKER_HUB and "/" not in name:
        name = f"library/{name}"  # Docker Hub's official images
    if len(name) > 255:
        raise _bad(raw, "the repository name is longer than 255 characters")
    return ImageReference(registry=registry, repository=name, tag=tag, digest=digest or None)
