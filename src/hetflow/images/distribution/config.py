"""An image's config blob (image-spec config.md), read with the cap manifests have.

A config is a small JSON document (the os, architecture and variant hetflow reads, the
image's environment and history): a few KiB, rarely more than a few hundred.  It is read
up to the 4 MiB manifests get (``client.MANIFEST_LIMIT``), and a
bigger one is refused before a byte is read when its manifest says so, or at the cap when
the registry sends more than the manifest said (issue 38: an endless config blob ran
`hetflow images inspect` out of memory at 2.5 GB).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from hetflow.images.errors import BadDocumentError, RegistryError
from hetflow.images.oci import Descriptor

if TYPE_CHECKING:  # a client is passed in: httpx loads only when one is made
    from hetflow.images.distribution.client import RegistryClient

__all__ = ["read_config"]


def read_config(client: RegistryClient, repo: str, config: Descriptor, image: str) -> dict[str, Any]:
    """The config blob ``config`` of ``repo`` as a JSON object; ``image`` names the image
    (``REPO:TAG``) in messages."""
    from hetflow.images.distribution.client import MANIFEST_LIMIT  # loaded already: ``client`` is one

    blob = f"the config blob {config.digest} of {image}"
    cap = f"hetflow reads image configs up to {MANIFEST_LIMIT} bytes (4 MiB, as manifests)"
    if config.size > MANIFEST_LIMIT:
        raise RegistryError(f"{blob} is {config.size} bytes, its manifest says; refused: {cap}", url=client.base_url)
    over = f"for {blob}, which its manifest says is {config.size} bytes; refused: {cap}"
    raw = client.get_blob(repo, config.digest, limit=MANIFEST_LIMIT, over=over)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BadDocumentError(f"{blob} is not JSON") from exc
    if not isinstance(data, dict):
        raise BadDocumentError(f"{blob} is a JSON {type(data).__name__}, not an object")
    return data
