"""Running things on the GPU machine: commands, hetflow from the kit's wheels, the carried
podman, and each part timed into its result."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .common import IMAGE, WORK, CheckError, Part


def sh(
    args: list[str] | str,
    *,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    check: bool = True,
    cwd: Path | None = None,
) -> str:
    """Run a command; its stdout+stderr.  A non-zero exit (with ``check``) is a CheckError
    that quotes the command and the end of its output."""
    shell = isinstance(args, str)
    try:
        r = subprocess.run(args, shell=shell, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise CheckError(f"{args if shell else ' '.join(args)}: no answer in {timeout:.0f} s") from None
    except OSError as exc:
        raise CheckError(f"{args if shell else ' '.join(args)}: {exc}") from None
    out = r.stdout + r.stderr
    if check and r.returncode != 0:
        raise CheckError(f"{args if shell else ' '.join(args)}: exit {r.returncode}: {out.strip()[-800:]}")
    return out


class Machine:
    """The GPU machine as the parts use it: hetflow from the kit's wheels, podman unpacked."""

    def __init__(self, kit: Path, out: Path) -> None:
        self.kit, self.out = kit, out
        self.site = WORK / "site"
        self.root = WORK / "root"
        self.bin = WORK / "bin"
        self.home = WORK / "home"
        self.podman_error = ""

    def save(self, name: str, text: str) -> None:
        (self.out / name).write_text(text)

    def install(self) -> None:
        if (self.site / "hetflow").is_dir():
            return
        wheels = sorted(str(p) for p in (self.kit / "wheels").glob("*.whl"))
        sh(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                str(self.site),
                *wheels,
            ],
            timeout=180,
        )

    def env(self, **extra: str) -> dict[str, str]:
        e = dict(os.environ)
        e.update(
            PYTHONPATH=str(self.site),
            HETFLOW_HOME=str(self.home),
            PATH=f"{self.bin}:{e.get('PATH', '')}",
            CONTAINERS_CONF=str(WORK / "containers.conf"),
            CONTAINERS_STORAGE_CONF=str(WORK / "storage.conf"),
            HETFLOW_CONTAINERS_CONF=str(WORK / "containers.conf"),
            HETFLOW_GPU_SAMPLE_INTERVAL="0.25",
        )
        e.update(extra)
        return e

    def hetflow(self, *args: str, timeout: float = 120, check: bool = True, cwd: Path | None = None) -> str:
        return sh(hetflow_argv(*args), timeout=timeout, env=self.env(), check=check, cwd=cwd)

    def python(self, code: str, timeout: float = 60) -> str:
        return sh([sys.executable, "-c", code], timeout=timeout, env=self.env())

    def build_program(self, source: str = "check.cu", name: str = "check") -> Path:
        out = WORK / name
        if out.is_file():
            return out
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        # -cudart static: the container then needs only the driver's libcuda and a libc
        sh([nvcc, "-O2", "-cudart", "static", "-o", str(out), str(self.kit / source)], timeout=180)
        return out

    def criu(self) -> Path:
        """The carried CRIU 4.1.1 (kit/criu: the binary and the libraries a bare machine
        lacks), behind a wrapper called ``criu`` that finds them: hetflow is given its path
        (HETFLOW_CRIU) and puts its folder first on PATH for podman's runc."""
        home, wrapper = WORK / "criu", WORK / "criu-bin" / "criu"
        if wrapper.is_file():
            return wrapper
        shutil.copytree(self.kit / "criu", home, dirs_exist_ok=True)
        (home / "criu").chmod(0o755)
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={home}/lib exec {home}/criu "$@"\n')
        wrapper.chmod(0o755)
        return wrapper

    def build_sms(self) -> Path:
        """``sms``: the SMs the CUDA driver lets this process use (tools/gpu-kit/sms.cu)."""
        out = WORK / "sms"
        if not out.is_file():
            nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
            stubs = Path(nvcc).resolve().parent.parent / "lib64" / "stubs"  # libcuda to link against
            sh([nvcc, "-O2", "-o", str(out), str(self.kit / "sms.cu"), f"-L{stubs}", "-lcuda"], timeout=180)
        return out

    def podman(self) -> bool:
        """Unpack the carried podman; True when a container runs."""
        if (self.bin / "podman").is_file():
            return not self.podman_error
        for deb in sorted((self.kit / "debs").glob("*.deb")):
            sh(["dpkg", "-x", str(deb), str(self.root)], timeout=60)
        libs = f"{self.root}/lib/x86_64-linux-gnu:{self.root}/usr/lib/x86_64-linux-gnu"
        self.bin.mkdir(parents=True, exist_ok=True)
        for name, rel in (("podman", "usr/bin/podman"), ("conmon", "usr/bin/conmon"), ("runc", "usr/sbin/runc")):
            w = self.bin / name
            w.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={libs} exec {self.root}/{rel} "$@"\n')
            w.chmod(0o755)
        (WORK / "containers.conf").write_text(
            '[containers]\ndefault_ulimits = []\npids_limit = 0\n[engine]\ncgroup_manager = "cgroupfs"\n'
            f'runtime = "runc"\nevents_logger = "file"\nconmon_path = ["{self.bin}/conmon"]\n'
            f'helper_binaries_dir = ["{self.root}/usr/lib/podman"]\n[engine.runtimes]\nrunc = ["{self.bin}/runc"]\n'
        )
        (WORK / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{WORK}/store"\nrunroot = "{WORK}/run"\n'
        )
        policy = Path("/etc/containers/policy.json")
        if not policy.exists():
            policy.parent.mkdir(parents=True, exist_ok=True)
            policy.write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        try:
            sh(["podman", "load", "-i", str(self.kit / "image.oci.tar")], env=self.env(), timeout=120)
            sh(["podman", "run", "--rm", "--network", "none", IMAGE, "true"], env=self.env(), timeout=60)
        except CheckError as exc:
            self.podman_error = str(exc)
        return not self.podman_error


def timed(part: Part, body: Callable[[Part], None]) -> Part:
    t0 = time.monotonic()
    try:
        body(part)
        if part.status == "skipped" and not part.summary:
            part.status = "passed"
    except CheckError as exc:
        part.status, part.error = "failed", str(exc)
    except Exception as exc:  # the report must be written whatever breaks: say what did
        part.status, part.error = "failed", f"{type(exc).__name__}: {exc}"
        part.details["traceback"] = traceback.format_exc()[-3000:]
    part.seconds = time.monotonic() - t0
    return part


def hetflow_argv(*args: str) -> list[str]:
    code = "import sys; sys.argv[0] = 'hetflow'; from hetflow.cli.main import main; main()"
    return [sys.executable, "-c", code, *args]
