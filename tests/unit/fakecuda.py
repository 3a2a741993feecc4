"""The fake libcuda.so.1 of fakecuda.c, built with cc for a test (each build is a new library,
so its table of processes starts empty)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fakecuda.c")
HAVE_CC = shutil.which("cc") is not None


def build_fake_libcuda(folder: Path, *flags: str) -> Path:
    """``-DNO_CHECKPOINT_API`` builds a driver before 570 (no cuCheckpointProcess*)."""
    lib = folder / f"libcuda-fake{len(list(folder.glob('libcuda-fake*')))}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(SOURCE), *flags], check=True)
    return lib
