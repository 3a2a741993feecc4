"""Docker token authentication, the scheme podman, skopeo and docker all speak.

The flow (distribution's docs/spec/auth/token.md):

1. A request without a bearer gets ``401`` and
   ``WWW-Authenticate: Bearer realm="http://HOST/token",service="hetflow",scope="repository:NAME:pull"``.
2. The client asks the realm, ``GET /token?service=hetflow&scope=...``, with HTTP Basic
   credentials ``<machine type>:<token>`` (what ``podman login -u TYPE -p TOKEN`` stored).
   docker may ``POST`` the OAuth2 password grant to the same URL instead (token.md,
   "oauth.md"); both are answered.
3. The answer, ``{"token", "access_token", "expires_in", "issued_at"}``, holds a short-lived
   bearer that names the machine type; the client retries with ``Authorization: Bearer``.

The bearer is ours to define (the spec calls it opaque): ``hfb.<payload>.<mac>``, a
base64url JSON payload ``{"t": type, "k": token id, "exp": unix time}`` and an
HMAC-SHA256 over it with a key kept in the state directory, so bearers survive a
restart and need no table.  The token id lets a revoked token's bearers die with it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "BadAuthorization",
    "BearerGrant",
    "BearerSigner",
    "IssuedBearer",
    "bearer_challenge",
    "parse_basic",
    "parse_bearer",
]

_PREFIX = "hfb"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class BearerGrant:
    """What a valid bearer says: which machine type, by which token, until when."""

    machine_type: str
    token_id: str
    expires: int


@dataclass(frozen=True)
class IssuedBearer:
    token: str
    expires_in: int
    issued_at: str  # RFC 3339, as token.md's response field asks


class BearerSigner:
    """Issues and checks bearers with one HMAC key; ``clock`` is a seam for tests."""

    def __init__(self, key: bytes, ttl_s: int, clock: Callable[[], float] = time.time) -> None:
        if len(key) < 16:
            raise ValueError("bearer key must be at least 16 bytes")
        self._key = key
        self._ttl = ttl_s
        self._clock = clock

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def issue(self, machine_type: str, token_id: str) -> IssuedBearer:
        now = self._clock()
        claims = {"t": machine_type, "k": token_id, "exp": int(now) + self._ttl}
        payload = _b64(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())
        issued_at = datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z")
        return IssuedBearer(f"{_PREFIX}.{payload}.{self._mac(payload)}", self._ttl, issued_at)

    def verify(self, bearer: str) -> BearerGrant | None:
        """The grant of a well-formed, correctly signed, unexpired bearer; else None."""
        if not bearer.isascii():  # compare_digest refuses non-ASCII str (a TypeError, a 500)
            return None
        parts = bearer.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            return None
        _, payload, mac = parts
        if not hmac.compare_digest(mac, self._mac(payload)):
            return None
        try:
            claims = json.loads(_unb64(payload))
            grant = BearerGrant(str(claims["t"]), str(claims["k"]), int(claims["exp"]))
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None
        return grant if grant.expires > self._clock() else None


class BadAuthorization(ValueError):
    """An Authorization header that holds no readable credentials; the message says why
    (the proxy answers it with a 400 that names the fault, never a 500)."""


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` -> ``(user, password)``; None when there is no header.

    Anything else raises ``BadAuthorization`` naming the fault.  A header arrives as latin-1
    text (HTTP's obs-text), so a raw non-ASCII byte is refused here, before base64 sees it;
    the decoded pair must be UTF-8 (RFC 7617 2.1, the charset podman and docker send)."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        shown = scheme.lower() if scheme.isascii() and scheme.isalpha() else "not Basic"
        raise BadAuthorization(
            f"the Authorization header's scheme is {shown}; this endpoint takes Basic base64(MACHINE_TYPE:TOKEN)"
        )
    value = value.strip()
    if not value:
        raise BadAuthorization(
            "the Authorization header's Basic credentials are empty; give base64(MACHINE_TYPE:TOKEN)"
        )
    if not value.isascii():
        raise BadAuthorization(
            "the Authorization header holds non-ASCII bytes where Basic credentials are base64 (RFC 7617)"
        )
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadAuthorization("the Authorization header's Basic credentials are not base64 (RFC 7617)") from None
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadAuthorization(
            "the Authorization header's Basic credentials are not UTF-8 text (RFC 7617 2.1); "
            "machine types and tokens are ASCII"
        ) from None
    user, sep, password = decoded.partition(":")
    if not sep:
        raise BadAuthorization(
            "the Authorization header's Basic credentials have no ':' between MACHINE_TYPE and TOKEN"
        )
    return user, password


def parse_bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def bearer_challenge(realm: str, service: str, scope: str | None = None) -> str:
    """The ``WWW-Authenticate`` value of token.md's "How to authenticate" section."""
    challenge = f'Bearer realm="{_quoted(realm)}",service="{_quoted(service)}"'
    return challenge + (f',scope="{_quoted(scope)}"' if scope else "")


def _quoted(value: str) -> str:
    """A quoted-string's content (RFC 9110 5.6.4): backslash and quote escaped, controls dropped."""
    return "".join(c for c in value if c >= " " and c != "\x7f").replace("\\", "\\\\").replace('"', '\\"')
