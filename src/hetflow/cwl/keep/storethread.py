"""The store from cwltool's many job threads: a SQLite connection serves the thread that
opened it, so one thread of its own opens the store and runs every read and write."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from hetflow.state import Store

T = TypeVar("T")


class StoreThread:
    def __init__(self, path: Path) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cwl-store")
        self.store: Store = self._pool.submit(Store, path).result()

    def call(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` on the store's thread; its result (or its exception) here."""
        return self._pool.submit(fn, self.store).result()

    def close(self) -> None:
        self._pool.submit(self.store.close).result()
        self._pool.shutdown()
