"""The examples' images: the Debian base (debootstrap from the host's mirror), the NumPy and
MPI images with the example apps, and the CuPy image with its CUDA wheels from PyPI."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from demo.images.engine import ImageEngine, Log, Podman, log_took, run_tool
from demo.images.recipes import (
    APPS,
    BASE_IMAGE,
    CUDA_STACK,
    CUPY_IMAGE,
    DEBIAN_PATH,
    HASH_LABEL,
    MPI_APPS,
    MPI_BASE_IMAGE,
    MPI_IMAGE,
    MPI_PACKAGES,
    NUMPY_IMAGE,
    SUITE,
    CudaStack,
    app_files,
    content_hash,
    cupy_containerfile,
    mirror_from_sources,
    mpi_containerfile,
    numpy_containerfile,
)
from hetflow.config import hetflow_home
from hetflow.errors import EngineError

# --- the Debian base -----------------------------------------------------------------


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's Debian mirror for bookworm, read from apt's configuration."""
    deb822 = [p.read_text() for p in sorted((apt_dir / "sources.list.d").glob("*.sources"))]
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    mirror = mirror_from_sources(deb822, [p.read_text() for p in lists if p.is_file()])
    if mirror is None:
        raise EngineError(
            f"no apt source for Debian {SUITE} in {apt_dir}/sources.list(.d); debootstrap "
            "needs a mirror: add one (see sources.list(5)) or build on a Debian 12 host"
        )
    return mirror


# Not needed to run a step (docs, translations, apt's download caches).
_PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt", "var/lib/apt/lists")


def debootstrap_root(target: Path, log: Log, include: Sequence[str] = (), ready: str = "bin/sh") -> Path:
    """Create a minbase bookworm rootfs with ``include`` at ``target`` once; later calls reuse it
    (``ready``, a file it must hold, is there; delete the folder to start over).  It is built
    beside its final name and renamed when complete, so an interrupted run never leaves a half
    rootfs that looks usable.  The example images and the CWL conformance stand-ins use it."""
    done = target.with_name(target.name + ".ok")
    if done.is_file() and (target / ready).exists():
        log(f"rootfs: reusing {target}")
        return target
    if os.geteuid() != 0:
        raise EngineError(f"debootstrap needs root to build {target}; run as root")
    mirror = debian_mirror()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    packages = ", ".join(include) or "(minbase)"
    log(f"rootfs: debootstrap {SUITE} {packages} from {mirror} into {partial} (about a minute)")
    extra = [f"--include={','.join(include)}"] if include else []
    run_tool(
        ["debootstrap", "--variant=minbase", *extra, SUITE, str(partial), mirror],
        what=f"debootstrap of a Debian base with {packages}",
        hint=f"It needs `apt-get install -y debootstrap` and a reachable mirror ({mirror}, from "
        f"/etc/apt/sources.list.d); its log is {partial}/debootstrap/debootstrap.log.",
        timeout=1800,
    )
    for rel in _PRUNE:
        shutil.rmtree(partial / rel, ignore_errors=True)
    partial.rename(target)
    done.write_text(f"{SUITE} {mirror} {','.join(include)}\n")
    log_took(log, f"rootfs: {target} ready", started)
    return target


