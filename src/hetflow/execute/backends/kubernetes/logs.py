"""Pod logs followed through the API server into hetflow's log files.

A runner that watches a run (``KubernetesBackend.watch``) follows each of its pods' logs
(``GET pods/NAME/log?follow=true&timestamps=true``) on a thread of its own, writing the
attempt's log file (a gang: each replica's, by its completion index) in the CRI format that
podman's k8s-file driver writes, so ``hetflow logs -f`` and the dashboard read them as they
read a local container's.  A follower started again (a resumed executor) writes the file over
from the start: the API gives no byte offset.

A pod's log goes with the pod, so it is read before the pod is deleted (``read_before``:
``release`` and ``cancel`` wait for each read of an ended pod, however long, and start one
where none was), and only once by one process: a poll that lists a released Job's pod while
it goes (a foreground deletion keeps both a while) starts no second read, which found the
log gone and wrote that over the one read ("the API server gave no log ... not found": 3 of
5 runs of a 10-item fan-out on a real kubelet).  A read that gets nothing leaves a file
written before as it is; a pod whose node serves no log leaves the API's reason as the
file's one line.

The stream of a pod followed while it ran may stay open after its container ended (kwok's
does; a kubelet's until its next look at the container, up to 5 s): a release then reads the
ended pod's log whole (``follow=false``: all of it, at once) into a file that replaces the
follower's, rather than waiting for the stream's end (2 s of each hundred-step run's end on
kwok: issue 43).  Only where that read fails does it wait for the stream, as before.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import httpx

from hetflow.errors import EngineError
from hetflow.kube import INDEX_ANNOTATION

if TYPE_CHECKING:
    from hetflow.execute.backends.kubernetes.api import KubeApi

ANNOTATION_LOGS = "hetflow.logs"
INDEX = INDEX_ANNOTATION  # a gang's pods: their rank


def cri_line(line: str) -> str:
    """A line of ``pods/log?timestamps=true`` (``TIME TEXT``) in the CRI log format that
    podman's k8s-file driver writes and ``hetflow logs`` reads (``TIME STREAM F TEXT``); the
    API merges stdout and stderr, so every line is stdout."""
    stamp, _, text = line.partition(" ")
    if not stamp[:4].isdigit() or "T" not in stamp:
        stamp, text = datetime.now(UTC).isoformat().replace("+00:00", "Z"), line
    return f"{stamp} stdout F {text}\n"


READ_WAIT = 120.0  # seconds a release waits for the reads of its ended pods' logs (a loaded API server)
FOLLOW_WAIT = 2.0  # and for a stream followed while running whose pod's log cannot be read whole
FOLLOW_AFTER = 1.0  # seconds a pod a poll saw running runs before it is followed (one ended by then: read once)


@dataclass
class _Reader:
    """A pod's reader: ``following`` it began while the pod ran; ``ended``: a poll has seen the
    pod end since (its log can then be read whole, over what the follower wrote)."""

    thread: threading.Thread
    following: bool
    api: KubeApi
    path: Path
    ended: bool = False


class LogFollowers:
    def __init__(self, follow_after: float = FOLLOW_AFTER) -> None:
        self._follow_after = follow_after
        self._soon: dict[str, threading.Timer] = {}  # pod name -> what starts following it (``follow``'s ``soon``)
        self._started: dict[str, _Reader] = {}  # pod name -> its reader
        self._read: set[str] = set()  # pods whose log was read to its end: never read again
        self._replaced: set[str] = set()  # pods whose log was read whole over their follower's file
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def follow(
        self, api: KubeApi, job_meta: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, soon: bool = False
    ) -> None:
        """Start a reader for each pod whose container has started (running: followed; ended:
        read once) and that has none, nor was read.  ``soon`` (a poll's): a running pod is
        followed once it has run ``follow_after`` seconds more, from its log's start; one that
        ends before is read once, whole, as the poll that sees it end asks (a hundred pods of a
        second each were a hundred streams and a hundred reads: issue 43)."""
        paths = json.loads(job_meta.get("annotations", {}).get(ANNOTATION_LOGS, "[]") or "[]")
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status", {})
            states = [c.get("state") or {} for c in status.get("containerStatuses") or ()]
            started = any("running" in st or "terminated" in st for st in states)
            ended = bool(states) and all("terminated" in st for st in states)
            index = int(meta.get("annotations", {}).get(INDEX, 0))
            if not started or index >= len(paths) or not paths[index]:
                continue
            name, path = meta["name"], Path(paths[index])
            with self._lock:  # started before another thread's ``finish`` can see (and join) it
                if (known := self._started.get(name)) is not None:
                    known.ended = known.ended or ended
                    continue
                if name in self._read:
                    continue
                if soon and not ended:
                    if name not in self._soon:
                        due = self._soon[name] = threading.Timer(self._follow_after, self._due, (api, name, path))
                        due.daemon = True
                        due.start()
                    continue
                if (timer := self._soon.pop(name, None)) is not None:
                    timer.cancel()
                self._start(api, name, path, ended)

    def _start(self, api: KubeApi, name: str, path: Path, ended: bool) -> None:
        """A reader for pod ``name`` (its lock held): following it unless it has ``ended``."""
        t = threading.Thread(target=self._copy, args=(api, name, path, not ended), daemon=True)
        t.start()
        self._started[name] = _Reader(t, not ended, api, path, ended)

    def _due(self, api: KubeApi, name: str, path: Path) -> None:
        """A pod a poll saw running has run ``follow_after`` seconds more: follow it, unless a
        reader was started meanwhile or its Job's readers were waited for."""
        with self._lock:
            if self._soon.pop(name, None) is not None and name not in self._started and name not in self._read:
                self._start(api, name, path, False)

    def _copy(self, api: KubeApi, pod: str, path: Path, follow: bool) -> None:
        """Write the pod's log to ``path``; ``follow``: while it runs (a kubelet ends the
        stream when the container exits), else what it wrote, at once.  The file is opened
        at the first line: a read refused outright leaves what an earlier one wrote."""
        path.parent.mkdir(parents=True, exist_ok=True)
        out: TextIO | None = None
        try:
            params = {"container": "step", "follow": "true" if follow else "false", "timestamps": "true"}
            with api.stream(f"{api.ns('pods')}/{pod}/log", **params) as r:
                with self._lock:  # never over a whole read (``_read_whole``)
                    if pod in self._replaced:
                        return
                    out = path.open("w", encoding="utf-8")
                for line in r.iter_lines():
                    out.write(cri_line(line))
                    out.flush()
                    if self._stop.is_set():
                        return
        except EngineError as exc:
            with self._lock:
                if out is None and pod not in self._replaced and (not path.exists() or path.stat().st_size == 0):
                    path.write_text(cri_line(f"[hetflow: the API server gave no log for pod {pod}: {exc}]"))
        except Exception as exc:  # a stream cut by the server: keep what came
            if out is not None:
                out.write(cri_line(f"[hetflow: the log stream of pod {pod} ended: {type(exc).__name__}]"))
        finally:
            if out is not None:
                out.close()

    def read_before(
        self, api: KubeApi, jobs: Mapping[str, tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]
    ) -> None:
        """Before the Jobs' pods are deleted (``jobs``: Job name -> its metadata and pods as
        last polled): a reader for each started pod that has none (a process that did not
        watch, a pod that ended between two polls), then the wait for the reads of ended pods
        (READ_WAIT at most) and a short one for streams of pods followed while running."""
        for meta, pods in jobs.values():
            self.follow(api, meta, pods)
        self.finish(jobs)

    def finish(self, jobs: Iterable[str]) -> None:
        """Wait for the readers of the Jobs' pods (see ``read_before``); they are not read again."""
        prefixes = tuple(f"{job}-" for job in jobs)
        with self._lock:
            for name in [name for name in self._soon if name.startswith(prefixes)]:
                self._soon.pop(name).cancel()  # ``read_before`` and ``cancel`` started their readers
            mine = [name for name in self._started if name.startswith(prefixes)]
            readers = [(name, self._started.pop(name)) for name in mine]
            self._read.update(mine)
        start = time.monotonic()
        for name, r in readers:
            if r.following and r.ended and r.thread.is_alive() and self._read_whole(r.api, name, r.path):
                continue
            limit = FOLLOW_WAIT if r.following else READ_WAIT
            r.thread.join(timeout=max(0.0, start + limit - time.monotonic()))

    def _read_whole(self, api: KubeApi, pod: str, path: Path) -> bool:
        """The ended pod's log read whole (``follow=false``) into a file that then replaces its
        follower's (which writes on into the file it opened, no longer the log's); False where
        the API gives none (the follower's file stays)."""
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                params = {"container": "step", "follow": "false", "timestamps": "true"}
                with api.stream(f"{api.ns('pods')}/{pod}/log", **params) as r:
                    for line in r.iter_lines():
                        out.write(cri_line(line))
            with self._lock:
                self._replaced.add(pod)
                os.replace(tmp, path)
            return True
        except (EngineError, httpx.HTTPError, OSError):  # refused or cut: the follower's file is the log
            os.unlink(tmp)
            return False

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for timer in self._soon.values():
                timer.cancel()
            self._soon.clear()
