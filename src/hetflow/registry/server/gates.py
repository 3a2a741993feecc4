"""The ASGI gates in front of the registry proxy's app (``app.create_app`` adds them): the
Docker-Distribution-API-Version header on every answer, and the body size checked before the
app reads a byte of it.  Connections are not counted here: the HTTP front (``hetflow.front``)
limits them per client address and in all, those still sending headers too, before a request
reaches the app."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hetflow.registry.errors import ErrorCode, error_body
from hetflow.registry.settings import Limits

__all__ = ["API_VERSION", "ApiVersion", "RequestLimits", "plain_error"]

API_VERSION = ("docker-distribution-api-version", "registry/2.0")


class ApiVersion:
    """Adds ``Docker-Distribution-API-Version`` to every response, as distribution does."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), tuple(v.encode() for v in API_VERSION)]
            await send(message)

        await self.app(scope, receive, wrapped if scope["type"] == "http" else send)


def plain_error(status: int, code: str, message: str) -> tuple[Message, Message]:
    body = error_body(code, message)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 413:
        headers.append((b"connection", b"close"))  # the unread body is not worth draining
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body},
    )


class RequestLimits:
    """The body size limit ahead of the app (the front refuses a larger body first; this
    holds for an app served some other way too)."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await self._body(scope, receive)
        if body is None:
            for message in plain_error(
                413,
                ErrorCode.SIZE_INVALID,
                f"request body over {self.limits.max_body_bytes} bytes (limits.max_body_bytes)",
            ):
                await send(message)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole request body, or None once it passes the limit (read no further)."""
        limit = self.limits.max_body_bytes
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                return None
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(parts)
