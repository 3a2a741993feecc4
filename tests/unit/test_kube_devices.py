"""What a Kubernetes pod got, and what a node has free, in DRA devices and device-plugin GPUs
(issue 37: ``show`` said GPUS "-" for pods that got GPUs; gangs of DRA GPUs were admitted on
CPU and memory alone), from the API's JSON (``devices``, ``admission``); and the log readers
that read a pod's log once, before it goes (``logs``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.kubernetes.admission import fits, free_room, template_requests
from hetflow.execute.backends.kubernetes.devices import ANNOTATION_DRA, dra_free, pod_gpus, slice_devices
from hetflow.execute.backends.kubernetes.logs import ANNOTATION_LOGS, LogFollowers

DRIVER = "gpu.nvidia.com"
SLICE = {
    "spec": {
        "driver": DRIVER,
        "nodeName": "h100",
        "pool": {"name": "h100"},
        "devices": [
            {"name": "gpu-0", "attributes": {"index": {"int": 0}}},
            {"name": "gpu-1", "attributes": {"index": {"int": 1}}},
            {"name": "gpu-x"},  # no index attribute: shown by its name
        ],
    }
}


def claim(*devices: str, reserved: bool = True) -> dict[str, Any]:
    results = [{"driver": DRIVER, "pool": "h100", "device": d} for d in devices]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    return {"status": status | ({"reservedFor": [{"resource": "pods", "name": "p"}]} if reserved else {})}


def dra_pod(node: str | None = "h100") -> dict[str, Any]:
    return {
        "spec": {"nodeName": node, "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "t"}]},
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "c1"}]},
    }


def plugin_pod(statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    limits = {"cpu": "1", "nvidia.com/gpu": "2"}
    return {
        "spec": {"nodeName": "a100", "containers": [{"resources": {"limits": limits}}]},
        "status": {"containerStatuses": statuses or []},
    }


def health(*ids: str) -> list[dict[str, Any]]:
    resources = [{"resourceID": i, "health": "Healthy"} for i in ids]
    return [{"allocatedResourcesStatus": [{"name": "nvidia.com/gpu", "resources": resources}]}]


@pytest.mark.parametrize(
    ("pod", "claims", "gpus"),
    [
        (dra_pod(), {"c1": claim("gpu-1", "gpu-0")}, (1, 0)),
        (dra_pod(), {"c1": claim("gpu-x")}, ("gpu-x",)),
        (dra_pod(), {"c1": claim()}, None),  # not allocated yet
        (dra_pod(node=None), {"c1": claim("gpu-0")}, None),  # not bound yet
        (dra_pod(), {"c1": claim("gpu-9")}, None),  # a device the slices read do not list (yet)
        (plugin_pod(), {}, ("2x nvidia.com/gpu",)),  # the API names no device: how many
        (plugin_pod(health("0", "3")), {}, (0, 3)),  # the plugin's IDs are indices
        (plugin_pod(health("GPU-8f3e", "GPU-11aa")), {}, ("GPU-8f3e", "GPU-11aa")),
        ({"spec": {"nodeName": "cpu", "containers": [{"resources": {"limits": {"cpu": "1"}}}]}}, {}, ()),
    ],
    ids=["dra", "dra-no-index", "dra-unallocated", "unbound", "dra-unknown", "plugin", "plugin-index",
         "plugin-uuid", "no-gpu"],
)  # fmt: skip
def test_what_a_pod_got_is_read_from_the_api(
    pod: dict[str, Any], claims: dict[str, Any], gpus: tuple[int | str, ...] | None
) -> None:
    assert pod_gpus(pod, claims, slice_devices([SLICE])) == gpus


def test_a_nodes_free_dra_devices_are_its_slices_less_those_of_live_claims() -> None:
    claims = [claim("gpu-0"), claim("gpu-1", reserved=False)]  # the second's pod ended
    assert dra_free([SLICE], claims) == {"h100": {"dra/gpu.nvidia.com": 2.0}}


def _gang(replicas: int, devices: int = 1) -> dict[str, Any]:
    spec = {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
    return {"metadata": {"annotations": {ANNOTATION_DRA: f"{DRIVER}={devices}"}}, "spec": spec}


NODE = {
    "metadata": {"name": "h100"},
    "status": {"allocatable": {"cpu": "32"}, "conditions": [{"type": "Ready", "status": "True"}]},
}


@pytest.mark.parametrize(
    ("claims", "unbound", "first", "second"),
    [
        ([], 0, True, False),  # 2 devices: one gang of 2, not two
        ([claim("gpu-0")], 0, False, False),  # a live pod holds one: 2 do not fit
        ([], 1, False, False),  # a pod not yet bound asks one of them
    ],
    ids=["one-gang-at-a-time", "a-claim-holds-one", "an-unbound-pod-asks-one"],
)
def test_a_dra_gang_is_admitted_only_when_every_replica_has_its_devices(
    claims: list[dict[str, Any]], unbound: int, first: bool, second: bool
) -> None:
    one = {"name": "gpu-0", "attributes": {"index": {"int": 0}}}
    two_gpus = {"spec": {**SLICE["spec"], "devices": [one, {"name": "gpu-1"}]}}
    pods = [{"metadata": _gang(1)["metadata"], "spec": _gang(1)["spec"], "status": {"phase": "Pending"}}] * unbound
    room = free_room([NODE], pods, dra_free([two_gpus], claims))
    need = template_requests(_gang(2))
    assert need == {"cpu": 1.0, "dra/gpu.nvidia.com": 1.0}
    assert fits(room, need, 2, ()) is first
    assert fits(room, need, 2, ()) is second


class FakeLogs:
    """The API's pods/log: each read counted; ``gone`` pods answer as a deleted pod does."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.gone: set[str] = set()
        self.lock = threading.Lock()

    def ns(self, resource: str, group: str = "") -> str:
        return f"/api/v1/namespaces/default/{resource}"

    @contextmanager
    def stream(self, path: str, **params: Any) -> Iterator[Any]:
        pod = path.split("/")[-2]
        with self.lock:
            self.reads.append(pod)
        if pod in self.gone:
            raise EngineError(f'pods "{pod}" not found')

        class Lines:
            def iter_lines(self) -> Iterator[str]:
                yield f"2026-11-27T08:00:00Z {pod} says hello"

        yield Lines()


