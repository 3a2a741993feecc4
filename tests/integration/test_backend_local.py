"""The local backend passes the backend contract (real podman containers): the base and the
gang parts; it holds no DAG order and has one node (``TestLocalBackend.LACKS``)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest
from demo.images import build_tiny_image

from hetflow.execute.backends import LocalBackend, make_backend
from hetflow.execute.engine import Usage
from tests.contract.backend_contract import BUSYBOX, BackendContract, OrderingContract, job, wait_done
from tests.contract.gang_contract import GangContract
from tests.contract.node_contract import NodeFailureContract
from tests.integration.hfkit import run_containers


def local() -> LocalBackend:
    """The local backend as every run gets it: from the factory, with no settings."""
    made = make_backend()
    assert isinstance(made, LocalBackend)
    return made


@pytest.fixture(scope="module")
def backend() -> LocalBackend:
    build_tiny_image(BUSYBOX)
    return local()


@pytest.fixture
def fresh_backend() -> LocalBackend:
    return local()


class TestLocalBackend(BackendContract, OrderingContract, GangContract, NodeFailureContract):
    LACKS: ClassVar[Mapping[str, str]] = {
        "ordering": "podman holds no DAG order: the runner starts a step once its parents ended "
        "(holds_dependencies False)",
        "node failure": "one node, this machine: when it goes, hetflow goes with it and nothing is left to report "
        "the failure; a container killed under a live hetflow is its step's failure (test_crash, test_signals)",
    }

    def test_capabilities(self, backend: LocalBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == (
            "local",
            False,
            False,
            False,
        )


# --- while a run is watched: attached `podman run`, no `ps`, removals in the background ----------


def test_a_watched_run_learns_exit_codes_and_engine_refusals_and_measures_on_release(tmp_path: Path) -> None:
    build_tiny_image(BUSYBOX)
    backend, rid = local(), f"w{uuid.uuid4().hex[:8]}"
    woken = threading.Event()
    stop = backend.watch(rid, woken.set)
    assert stop is not None
    ok, bad, refused = f"hf-{rid}-ok-1", f"hf-{rid}-bad-1", f"hf-{rid}-nope-1"
    try:
        backend.submit(job(ok, tmp_path / "ok", "echo hi > /out/x; head -c 4000000 /dev/zero | wc -c", run_id=rid))
        backend.submit(job(bad, tmp_path / "bad", "sleep 1.5; exit 3", run_id=rid))
        nope = job(refused, tmp_path / "nope", "true", run_id=rid)
        backend.submit(replace(nope, container=replace(nope.container, image="localhost/hetflow-test/nope:latest")))
        states = wait_done(backend, rid, [ok, bad, refused], timeout=60)
        assert woken.is_set()
        assert (states[ok].exit_code, states[bad].exit_code, states[refused].exit_code) == (0, 3, 125)
        assert (tmp_path / "ok" / "x").read_text() == "hi\n"
        assert "4000000" in (tmp_path / "ok" / "log").read_text()  # the output is in the log file
        assert states[refused].reason.startswith(f"podman could not start {refused}: Error: ")
        assert "nope" in states[refused].reason
        measured: dict[str, Usage] = {}
        backend.release_measured([ok, bad, refused], [ok, bad], lambda n, u: measured.update({n: u}))
        assert backend.poll(rid) == {}  # forgotten at once; removed in the background
    finally:
        stop()  # waits for the removals
    assert run_containers(rid) == []
    assert set(measured) == {ok, bad}
    assert measured[bad].started is not None and measured[bad].ended is not None
    assert measured[bad].ended - measured[bad].started >= 1.4
    assert measured[ok].image_id is not None
