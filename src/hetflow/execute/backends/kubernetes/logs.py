"""Pod logs followed through the API server into hetflow's log files.

A runner that watches a run (``KubernetesBackend.watch``) follows each of its pods' logs
(``GET pods/NAME/log?follow=true&timestamps=true``) on a thread of its own, writing the
attempt's log file (a gang: each replica's, by its completion index) in the CRI format that
podman's k8s-file driver writes, so ``hetflow logs -f`` and the dashboard read them as they
read a local container's.  A follower started again (a resumed executor) writes the file over
from the start: the API gives no byte offset.  A pod whose node serves no log leaves the
API's reason as the file's one line.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetflow.errors import EngineError

if TYPE_CHECKING:
    from hetflow.execute.backends.kubernetes.api import KubeApi

ANNOTATION_LOGS = "hetflow.logs"
INDEX = "batch.kubernetes.io/job-completion-index"


def cri_line(line: str) -> str:
    """A line of ``pods/log?timestamps=true`` (``TIME TEXT``) in the CRI log format that
    podman's k8s-file driver writes and ``hetflow logs`` reads (``TIME STREAM F TEXT``); the
    API merges stdout and stderr, so every line is stdout."""
    stamp, _, text = line.partition(" ")
    if not stamp[:4].isdigit() or "T" not in stamp:
        stamp, text = datetime.now(UTC).isoformat().replace("+00:00", "Z"), line
    return f"{stamp} stdout F {text}\n"


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
            states = [c.get("state") or {} for c in status.get("containerStatuses") or ()]
            started = any("running" in st or "terminated" in st for st in states)
            ended = bool(states) and all("terminated" in st for st in states)
            index = int(meta.get("annotations", {}).get(INDEX, 0))
            if not started or index >= len(paths) or not paths[index]:
                continue
            with self._lock:
                if meta["name"] in self._started:
                    continue
                args = (api, meta["name"], Path(paths[index]), not ended)
                t = threading.Thread(target=self._copy, args=args, daemon=True)
                self._started[meta["name"]] = t
            t.start()

    def _copy(self, api: KubeApi, pod: str, path: Path, follow: bool) -> None:
        """Write the pod's log to ``path``; ``follow``: while it runs (a kubelet ends the
        stream when the container exits), else what it wrote, at once."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            try:
                params = {"container": "step", "follow": "true" if follow else "false", "timestamps": "true"}
                with api.stream(f"{api.ns('pods')}/{pod}/log", **params) as r:
                    for line in r.iter_lines():
                        out.write(cri_line(line))
                        out.flush()
                        if self._stop.is_set():
                            return
            except EngineError as exc:
                out.write(cri_line(f"[hetflow: the API server gave no log for pod {pod}: {exc}]"))
            except Exception as exc:  # a stream cut by the server: keep what came
                out.write(cri_line(f"[hetflow: the log stream of pod {pod} ended: {type(exc).__name__}]"))

    def finish(self, jobs: Iterable[str], wait: float = 2.0) -> None:
        """Give the followers of released Jobs' pods ``wait`` seconds in all to write their
        last bytes (a kubelet ends a followed stream when the container exits; a node that
        keeps it open, as kwok's log server does, is not waited for longer)."""
        prefixes = tuple(f"{job}-" for job in jobs)
        with self._lock:
            mine = [name for name in self._started if name.startswith(prefixes)]
            threads = [self._started.pop(name) for name in mine]
        deadline = time.monotonic() + wait
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