def test_a_pods_log_is_read_once_before_its_job_goes_never_over_it_after(tmp_path: Path) -> None:
    api = FakeLogs()
    log = tmp_path / "log"
    meta = {"annotations": {ANNOTATION_LOGS: f'["{log}"]'}}
    ended = {"metadata": {"name": "hf-r-s-1-abcde"}, "status": {"containerStatuses": [{"state": {"terminated": {}}}]}}
    followers = LogFollowers()
    followers.read_before(api, {"hf-r-s-1": (meta, [ended])})  # type: ignore[arg-type]
    assert "says hello" in log.read_text() and api.reads == ["hf-r-s-1-abcde"]
    api.gone.add("hf-r-s-1-abcde")  # the Job deleted: a poll still lists its pod as it goes
    followers.follow(api, meta, [ended])  # type: ignore[arg-type]
    assert "says hello" in log.read_text() and api.reads == ["hf-r-s-1-abcde"]  # not read again


def test_a_read_refused_leaves_the_log_read_before(tmp_path: Path) -> None:
    api = FakeLogs()
    log = tmp_path / "log"
    log.write_text("2026-11-27T08:00:00Z stdout F read before\n")
    api.gone.add("hf-r-s-1-abcde")
    meta = {"annotations": {ANNOTATION_LOGS: f'["{log}"]'}}
    ended = {"metadata": {"name": "hf-r-s-1-abcde"}, "status": {"containerStatuses": [{"state": {"terminated": {}}}]}}
    LogFollowers().read_before(api, {"hf-r-s-1": (meta, [ended])})  # type: ignore[arg-type]
    assert log.read_text() == "2026-11-27T08:00:00Z stdout F read before\n"


