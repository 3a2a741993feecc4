"""The Kubernetes backend's poll reads the run's Jobs and pods from memory, kept by two API
watches (``informer``, issue 43): a change the stream delivers is read by the next poll with no
list, a 410 Gone or a dropped stream lists again without losing what changed meanwhile, a Job
created whose ADDED event has not come is pending (never vanished), and without a live watch
poll lists.  The API server is a fake at the HTTP seam (``KubeApi``'s transport: httpx's
MockTransport); the real one is tests/integration/test_run_kubernetes.py's."""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.kubernetes import KubernetesBackend, KubernetesSettings
from hetflow.execute.backends.kubernetes.api import KubeApi
from hetflow.execute.engine import ContainerSpec
from hetflow.kube import LABEL_JOB, LABEL_RUN

Obj = dict[str, Any]
RUN = "r1"
WAIT = 30.0  # seconds a test waits for an event before it fails
DROP = object()  # a stream's connection breaks here
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://kube.test"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


class Lines(httpx.SyncByteStream):
    """A watch's response body: the lines put on its queue, until None (the server ends it) or
    DROP (the connection breaks)."""

    def __init__(self, lines: queue.Queue[object]) -> None:
        self.lines = lines

    def __iter__(self) -> Iterator[bytes]:
        while (line := self.lines.get(timeout=WAIT)) is not None:
            if line is DROP:
                raise httpx.ReadError("connection reset by peer")
            yield f"{line}\n".encode()


class FakeServer:
    """Jobs and pods by name, each change numbered (resourceVersion) and kept, so a watch from a
    version gets every change after it; ``hold`` keeps changes from the streams (an ADDED not
    come yet); a list asked by a watch's thread waits while ``lists_open`` is clear."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.objects: dict[str, dict[str, Obj]] = {"jobs": {}, "pods": {}, "events": {}}
        self.history: list[tuple[int, str, str]] = []  # (version, kind, line)
        self.version = 0
        self.streams: dict[str, list[queue.Queue[object]]] = {kind: [] for kind in self.objects}
        self.forbidden: set[str] = set()  # kinds RBAC does not let the watches read
        self.lists: Counter[str] = Counter()
        self.asked: Counter[str] = Counter()  # lists asked, answered or not
        self.watches: Counter[str] = Counter()
        self.held: list[tuple[int, str, str]] = []  # as ``history``
        self.holding = False
        self.lists_open = threading.Event()
        self.lists_open.set()
        self.ended = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        kind = request.url.path.rsplit("/", 1)[-1]
        params = request.url.params
        if request.method == "POST":
            body = json.loads(request.content)
            return httpx.Response(201, json=self.change("jobs", "ADDED", body))
        if request.method == "DELETE":
            *_, kind, name = request.url.path.split("/")
            gone = self.objects[kind].get(name)
            if gone is not None:
                self.change(kind, "DELETED", gone)
            return httpx.Response(200, json={})
        if kind in self.forbidden and threading.current_thread().name.startswith("kube-watch"):
            return httpx.Response(403, json={"kind": "Status", "code": 403, "message": f"{kind} is forbidden"})
        if params.get("watch") == "true":
            return httpx.Response(200, stream=self.watch(kind, int(params["resourceVersion"])))
        with self.cond:  # what the list holds is read as it is asked (a watch's list may then wait)
            items, version = list(self.objects[kind].values()), self.version
            self.asked[kind] += 1
            self.cond.notify_all()
        if threading.current_thread().name.startswith("kube-watch"):
            assert self.lists_open.wait(WAIT), "the test never let the watches list"
        with self.cond:
            self.lists[kind] += 1
        return httpx.Response(200, json={"metadata": {"resourceVersion": str(version)}, "items": items})

    def watch(self, kind: str, since: int) -> Lines:
        lines: queue.Queue[object] = queue.Queue()
        with self.cond:
            for version, k, line in self.history:
                if k == kind and version > since:
                    lines.put(line)
            if self.ended:
                lines.put(None)
            self.streams[kind].append(lines)
            self.watches[kind] += 1
            self.cond.notify_all()
        return Lines(lines)

    def change(self, kind: str, type_: str, obj: Obj, *, quietly: bool = False) -> Obj:
        """Apply a change; told to the open watches unless ``quietly`` (a change made while a
        stream is down: only a list shows it) or held."""
        with self.cond:
            self.version += 1
            name = obj["metadata"]["name"]
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.version), "uid": f"u-{name}"}}
            if type_ == "DELETED":
                self.objects[kind].pop(name, None)
            else:
                self.objects[kind][name] = obj
            if quietly:
                return obj
            line = json.dumps({"type": type_, "object": obj})
            if self.holding:
                self.held.append((self.version, kind, line))
            else:
                self.history.append((self.version, kind, line))
                for s in self.streams[kind]:
                    s.put(line)
            return obj

    def release(self) -> None:
        with self.cond:
            self.holding = False
            self.history.extend(self.held)
            for _, kind, line in self.held:
                for s in self.streams[kind]:
                    s.put(line)
            self.held.clear()

    def break_streams(self, how: object) -> None:
        """End every open stream with ``how``: DROP, or a 410 Gone ERROR event."""
        with self.cond:
            streams = [s for kind in self.streams.values() for s in kind]
            for kind in self.streams.values():
                kind.clear()
        for s in streams:
            s.put(DROP if how is DROP else json.dumps({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}))

    def until(self, what: Callable[[], bool], why: str) -> None:
        with self.cond:
            assert self.cond.wait_for(what, WAIT), why

    def end(self) -> None:
        with self.cond:
            self.ended = True
            for kind in self.streams.values():
                for s in kind:
                    s.put(None)
        self.lists_open.set()


class Wakes:
    """The runner's wake: counted, so a test waits for the wake a change brings."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.count = 0

    def __call__(self) -> None:
        with self.cond:
            self.count += 1
            self.cond.notify_all()

    def after(self, n: int, change: Callable[[], object]) -> None:
        """Make ``change`` and wait for the ``n`` wakes it brings."""
        with self.cond:
            start = self.count
        change()
        with self.cond:
            assert self.cond.wait_for(lambda: self.count >= start + n, WAIT), "the watch told nothing"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    yield fake
    fake.end()  # a failed test's watch threads end too


