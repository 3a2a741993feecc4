"""The image and registry branch of hetflow's exception tree.

They live here, not in ``hetflow/errors.py``, only because this package was written
beside it; every class is a ``HetflowError``, so the CLI prints the message and exits
non-zero without a traceback.

    HetflowError
    └── ImageError             something about an image went wrong
        ├── BadReferenceError  an image reference cannot be parsed
        ├── BadDocumentError   a manifest, index or layout is malformed
        ├── DigestMismatchError  content does not hash to the digest that names it
        └── RegistryError      a registry refused, failed, or could not be reached
            ├── AuthError      credentials or a token were refused or are missing
            └── NotFoundError  no such repository, tag, manifest or blob

"Does not fit this node" is a value (``hetflow.images.matching.match.Verdict``), never one of these.
"""

from __future__ import annotations

from hetflow.errors import HetflowError
from hetflow.spec import ReferenceSyntaxError


class ImageError(HetflowError):
    """Base of every image and registry error."""


class BadReferenceError(ImageError, ReferenceSyntaxError):
    """An image reference is malformed (``registry/repository:tag@digest``)."""


class BadDocumentError(ImageError):
    """A manifest, image index or OCI layout is not what the OCI image-spec describes."""


class DigestMismatchError(ImageError):
    """Bytes do not hash to the digest that names them: a broken or tampered download."""


class RegistryError(ImageError):
    """A registry answered with an error, or could not be reached."""

    def __init__(self, message: str, *, status: int | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.url = url


class AuthError(RegistryError):
    """The registry wants credentials we do not have, or refused the ones we sent."""


class NotFoundError(RegistryError):
    """The repository, tag, manifest or blob does not exist on the registry."""
