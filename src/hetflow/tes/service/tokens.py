"""Bearer tokens: each user's token is made here, shown once, and stored only as its SHA-256
(a token is 32 random bytes, so a plain hash cannot be walked back; registry tokens are kept
the same way).  A token is checked in constant time."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from hetflow.errors import UsageError
from hetflow.state import Store

USER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
PREFIX = "hft_"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_token(store: Store, user: str, *, admin: bool = False) -> str:
    """A new token for ``user`` (replacing an older one); the token, to be shown once."""
    if not USER_RE.match(user):
        raise UsageError(
            f"user {user!r}: use letters, digits, '.', '_' and '-' (64 at most), starting with a letter or digit"
        )
    token = PREFIX + secrets.token_urlsafe(32)
    store.set_tes_token(user, digest(token), admin=admin)
    return token


def who(store: Store, token: str) -> tuple[str, bool] | None:
    """(user, admin) holding ``token``; None for a token no user holds."""
    wanted = digest(token)
    found = None
    for user, (stored, admin) in store.tes_tokens().items():
        if hmac.compare_digest(stored, wanted):
            found = (user, admin)
    return found
