"""The OCI error body the proxy answers with, and the codes it uses.

Every error response is ``{"errors": [{"code", "message", "detail"}]}`` (OCI
distribution-spec, "Error Codes"), so podman, skopeo and docker print our message.
``UNAVAILABLE`` is not in the OCI table but is distribution's own code for a backend
that cannot be reached (registry/api/errcode), which clients print as they get it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

__all__ = ["ErrorCode", "error_body", "error_response"]


class ErrorCode:
    BLOB_UNKNOWN = "BLOB_UNKNOWN"
    DENIED = "DENIED"
    DIGEST_INVALID = "DIGEST_INVALID"
    MANIFEST_INVALID = "MANIFEST_INVALID"
    MANIFEST_UNKNOWN = "MANIFEST_UNKNOWN"
    NAME_INVALID = "NAME_INVALID"
    NAME_UNKNOWN = "NAME_UNKNOWN"
    SIZE_INVALID = "SIZE_INVALID"
    TAG_INVALID = "TAG_INVALID"  # distribution's, kept for docker clients
    TOOMANYREQUESTS = "TOOMANYREQUESTS"
    UNAUTHORIZED = "UNAUTHORIZED"
    UNSUPPORTED = "UNSUPPORTED"
    UNAVAILABLE = "UNAVAILABLE"
    UNKNOWN = "UNKNOWN"


# The code an upstream error without an OCI body gets, by its HTTP status.
STATUS_CODES: dict[int, str] = {
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.DENIED,
    404: ErrorCode.NAME_UNKNOWN,
    405: ErrorCode.UNSUPPORTED,
    429: ErrorCode.TOOMANYREQUESTS,
}


def error_body(code: str, message: str, detail: Any = None) -> bytes:
    entry: dict[str, Any] = {"code": code, "message": message}
    if detail is not None:
        entry["detail"] = detail
    return json.dumps({"errors": [entry]}, sort_keys=True).encode()


def error_response(
    status: int, code: str, message: str, detail: Any = None, *, headers: dict[str, str] | None = None
) -> Response:
    return Response(error_body(code, message, detail), status, headers=headers, media_type="application/json")
