"""Each machine type's view of each index: matched once, off the event loop, and kept in
memory bounded in bytes.

What is kept, per (index digest, hardware key), is the answer ``filter_index`` gives
(``hetflow.registry.matching.views``: the view's bytes, or the first reasons nothing fits and a
count of the rest), least recently asked for first out once they pass ``budget_bytes``
(``limits.view_cache_bytes``).  Issue 38: the whole failed match was kept, about 27 MB
for a 4 MB index and machine type; fifty took a proxy from 207 MB to 1.45 GB.

The matching runs through ``hetflow.registry.matching.offload``: a big index in a worker process
(the parse would hold the GIL, and the event loop with it), a small one in a thread.
Concurrent requests for one view share one match; a client that leaves does not cancel it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from hetflow.inventory import Node
from hetflow.registry.matching.offload import Offload
from hetflow.registry.matching.views import Filtered, NoBuildFits, filter_index

__all__ = ["ViewCache"]

_ENTRY_OVERHEAD = 512  # the key, the dataclass and the dict slot, roughly

Answer = Filtered | NoBuildFits
Key = tuple[str, str]


class ViewCache:
    """Views by (index digest, hardware key): ``await view(...)`` matches or recalls one."""

    def __init__(self, budget_bytes: int, offload: Offload) -> None:
        self.budget_bytes = budget_bytes
        self.offload = offload
        self._kept: OrderedDict[Key, Answer] = OrderedDict()
        self._kept_bytes = 0
        self._running: dict[Key, asyncio.Future[Answer]] = {}

    @property
    def kept_bytes(self) -> int:
        return self._kept_bytes

    def __len__(self) -> int:
        return len(self._kept)

    async def view(self, index_digest: str, body: bytes, hardware: str, node: Node) -> Answer:
        """``node``'s view of the index ``body`` (whose digest is ``index_digest``).  Raises
        ``BadDocumentError`` when ``body`` is not an index (nothing is kept then)."""
        key = (index_digest, hardware)
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        running = self._running.get(key)
        if running is None:
            running = self._running[key] = asyncio.ensure_future(self.offload.run(len(body), filter_index, body, node))
            running.add_done_callback(lambda done: self._settle(key, done))
        # shielded: a client that leaves does not cancel the match others wait for
        return await asyncio.shield(running)

    def _settle(self, key: Key, done: asyncio.Future[Answer]) -> None:
        self._running.pop(key, None)
        if done.cancelled() or done.exception() is not None:  # retrieved: never "never retrieved"
            return
        self._keep(key, done.result())

    def _keep(self, key: Key, answer: Answer) -> None:
        size = answer.nbytes + _ENTRY_OVERHEAD
        if size > self.budget_bytes or key in self._kept:
            return  # answered, not kept: one answer may not push out every other
        self._kept[key] = answer
        self._kept_bytes += size
        while self._kept_bytes > self.budget_bytes:
            _, old = self._kept.popitem(last=False)
            self._kept_bytes -= old.nbytes + _ENTRY_OVERHEAD
