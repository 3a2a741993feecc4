"""The local backend passes the backend contract (real podman containers)."""

from __future__ import annotations

import pytest
from demo.images import build_tiny_image

from hetflow.execute.backends.local import LocalBackend
from tests.contract.backend_contract import BUSYBOX, BackendContract


@pytest.fixture(scope="module")
def backend() -> LocalBackend:
    build_tiny_image(BUSYBOX)
    return LocalBackend()


@pytest.fixture
def fresh_backend() -> LocalBackend:
    return LocalBackend()


class TestLocalBackend(BackendContract):
    def test_capabilities(self, backend: LocalBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == (
            "local",
            False,
            False,
            False,
        )