@pytest.fixture
def backend(server: FakeServer, tmp_path: Path) -> KubernetesBackend:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    settings = KubernetesSettings(kubeconfig=str(tmp_path / "kubeconfig"))
    return KubernetesBackend(settings, api=KubeApi(settings, transport=httpx.MockTransport(server.handle)))


def kube_job(name: str) -> Obj:
    return {"metadata": {"name": name, "labels": {LABEL_RUN: RUN}}, "spec": {"completions": 1}, "status": {}}


def pod(job: str, ended: int | None = None) -> Obj:
    t = "2026-12-07T10:00:00Z"
    state = {"running": {"startedAt": t}} if ended is None else {"terminated": {"exitCode": ended, "startedAt": t,
             "finishedAt": t}}  # fmt: skip
    phase = "Running" if ended is None else ("Succeeded" if ended == 0 else "Failed")
    return {
        "metadata": {"name": f"{job}-p", "labels": {LABEL_RUN: RUN, LABEL_JOB: job}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, "containerStatuses": [{"state": state}]},
    }


def job(step: str) -> Job:
    name = f"hf-{RUN}-{step}-1"
    spec = ContainerSpec(name, "img", ("true",), "1000:1000", {}, {}, cpus=0.5, memory=128 << 20, network=True)
    return Job(name, RUN, step, 1, spec, cpus=0.5, memory=128 << 20)


def watching(backend: KubernetesBackend, server: FakeServer, wakes: Wakes) -> Callable[[], None]:
    close = backend.watch(RUN, wakes)
    assert close is not None
    kinds = set(server.objects) - server.forbidden
    server.until(lambda: all(server.watches[k] > 0 for k in kinds), "the watches did not start")
    return close


def summary(backend: KubernetesBackend) -> dict[str, tuple[str, int | None]]:
    return {name: (s.status, s.exit_code) for name, s in backend.poll(RUN).items()}


def test_poll_reads_what_the_watch_delivers_and_lists_nothing(server: FakeServer, backend: KubernetesBackend) -> None:
    a = "hf-r1-a-1"
    server.change("jobs", "ADDED", kube_job(a))
    server.change("pods", "ADDED", pod(a))
    wakes = Wakes()
    close = watching(backend, server, wakes)
    try:
        assert summary(backend) == {a: ("RUNNING", None)}
        wakes.after(1, lambda: server.change("pods", "MODIFIED", pod(a, ended=3)))
        assert summary(backend) == {a: ("Failed", 3)}
        wakes.after(2, lambda: [server.change(k, "DELETED", o) for k, o in (("pods", pod(a)), ("jobs", kube_job(a)))])
        assert summary(backend) == {}  # deleted: vanished, as a list would say
        assert server.lists == {"jobs": 1, "pods": 1, "events": 1}  # the watches' lists, none of the polls'
    finally:
        close()


