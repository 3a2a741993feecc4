"""Image references: the grammar is ``hetflow.spec.fields.imageref`` (so a workflow's ``image:``
is checked when it is validated); here a malformed one is the images package's
``BadReferenceError``."""

from __future__ import annotations

from hetflow.images.errors import BadReferenceError
from hetflow.spec import DOCKER_HUB, ImageReference, ReferenceSyntaxError
from hetflow.spec import parse_reference as _parse

__all__ = ["DOCKER_HUB", "ImageReference", "parse_reference"]


def parse_reference(text: str, *, default_registry: str = DOCKER_HUB) -> ImageReference:
    """Parse ``text``; BadReferenceError says what is wrong and what was expected."""
    try:
        return _parse(text, default_registry=default_registry)
    except ReferenceSyntaxError as exc:
        raise BadReferenceError(str(exc)) from None
