"""The local backend: each step attempt is a podman (or docker) container on this machine;
hetflow leases the GPUs itself.  ``backend.py`` holds LocalBackend, a thin adapter from the
backend contract to the container engine (``execute/engine.py``), which does the work.
"""

from hetflow.execute.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