@pytest.mark.parametrize("how", [DROP, "410 Gone"], ids=["dropped", "gone"])
def test_a_lost_watch_lists_again_and_loses_no_change_made_meanwhile(
    server: FakeServer, backend: KubernetesBackend, how: object
) -> None:
    a, b = "hf-r1-a-1", "hf-r1-b-1"
    for name in (a, b):
        server.change("jobs", "ADDED", kube_job(name))
        server.change("pods", "ADDED", pod(name))
    close = watching(backend, server, Wakes())
    try:
        assert summary(backend) == {a: ("RUNNING", None), b: ("RUNNING", None)}
        server.change("pods", "MODIFIED", pod(a, ended=0), quietly=True)  # no stream tells of these
        server.change("pods", "DELETED", pod(b), quietly=True)
        server.change("jobs", "DELETED", kube_job(b), quietly=True)
        server.break_streams(how)
        server.until(lambda: all(n == 2 for n in server.watches.values()), "no watch again")
        before = server.lists.copy()
        assert summary(backend) == {a: ("Succeeded", 0)}
        assert server.lists == before == {"jobs": 2, "pods": 2, "events": 2}  # listed again by the watches only
    finally:
        close()


def test_a_created_job_not_yet_told_of_is_pending_and_one_gone_unseen_vanishes(
    server: FakeServer, backend: KubernetesBackend
) -> None:
    wakes = Wakes()
    close = watching(backend, server, wakes)
    c, d = job("c"), job("d")
    try:
        server.holding = True  # the ADDED events have not come
        for j in (c, d):
            backend.submit(j)
        backend.created([c.name, d.name])
        states = backend.poll(RUN)
        assert {n: (s.running, s.reason) for n, s in states.items()} == {
            n: (True, "Creating: its Job is being created through the API") for n in (c.name, d.name)
        }
        server.change("jobs", "DELETED", {"metadata": {"name": d.name}}, quietly=True)  # gone before told of
        server.held = [h for h in server.held if d.name not in h[2]]  # and its ADDED lost with its stream
        wakes.after(1, server.release)  # c's ADDED
        assert backend.poll(RUN)[d.name].reason == "Creating: its Job is being created through the API"
        server.break_streams("410 Gone")
        server.until(lambda: all(n == 2 for n in server.watches.values()), "no watch again")
        states = backend.poll(RUN)
        assert {n: (s.running, s.reason) for n, s in states.items()} == {c.name: (True, "Pending: no pod made yet")}
        assert server.lists["jobs"] == 2
    finally:
        close()


def test_a_job_created_while_the_first_list_is_read_is_pending_until_its_event_comes(
    server: FakeServer, backend: KubernetesBackend
) -> None:
    c, wakes = job("c"), Wakes()
    server.holding = True  # its ADDED event comes only when the test says
    server.lists_open.clear()
    close = backend.watch(RUN, wakes)
    assert close is not None
    try:
        server.until(lambda: all(server.asked[k] for k in server.objects), "the watches did not list")
        backend.submit(c)  # after the lists were read: in none of them
        backend.created([c.name])
        server.lists_open.set()
        server.until(lambda: all(server.watches[k] for k in server.objects), "the watches did not start")
        assert backend.poll(RUN)[c.name].reason == "Creating: its Job is being created through the API"
        wakes.after(1, server.release)
        assert backend.poll(RUN)[c.name].reason == "Pending: no pod made yet"
        assert server.lists == {"jobs": 1, "pods": 1, "events": 1}
    finally:
        close()


def test_without_a_live_watch_poll_lists(server: FakeServer, backend: KubernetesBackend) -> None:
    a = "hf-r1-a-1"
    server.change("jobs", "ADDED", kube_job(a))
    server.change("pods", "ADDED", pod(a, ended=0))
    server.lists_open.clear()  # the watches' lists wait
    close = backend.watch(RUN, Wakes())
    assert close is not None
    try:
        assert summary(backend) == {a: ("Succeeded", 0)}
        assert server.lists == {"jobs": 1, "pods": 1}  # the poll's own (no Job without a pod: no events)
    finally:
        close()


@pytest.mark.parametrize("allowed", [True, False], ids=["watched", "forbidden"])
def test_why_a_job_has_no_pod_comes_from_watched_events_or_a_list_where_rbac_forbids_the_watch(
    server: FakeServer, backend: KubernetesBackend, allowed: bool
) -> None:
    a, why = "hf-r1-a-1", 'pods "hf-r1-a-1-x" is forbidden: exceeded quota: q, requested: cpu=500m'
    server.change("jobs", "ADDED", kube_job(a))
    server.forbidden = set() if allowed else {"events"}
    wakes = Wakes()
    close = watching(backend, server, wakes)
    event = {"metadata": {"name": f"{a}.1"}, "involvedObject": {"kind": "Job", "name": a}, "message": why}
    try:
        assert backend.poll(RUN)[a].reason == "Pending: no pod made yet"  # the Job unchanged, its reason not
        if allowed:
            wakes.after(1, lambda: server.change("events", "ADDED", event))
        else:
            server.change("events", "ADDED", event)
        for _ in range(2):
            assert backend.poll(RUN)[a].reason == why
        assert server.lists["events"] == (1 if allowed else 3)  # the watch's list, or each poll's
    finally:
        close()