def _build_base(podman: ImageEngine, cache: Path, force: bool, log: Log) -> str:
    """Import the base image unless it exists; returns the replaced image id."""
    if not force and podman.exists(BASE_IMAGE):
        log(f"{BASE_IMAGE}: exists")
        return ""
    rootfs = debootstrap_root(cache / f"rootfs-{SUITE}-numpy", log, ("python3-numpy",), "usr/bin/python3")
    old = podman.image_id(BASE_IMAGE)
    started = time.monotonic()
    changes = [f"ENV PATH={DEBIAN_PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]', f"LABEL hetflow.debian.suite={SUITE}"]
    podman.import_dir(rootfs, BASE_IMAGE, changes)
    log_took(log, f"{BASE_IMAGE}: imported", started)
    return old


def _build_mpi_base(podman: ImageEngine, cache: Path, force: bool, log: Log) -> str:
    """Import the MPI base (bookworm + ``MPI_PACKAGES``, all from debootstrap so the
    image build needs no network) unless an image with the same package list exists;
    returns the replaced image id."""
    packages = hashlib.sha256(" ".join(MPI_PACKAGES).encode()).hexdigest()[:12]
    if not force and podman.label(MPI_BASE_IMAGE, "hetflow.debian.packages") == packages:
        log(f"{MPI_BASE_IMAGE}: exists")
        return ""
    rootfs = debootstrap_root(cache / f"rootfs-{SUITE}-mpi-{packages}", log, MPI_PACKAGES, "usr/bin/python3")
    old = podman.image_id(MPI_BASE_IMAGE)
    started = time.monotonic()
    changes = [
        f"ENV PATH={DEBIAN_PATH}",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
        f"LABEL hetflow.debian.suite={SUITE}",
        f"LABEL hetflow.debian.packages={packages}",
    ]
    podman.import_dir(rootfs, MPI_BASE_IMAGE, changes)
    log_took(log, f"{MPI_BASE_IMAGE}: imported", started)
    return old


# --- the NumPy, MPI and CuPy images --------------------------------------------------


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy an app folder, readable by any user: steps run as a non-root UID."""
    for path in app_files(src):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(path, target)
        target.chmod(0o755 if os.access(path, os.X_OK) else 0o644)


def _build_app_image(
    podman: ImageEngine,
    examples_dir: Path,
    force: bool,
    log: Log,
    *,
    apps: Iterable[str],
    base: str,
    image: str,
    containerfile: Callable[[str], str],
) -> str:
    """Build ``image`` on ``base`` with the example app folders ``apps`` if the apps, the
    base or the Containerfile changed; returns the replaced image id ("" if none)."""
    roots = {src: examples_dir / src for src in apps}
    missing = [str(path) for path in roots.values() if not path.is_dir()]
    if missing:
        raise EngineError(f"{', '.join(missing)} not found: pass the examples/ folder of a hetflow checkout")
    digest = content_hash(roots, salt=podman.image_id(base) + containerfile(""))
    if not force and podman.label(image, HASH_LABEL) == digest:
        log(f"{image}: up to date")
        return ""
    old = podman.image_id(image)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hetflow-app-image-") as tmp:
        context = Path(tmp)
        for src, root in roots.items():
            _copy_tree(root, context / Path(src).parent.name)
        (context / "Containerfile").write_text(containerfile(digest))
        podman.build(context / "Containerfile", context, image)
    log_took(log, f"{image}: built", started)
    return old


def _build_numpy(podman: ImageEngine, examples_dir: Path, force: bool, log: Log) -> str:
    """The NumPy image of the CPU examples."""
    return _build_app_image(
        podman,
        examples_dir,
        force,
        log,
        apps=APPS,
        base=BASE_IMAGE,
        image=NUMPY_IMAGE,
        containerfile=numpy_containerfile,
    )


def _build_mpi(podman: ImageEngine, examples_dir: Path, force: bool, log: Log) -> str:
    """The MPI image of ``launcher: mpi`` gangs (examples/gang/app on the MPI base)."""
    return _build_app_image(
        podman,
        examples_dir,
        force,
        log,
        apps=MPI_APPS,
        base=MPI_BASE_IMAGE,
        image=MPI_IMAGE,
        containerfile=mpi_containerfile,
    )


# Wheels for the image's Python, whatever the host's: CPython 3.11 on manylinux x86_64.
# --no-deps: numpy is Debian's; a pip numpy in /usr/local would shadow it.
_PIP_FLAGS = (
    "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
    "--python-version=3.11", "--implementation=cp", "--platform=manylinux2014_x86_64",
)  # fmt: skip


def _pip_wheels(cache: Path, stack: CudaStack, log: Log) -> Path:
    """Install the CuPy wheels for the image's Python (3.11, manylinux x86_64) into a
    cached folder, once; it becomes the build context of the CuPy image."""
    site = cache / f"cupy-{stack.cupy}-cuda{stack.cuda}"
    done = site.with_name(site.name + ".ok")
    if done.is_file() and site.is_dir():
        log(f"wheels: reusing {site}")
        return site
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    started = time.monotonic()
    log(f"wheels: pip install {' '.join(stack.wheels)} into {partial}")
    # The .pyc files pip writes are only of use when this Python is a 3.11 too.
    compile_flag = "--compile" if sys.version_info[:2] == (3, 11) else "--no-compile"
    run_tool(
        [sys.executable, "-m", "pip", "install", *_PIP_FLAGS, "--target", str(partial), compile_flag, *stack.wheels],
        what="downloading CuPy and the CUDA libraries from PyPI",
        hint="Check that PyPI is reachable and pip works (`python3 -m pip --version`; "
        "install it with `apt-get install -y python3-pip`), or build without the GPU "
        "image: build_examples(..., gpu=False).",
        timeout=1800,
    )
    shutil.rmtree(partial / "bin", ignore_errors=True)
    for unused in (partial / "nvidia/cufft/lib").glob("libcufftw*"):  # the FFTW-style API
        unused.unlink()
    partial.rename(site)
    done.write_text("\n".join(stack.wheels) + "\n")
    log_took(log, f"wheels: {site} ready", started)
    return site


# Proves the image is complete without a GPU: CuPy imports, NVRTC compiles a kernel
# that needs the runtime headers (cuda_fp16.h), and cuFFT loads.
_CUPY_SMOKE = """
import cupy
from cupy import _environment as env
from cupy.cuda import cufft
from cupy_backends.cuda.libs import nvrtc
incs = ["-I" + d for d in env._get_include_dir_from_conda_or_wheel(*nvrtc.getVersion())]
src = '#include <cuda_fp16.h>\\nextern "C" __global__ void k(float* x)' \
      '{ x[0] = __half2float(__float2half(x[0])); }'
prog = nvrtc.createProgram(src, "k.cu", [], [])
nvrtc.compileProgram(prog, ["-arch=sm_70", *incs])
print("cupy", cupy.__version__, "nvrtc", nvrtc.getVersion(), "cufft", cufft.getVersion(),
      "cubin bytes", len(nvrtc.getCUBIN(prog)))
"""


def _build_cupy(podman: ImageEngine, cache: Path, force: bool, log: Log) -> str:
    """Build the CuPy image if the NumPy image or the pins changed; returns the
    replaced image id."""
    stack = CUDA_STACK
    salt = podman.image_id(NUMPY_IMAGE) + cupy_containerfile("") + "\n".join(stack.wheels)
    digest = hashlib.sha256(salt.encode()).hexdigest()
    if not force and podman.label(CUPY_IMAGE, HASH_LABEL) == digest:
        log(f"{CUPY_IMAGE}: up to date")
        return ""
    site = _pip_wheels(cache, stack, log)
    old = podman.image_id(CUPY_IMAGE)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hetflow-cupy-") as tmp:
        containerfile = Path(tmp) / "Containerfile"
        containerfile.write_text(cupy_containerfile(digest))
        podman.build(containerfile, site, CUPY_IMAGE)
    log_took(log, f"{CUPY_IMAGE}: built", started)
    locked = ("--rm", "--network=none", "--read-only", "--tmpfs=/tmp", "--user=1000:1000", "--cap-drop=all")
    out = podman.run(
        "run", *locked, "--env=HOME=/tmp", CUPY_IMAGE, "python3", "-c", _CUPY_SMOKE, what=f"checking {CUPY_IMAGE}"
    )
    log(f"{CUPY_IMAGE}: check passed: {out.strip()}")
    return old


def build_examples(
    examples_dir: Path, *, force: bool = False, gpu: bool = True, mpi: bool = True, log: Log = print
) -> list[str]:
    """Build (or find up to date) the examples' images; returns their names.

    ``force`` rebuilds every image, but from the cached Debian rootfs and wheels under
    ``hetflow_home()/cache`` (delete those folders to fetch afresh).  ``gpu=False``
    skips the CuPy image (it needs about 600 MB of wheels from PyPI); ``mpi=False``
    skips the MPI image of ``launcher: mpi`` gangs (Open MPI, mpi4py, sshd).
    Raises EngineError when a tool, the mirror or PyPI fails."""
    podman = Podman.default()
    cache = hetflow_home() / "cache"
    started = time.monotonic()
    stale = [_build_base(podman, cache, force, log)]
    stale.insert(0, _build_numpy(podman, Path(examples_dir), force, log))
    names = [BASE_IMAGE, NUMPY_IMAGE]
    if mpi:
        stale.insert(0, _build_mpi_base(podman, cache, force, log))
        stale.insert(0, _build_mpi(podman, Path(examples_dir), force, log))
        names.append(MPI_IMAGE)
    if gpu:
        stale.insert(0, _build_cupy(podman, cache, force, log))
        names.append(CUPY_IMAGE)
    for image_id in filter(None, stale):  # children first, so parents become free
        podman.drop(image_id)
    log_took(log, f"examples: {len(names)} images ready", started)
    return names


def build_base_image(*, force: bool = False, log: Log = print) -> str:
    """Only the Debian base (Python 3.11, NumPy): what the Snakemake image is built on."""
    old = _build_base(Podman.default(), hetflow_home() / "cache", force, log)
    if old:
        Podman.default().drop(old)
    return BASE_IMAGE


def build_mpi_image(examples_dir: Path, *, force: bool = False, log: Log = print) -> str:
    """Only the MPI image (and its base): what the MPI integration tests need."""
    podman = Podman.default()
    stale = [_build_mpi_base(podman, hetflow_home() / "cache", force, log)]
    stale.insert(0, _build_mpi(podman, Path(examples_dir), force, log))
    for image_id in filter(None, stale):
        podman.drop(image_id)
    return MPI_IMAGE
