"""The Kubernetes backend creates attempts' objects on client threads (issue 43): several
creates in flight at once, an attempt still being created polled as pending (never missing),
a refused create polled as the attempt's failure in the API's words, and a cancel during a
creation leaving nothing behind.  The API is a fake at the seam (``KubeApi``'s methods the
backend calls); the real API server is tests/integration/test_run_kubernetes.py's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.kubernetes import KubernetesBackend, KubernetesSettings
from hetflow.execute.backends.kubernetes.api import Conflict, NotFound
from hetflow.execute.engine import ContainerSpec
from tests.unit.builders import Outcome, world
from tests.unit.test_runner_cluster import CHAIN, QUEUE, QueueBackend, cluster_runner

Obj = dict[str, Any]
RUN = "r1"
WAIT = 30.0  # seconds a test waits for an event before it fails


class FakeKube:
    """The API server at the seam: objects by (resource, name); each Job's create waits on
    ``gate`` (open unless a test shuts it) and is refused when ``refuse`` is set; deleting an
    object deletes what names it as its owner, as the garbage collector does."""

    namespace = "ns1"

    def __init__(self, refuse: str = "") -> None:
        self.lock = threading.Lock()
        self.objects: dict[tuple[str, str], Obj] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.refuse = refuse
        self.entered = threading.Semaphore(0)  # released by each Job create as it begins
        self.in_flight = self.most = 0
        self.log: list[str] = []  # "create NAME" / "delete NAME", in order
        self.delete_gate = threading.Event()  # deletes wait on it (a test may make it ``gate``)
        self.delete_gate.set()

    def ns(self, resource: str, group: str = "") -> str:
        return f"/{group}/namespaces/{self.namespace}/{resource}"

    def create(self, path: str, body: Obj) -> Obj:
        resource, name = path.rsplit("/", 1)[-1], body["metadata"]["name"]
        if resource == "jobs":
            with self.lock:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
            self.entered.release()
            try:
                assert self.gate.wait(WAIT), "the test never opened the gate"
                if self.refuse:
                    raise EngineError(self.refuse)
            finally:
                with self.lock:
                    self.in_flight -= 1
        with self.lock:
            if (resource, name) in self.objects:
                raise Conflict(f"{resource} {name!r} already exists")
            obj = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
            self.objects[resource, name] = obj
            self.log.append(f"create {name}")
            return obj

    def get(self, path: str, **params: Any) -> Obj:
        *_, resource, name = path.split("/")
        with self.lock:
            if (resource, name) not in self.objects:
                raise NotFound(path)
            return self.objects[resource, name]

    def items(self, path: str, **params: Any) -> list[Obj]:
        resource = path.rsplit("/", 1)[-1]
        with self.lock:
            return [o for (r, _), o in self.objects.items() if r == resource]

    def delete(self, path: str, **params: Any) -> None:
        assert self.delete_gate.wait(WAIT), "the test never opened the gate"
        *_, resource, name = path.split("/")
        with self.lock:
            gone = self.objects.pop((resource, name), None)
            self.log.append(f"delete {name}")
            if gone is not None:
                uid = gone["metadata"]["uid"]
                for key, o in list(self.objects.items()):
                    if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or ()):
                        del self.objects[key]

    def watch(self, path: str, handle: Any, stop: threading.Event, **params: Any) -> None:
        stop.wait()


def job(step: str) -> Job:
    name = f"hf-{RUN}-{step}-1"
    spec = ContainerSpec(name, "img", ("true",), "1000:1000", {}, {}, cpus=0.5, memory=128 << 20, network=True)
    return Job(name, RUN, step, 1, spec, cpus=0.5, memory=128 << 20)


def backend_on(api: FakeKube, threads: int = 16) -> KubernetesBackend:
    return KubernetesBackend(KubernetesSettings(submit_threads=threads), api=api)  # type: ignore[arg-type]


@pytest.fixture
def api() -> Iterator[FakeKube]:
    fake = FakeKube()
    yield fake
    fake.gate.set()  # a failed test's creates end, so its threads do


def test_slow_creates_run_at_once_and_poll_says_each_is_pending_until_listed(api: FakeKube) -> None:
    api.gate.clear()
    backend = backend_on(api)
    jobs = [job(f"s{i}") for i in range(4)]
    for j in jobs:
        backend.submit(j)  # returns while its create waits on the gate
    for _ in jobs:
        assert api.entered.acquire(timeout=WAIT), "the creates did not run at once"
    assert api.most == 4
    states = backend.poll(RUN)
    assert {n: (s.running, s.status, s.reason) for n, s in states.items()} == {
        j.name: (True, "PENDING", "Creating: its Job is being created through the API") for j in jobs
    }
    api.gate.set()
    backend.created([j.name for j in jobs])
    states = backend.poll(RUN)
    assert sorted(states) == sorted(j.name for j in jobs)
    assert all(s.running and s.reason == "Pending: no pod made yet" for s in states.values())  # the API's Jobs now


def test_a_refused_create_is_the_attempts_failure_with_the_apis_message_and_wakes_the_runner() -> None:
    message = 'the Kubernetes API refused POST /apis/batch/v1/namespaces/ns1/jobs (422): Job.batch "x" is invalid'
    api = FakeKube(refuse=message)
    backend = backend_on(api)
    woken = threading.Event()
    close = backend.watch(RUN, woken.set)
    assert close is not None
    try:
        backend.submit(job("a"))
        assert woken.wait(WAIT)
        st = backend.poll(RUN)[job("a").name]
    finally:
        close()
    assert (st.running, st.exit_code, st.refused, st.reason) == (False, None, True, message)
    assert backend.poll(RUN)[job("a").name].refused  # said until the runner releases it
    backend.release([job("a").name])
    backend.released()
    assert backend.poll(RUN) == {} and api.objects == {}


def test_a_release_deletes_off_the_callers_thread_and_a_watchs_close_waits_for_it(api: FakeKube) -> None:
    backend = backend_on(api)
    jobs = [job(f"s{i}") for i in range(3)]
    for j in jobs:
        backend.submit(j)
    backend.created([j.name for j in jobs])
    close = backend.watch(RUN, lambda: None)
    assert close is not None
    api.gate.clear()  # the deletes wait too
    api.delete_gate = api.gate
    backend.release([j.name for j in jobs])  # returns with the deletes held
    assert len(api.objects) == 3
    api.gate.set()
    close()
    assert api.objects == {}


def test_a_cancel_during_a_creation_waits_for_it_and_leaves_nothing(api: FakeKube) -> None:
    api.gate.clear()
    backend = backend_on(api)
    backend.submit(job("a"))
    assert api.entered.acquire(timeout=WAIT)
    cancel = threading.Thread(target=backend.cancel, args=([job("a").name], 0))
    cancel.start()
    cancel.join(0.5)
    assert cancel.is_alive(), "cancel returned while the Job was still being created"
    api.gate.set()
    cancel.join(WAIT)
    assert not cancel.is_alive()
    assert api.objects == {} and api.log == [f"create {job('a').name}", f"delete {job('a').name}"]
    st = backend.poll(RUN)[job("a").name]
    assert (st.running, st.status) == (False, "Cancelled")


def test_a_creation_not_begun_is_withdrawn_by_a_cancel(api: FakeKube) -> None:
    api.gate.clear()
    backend = backend_on(api, threads=1)
    backend.submit(job("a"))
    assert api.entered.acquire(timeout=WAIT)  # a holds the one thread: b waits its turn
    backend.submit(job("b"))
    backend.cancel([job("b").name], 0)  # returns at once: b's creation never began
    api.gate.set()
    backend.created([job("a").name])
    assert [k for k in api.objects] == [("jobs", job("a").name)]
    assert f"create {job('b').name}" not in api.log


def test_a_resumed_executor_adopts_the_job_it_finds(api: FakeKube, tmp_path: Path) -> None:
    first = backend_on(api)
    first.submit(job("a"))
    first.created([job("a").name])
    again = backend_on(api)  # a new process, the Job there already: Conflict, adopted
    again.submit(job("a"))
    again.created([job("a").name])
    st = again.poll(RUN)[job("a").name]
    assert st.running and not st.refused and list(api.objects) == [("jobs", job("a").name)]


KUBE = replace(QUEUE, name="kube", holds_dependencies=False)  # queues, and the runner orders the steps
REFUSED = 'the Kubernetes API refused POST /apis/batch/v1/namespaces/default/jobs (403): exceeded quota "q"'


@dataclass
class Refusing(QueueBackend):
    """Refuses step a's first job: at once (``submit`` raises, as Kubernetes did before issue 43)
    or ``later`` (its polls say ``refused``, as a create on the client threads does)."""

    later: bool = False
    refused: set[str] = field(default_factory=set)
    capabilities: Capabilities = KUBE

    def submit(self, job: Job) -> None:
        if (job.step, job.attempt) != ("a", 1):
            super().submit(job)
        elif not self.later:
            raise EngineError(REFUSED)
        else:
            self.refused.add(job.name)

    def poll(self, run_id: str) -> dict[str, JobState]:
        out = super().poll(run_id)
        return out | {n: JobState(n, False, None, "Refused", reason=REFUSED, refused=True) for n in self.refused}


@pytest.mark.parametrize("later", [False, True], ids=["at-submit", "on-a-client-thread"])
def test_a_refused_create_fails_the_attempt_as_a_submit_that_raised(tmp_path: Path, later: bool) -> None:
    w = world(tmp_path, CHAIN, outcomes={"a": [Outcome(files={"o": b"1"})], "b": [Outcome(files={"o": b"2"})]})
    assert cluster_runner(w, Refusing(w.engine, later=later)).execute() == "succeeded"  # a's retry ran
    first = w.store.attempts(w.run.id, "a")[0]
    assert (first.state, first.exit_code, first.message) == ("failed", None, REFUSED)
