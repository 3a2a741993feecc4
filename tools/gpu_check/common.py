"""What every part of the check shares: its names, where it works, a part's result."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TITLE = "hetflow on a real GPU: the acceptance check (docs/guides/real-gpu.md)."  # --help's first line
PARTS = ("discovery", "injection", "sharing", "leases", "gang", "checkpoint")
KIT_LIMIT = 64 << 20  # what the GPU machine's tool carries
DEFAULT_SLOWDOWN = 0.966  # hetflow's model default (inventory.DEFAULT_TIMESLICE_SLOWDOWN)
IMAGE = "localhost/hetflow-kit/minimal:1"
# What podman needs from the kit (their libraries ride along; tools/gpu-kit/build lists them).
NEEDED_DEBS = ("podman", "conmon", "runc", "libgpgme11", "libseccomp2", "libsubid4", "libglib2.0-0")
NOT_THERE = ("ray",)  # hetflow extras a GPU machine has no use for: never carried
WORK = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/hetflow-gpu-check"))


class CheckError(Exception):
    """A part's failure with a message that says what failed."""


@dataclass
class Part:
    name: str
    status: str = "skipped"  # passed | failed | skipped
    seconds: float = 0.0
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    error: str = ""
