"""The local backend: each step attempt is a podman (or docker) container on this machine;
hetflow leases the GPUs itself.  ``backend.py`` holds LocalBackend, a thin adapter from the
backend contract to the container engine (``execute/engine.py``), which does the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.local.backend import LocalBackend

_WHERE = {
    "backend": ["LocalBackend"],
}

__all__ = ["LocalBackend"]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
