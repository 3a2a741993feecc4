"""Pod logs followed through the API server into hetflow's log files.

A runner that watches a run (``KubernetesBackend.watch``) follows each of its pods' logs
(``GET pods/NAME/log?follow=true``) on a thread of its own, appending to the attempt's log
file (a gang: each replica's, by its completion index), so ``hetflow logs -f`` and the
dashboard read them as they read a local container's.  A follower started again (a resumed
executor) asks for what it has not written yet with ``sinceTime`` of nothing: it starts the
file over, since the API gives no byte offset.  A pod whose node serves no logs (kwok's
simulated nodes without a logs configuration) leaves the file empty, with the API's reason
on the follower's last line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetflow.errors import EngineError

if TYPE_CHECKING:
    from hetflow.execute.backends.kubernetes.api import KubeApi

ANNOTATION_LOGS = "hetflow.logs"
INDEX = "batch.kubernetes.io/job-completion-index"


class LogFollowers:
    def __init__(self) -> None:
        self._started: dict[str, threading.Thread] = {}  # pod name -> its follower
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def follow(self, api: KubeApi, job_meta: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> None:
        """Start a follower for each pod whose container has started (running or ended)."""
        paths = json.loads(job_meta.get("annotations", {}).get(ANNOTATION_LOGS, "[]") or "[]")
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status", {})
            started = any(
                ("running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {}))
                for c in status.get("containerStatuses") or ()
            )
            index = int(meta.get("annotations", {}).get(INDEX, 0))
            if not started or index >= len(paths) or not paths[index]:
                continue
            with self._lock:
                if meta["name"] in self._started:
                    continue
                t = threading.Thread(target=self._copy, args=(api, meta["name"], Path(paths[index])), daemon=True)
                self._started[meta["name"]] = t
            t.start()

    def _copy(self, api: KubeApi, pod: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            try:
                with api.stream(f"{api.ns('pods')}/{pod}/log", container="step", follow="true") as r:
                    for chunk in r.iter_bytes():
                        out.write(chunk)
                        out.flush()
                        if self._stop.is_set():
                            return
            except EngineError as exc:
                out.write(f"[hetflow: the API server gave no log for pod {pod}: {exc}]\n".encode())
            except Exception as exc:  # a stream cut by the server: keep what came
                out.write(f"[hetflow: the log stream of pod {pod} ended: {type(exc).__name__}]\n".encode())

    def finish(self, job: str) -> None:
        """Wait (briefly) for the followers of a released Job's pods to write their last bytes."""
        with self._lock:
            threads = [t for name, t in self._started.items() if name.startswith(f"{job}-")]
        for t in threads:
            t.join(timeout=5)

    def close(self) -> None:
        self._stop.set()
