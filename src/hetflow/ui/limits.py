"""What one client address may take from the dashboard: wrong tokens per minute (``WrongTokens``,
asked by the gate) and event streams at once (``Streams``, asked by the stream routes).

Both count by the address the server saw (``scope["client"]``).  Every local client of a
loopback dashboard is 127.0.0.1 (or another 127.x address it binds), so there the limits are
shared by this machine's users; a dashboard reached from elsewhere counts each machine apart.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

__all__ = ["Streams", "WrongTokens", "client_address"]

MAX_ADDRESSES = 4096  # addresses remembered at once; the oldest is forgotten first


def client_address(client: object) -> str:
    """The host of an ASGI ``scope["client"]`` (None where the server knows none)."""
    if isinstance(client, tuple | list) and client:
        return str(client[0])
    return "unknown"


class WrongTokens:
    """At most ``limit`` wrong tokens from one address in ``window`` seconds (issue 38: tokens
    could be tried as fast as the server answered).  Past it, every request from the address
    is refused (429) until the oldest failure leaves the window, a right token too: answering
    a right one would tell a guesser which guess was right."""

    def __init__(self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self._clock = limit, window, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, address: str) -> deque[float] | None:
        times = self._failures.get(address)
        if times is None:
            return None
        cutoff = self._clock() - self.window
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._failures[address]
            return None
        return times

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may try again; None when it is under the limit."""
        times = self._recent(address)
        if times is None or len(times) < self.limit:
            return None
        return max(1, math.ceil(times[0] + self.window - self._clock()))

    def failed(self, address: str) -> None:
        """``address`` gave a wrong token now."""
        times = self._recent(address)
        if times is None:
            times = self._failures[address] = deque(maxlen=self.limit)
            while len(self._failures) > MAX_ADDRESSES:
                self._failures.popitem(last=False)
        times.append(self._clock())


class Streams:
    """Event streams open at once: at most ``limit`` in all (each holds a connection and polls
    the store every half second; 503 beyond) and ``per_client`` from one address (429 beyond:
    issue 38, one client held all 64).  The event loop's thread only: no lock."""

    def __init__(self, limit: int, per_client: int) -> None:
        self.limit, self.per_client = limit, per_client
        self.open = 0
        self._by_address: dict[str, int] = {}

    def refusal(self, address: str) -> tuple[int, str] | None:
        """Why one more stream from ``address`` may not open (status, message), or None."""
        if self.open >= self.limit:
            return 503, f"{self.limit} event streams are open; close one or try again later"
        held = self._by_address.get(address, 0)
        if held >= self.per_client:
            return 429, (
                f"{held} event streams are open from {address}, the most one client address may hold "
                "(per client address); close one (another tab?) or try again later"
            )
        return None

    def opened(self, address: str) -> None:
        self.open += 1
        self._by_address[address] = self._by_address.get(address, 0) + 1

    def closed(self, address: str) -> None:
        self.open -= 1
        left = self._by_address.get(address, 1) - 1
        if left > 0:
            self._by_address[address] = left
        else:
            self._by_address.pop(address, None)
