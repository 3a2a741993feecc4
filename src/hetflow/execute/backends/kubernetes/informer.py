"""The run's Jobs and pods kept in memory from the API's watches, as client-go's informers keep
them (issue 43): ``poll`` reads them here instead of listing both kinds on every turn (72 polls
of a hundred steps listed 9 of their 13 seconds).

Each kind has a ``Reflector`` fed by ``KubeApi.watch`` on a thread of its own: it lists the
run's objects once (by the run's label), then watches from the list's resourceVersion; a
watch the server ends is started again from the last version it gave, and a 410 Gone or a
dropped connection lists again (``LOST``, then ``LIST``: what changed in between is in the new
list, what went is not).  Every change wakes the runner.

The pending reason of Jobs without a pod (a quota's ``FailedCreate`` events) is watched too,
where RBAC lets the user watch events; else ``poll`` lists them as it did.

A view is only given while both kinds are live (listed, and their watch not lost since);
otherwise ``poll`` lists as it did.  A Job hetflow created whose ADDED event has not come yet is
not taken for one that vanished: ``Informer.reflects`` says whether the view can tell (the Job
was seen once, or a list begun after its create returned was taken without it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]


class Watcher(Protocol):
    """What the reflectors need of ``KubeApi`` (a fake at this seam in unit tests)."""

    def watch(self, path: str, handle: Callable[[str, Obj], None], stop: threading.Event, **params: Any) -> None: ...


class Reflector:
    """One kind's watched objects by name, as its watch last told them."""

    def __init__(self, changed: Callable[[], None]) -> None:
        self._changed = changed
        self._lock = threading.Lock()
        self._objects: dict[str, Obj] = {}
        self._seen: set[str] = set()  # every name this reflector held (a Job gone since, too)
        self.live = False
        self.lost = 0  # how many times the watch was lost (each LOST: a list begins after it)
        self.listed = 0  # ``lost``'s count when the last list was begun

    def handle(self, kind: str, obj: Obj) -> None:
        """One of ``KubeApi.watch``'s calls: LIST (the list's response), LOST (the watch
        failed: not live until the next LIST), ADDED, MODIFIED, DELETED; others (BOOKMARK) change nothing."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        with self._lock:
            if kind == "LIST":
                self._objects = {str(o["metadata"]["name"]): o for o in obj.get("items") or ()}
                self._seen.update(self._objects)
                self.live, self.listed = True, self.lost
            elif kind == "LOST":
                self.live, self.lost = False, self.lost + 1
            elif kind in ("ADDED", "MODIFIED") and name:
                self._objects[name] = obj
                self._seen.add(name)
            elif kind == "DELETED":
                self._objects.pop(name, None)
            else:
                return
        self._changed()

    def snapshot(self) -> tuple[list[Obj], frozenset[str], int, int] | None:
        """The objects, the names ever seen, ``lost`` and ``listed``; None while not live."""
        with self._lock:
            if not self.live:
                return None
            return list(self._objects.values()), frozenset(self._seen), self.lost, self.listed


@dataclass(frozen=True)
class View:
    """The run's Jobs and pods at one moment, for one ``poll``."""

    jobs: list[Obj]
    pods: list[Obj]
    seen: frozenset[str]  # Job names ever seen
    lost: int
    listed: int


class Informer:
    """A reflector for each kind watched (the run's Jobs, its pods, the events that say why a
    Job has no pod), each on a thread of its own."""

    def __init__(
        self, api: Watcher, watches: Mapping[str, tuple[str, Mapping[str, str]]], wake: Callable[[], None]
    ) -> None:
        """``watches``: kind -> its path and selector (jobs and pods: the run's label; events:
        the namespace's FailedCreate events of Jobs, which carry no label)."""
        self._stop = threading.Event()
        self._reflectors = {kind: Reflector(wake) for kind in watches}
        self._marks: dict[str, int] = {}  # Job name -> the Jobs' ``lost`` when its create returned
        self._threads = [
            threading.Thread(
                target=api.watch,
                args=(path, self._reflectors[kind].handle, self._stop),
                kwargs=dict(selector),
                name=f"kube-watch-{kind}",
                daemon=True,
            )
            for kind, (path, selector) in watches.items()
        ]

    def start(self) -> None:
        """Start the watches: once the informer is where ``created`` is called (a create that
        returns before is then in the first lists, or comes as an event)."""
        for t in self._threads:
            t.start()

    def view(self) -> View | None:
        """The Jobs and pods now, or None while a watch is not live (list instead)."""
        jobs, pods = self._reflectors["jobs"].snapshot(), self._reflectors["pods"].snapshot()
        if jobs is None or pods is None:
            return None
        return View(jobs[0], pods[0], jobs[1], jobs[2], jobs[3])

    def events(self) -> list[Obj] | None:
        """The events watched, or None while that watch is not live (or not allowed: list them)."""
        reflector = self._reflectors.get("events")
        snapshot = reflector.snapshot() if reflector is not None else None
        return None if snapshot is None else snapshot[0]

    def created(self, name: str) -> None:
        """Job ``name``'s create has returned (called on its client thread, before it is over)."""
        self._marks[name] = self._reflectors["jobs"].lost

    def reflects(self, view: View, name: str) -> bool:
        """Whether ``view`` tells of Job ``name``, whose creation is over: it was seen (so its
        absence is its deletion), or a list begun after its create returned was taken (a Job
        made before this informer: its first list)."""
        if name in view.seen:
            self._marks.pop(name, None)
            return True
        return view.listed > self._marks.get(name, 0)

    def close(self) -> None:
        self._stop.set()