class OpenStream(FakeLogs):
    """A node whose followed log streams stay open after the container ends (kwok's; a
    kubelet's until its next look): ``follow=true`` gives the first line, then waits for
    ``cut``; a whole read (``follow=false``) gives every line."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = threading.Event()
        self.first = threading.Event()
        self.followed = threading.Event()  # the follower left its stream: it wrote all it had

    @contextmanager
    def stream(self, path: str, **params: Any) -> Iterator[Any]:
        pod, follow = path.split("/")[-2], params.get("follow") == "true"
        with self.lock:
            self.reads.append(f"{pod} {'follow' if follow else 'whole'}")
        first, cut = self.first, self.cut

        class Lines:
            def iter_lines(self) -> Iterator[str]:
                yield "2026-11-27T08:00:00Z line 1"
                if follow:
                    first.set()
                    cut.wait()
                    yield "2026-11-27T08:00:09Z written after the whole read"
                else:
                    yield "2026-11-27T08:00:01Z line 2"

        yield Lines()
        if follow:
            self.followed.set()


def test_an_ended_pods_stream_left_open_is_read_whole_not_waited_for(tmp_path: Path) -> None:
    """issue 43: a release waited 2 s for each stream a node left open after its pod ended
    (every hundred-step run's end on kwok); the ended pod's log is read whole instead, and
    the follower, once its stream ends, writes nothing over it."""
    api = OpenStream()
    log = tmp_path / "log"
    meta = {"annotations": {ANNOTATION_LOGS: f'["{log}"]'}}
    pod: dict[str, Any] = {"metadata": {"name": "hf-r-s-1-abcde"}}
    running = {**pod, "status": {"containerStatuses": [{"state": {"running": {}}}]}}
    ended = {**pod, "status": {"containerStatuses": [{"state": {"terminated": {}}}]}}
    followers = LogFollowers()
    followers.follow(api, meta, [running])  # type: ignore[arg-type]
    assert api.first.wait(30)
    followers.read_before(api, {"hf-r-s-1": (meta, [ended])})  # type: ignore[arg-type]
    whole = "2026-11-27T08:00:00Z stdout F line 1\n2026-11-27T08:00:01Z stdout F line 2\n"
    assert log.read_text() == whole and not api.cut.is_set()  # before the stream ended
    assert api.reads == ["hf-r-s-1-abcde follow", "hf-r-s-1-abcde whole"]
    api.cut.set()
    assert api.followed.wait(30)
    assert log.read_text() == whole and [p.name for p in tmp_path.iterdir()] == ["log"]


def _pod(state: str) -> dict[str, Any]:
    return {"metadata": {"name": "hf-r-s-1-abcde"}, "status": {"containerStatuses": [{"state": {state: {}}}]}}


def test_a_pod_a_poll_saw_running_that_ends_soon_is_read_once_whole_never_followed(tmp_path: Path) -> None:
    """issue 43: each pod a poll saw running was followed (a stream, a thread, a connection held
    open on kwok) and then read again; one that ends within ``follow_after`` is read once."""
    api = OpenStream()
    log = tmp_path / "log"
    meta = {"annotations": {ANNOTATION_LOGS: f'["{log}"]'}}
    followers = LogFollowers(follow_after=3600)  # never due in this test
    followers.follow(api, meta, [_pod("running")], soon=True)  # type: ignore[arg-type]
    assert api.reads == []
    followers.follow(api, meta, [_pod("terminated")], soon=True)  # type: ignore[arg-type]
    followers.read_before(api, {"hf-r-s-1": (meta, [_pod("terminated")])})  # type: ignore[arg-type]
    assert api.reads == ["hf-r-s-1-abcde whole"]
    assert log.read_text() == "2026-11-27T08:00:00Z stdout F line 1\n2026-11-27T08:00:01Z stdout F line 2\n"


def test_a_pod_that_runs_on_is_followed_once_due_and_a_cancel_does_not_wait_for_it(tmp_path: Path) -> None:
    """A pod still running once ``follow_after`` has passed is followed (from its log's start),
    once; a cancel (``follow`` without ``soon``) starts its reader at once."""
    api = OpenStream()
    log = tmp_path / "log"
    meta = {"annotations": {ANNOTATION_LOGS: f'["{log}"]'}}
    followers = LogFollowers(follow_after=0.0)
    followers.follow(api, meta, [_pod("running")], soon=True)  # type: ignore[arg-type]
    assert api.first.wait(30)
    followers.follow(api, meta, [_pod("running")], soon=True)  # type: ignore[arg-type]
    assert api.reads == ["hf-r-s-1-abcde follow"]
    api.cut.set()
    assert api.followed.wait(30)
    later = LogFollowers(follow_after=3600)
    cancelled = tmp_path / "cancelled"
    other = {"annotations": {ANNOTATION_LOGS: f'["{cancelled}"]'}}
    later.follow(api, other, [_pod("running")], soon=True)  # type: ignore[arg-type]
    later.follow(api, other, [_pod("running")])  # type: ignore[arg-type]
    later.finish(["hf-r-s-1"])
    assert "line 1" in cancelled.read_text()
    later.close()
