"""Build the container images that hetflow's examples and tests run, with no registry.

Public API: ``build_examples`` (the NumPy and CuPy images of ``examples/``) and
``build_tiny_image`` (a busybox image for tests).  Nothing is pulled: the Debian base
comes from ``debootstrap`` against the host's own apt mirror and is brought in with
``podman import``; CuPy and the CUDA libraries it needs come from PyPI through the
host's pip.  Every image is skipped when it exists (or, for images with app files in
them, when its ``hetflow.examples.hash`` label matches the files) unless ``force``.

    base:bookworm   debootstrap --variant=minbase --include=python3-numpy  (cached rootfs)
      numpy:latest  + COPY examples/meanpool/app -> /app/meanpool, circuit/app -> /app/circuit
        cupy:latest + CuPy 13 and CUDA 12.4 runtime, NVRTC and cuFFT from PyPI wheels
      snakemake:9.27.1 + Snakemake and its S3 storage plugin (the TES tasks of
                      snakemake-executor-plugin-tes; ``build_snakemake_image``)

Every failure a user can cause (no debootstrap, an unreachable mirror, pip failing)
is an ``EngineError`` that names the command and what to install or change.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from demo.images.busybox import (
    HWMATCH_BUILDS,
    HWMATCH_IMAGE,
    HwBuild,
    build_hwmatch_images,
    build_tiny_image,
    hwmatch_gcc_args,
    hwmatch_import_changes,
)
from demo.images.engine import ImageEngine
from demo.images.examples import build_base_image, build_examples, build_mpi_image
from demo.images.recipes import (
    BASE_IMAGE,
    CUDA_STACK,
    CUPY_IMAGE,
    HASH_LABEL,
    MPI_IMAGE,
    MPI_PACKAGES,
    NUMPY_IMAGE,
    TINY_IMAGE,
    CudaStack,
    content_hash,
    cupy_containerfile,
    mirror_from_sources,
    mpi_containerfile,
    numpy_containerfile,
    tiny_import_changes,
)
from demo.images.snakemake import SNAKEMAKE_IMAGE, build_snakemake_image
from hetflow.errors import HetflowError

__all__ = [
    "BASE_IMAGE",
    "CUDA_STACK",
    "CUPY_IMAGE",
    "HASH_LABEL",
    "HWMATCH_BUILDS",
    "HWMATCH_IMAGE",
    "MPI_IMAGE",
    "MPI_PACKAGES",
    "NUMPY_IMAGE",
    "SNAKEMAKE_IMAGE",
    "TINY_IMAGE",
    "CudaStack",
    "HwBuild",
    "ImageEngine",
    "build_base_image",
    "build_examples",
    "build_hwmatch_images",
    "build_mpi_image",
    "build_snakemake_image",
    "build_tiny_image",
    "content_hash",
    "cupy_containerfile",
    "hwmatch_gcc_args",
    "hwmatch_import_changes",
    "mirror_from_sources",
    "mpi_containerfile",
    "numpy_containerfile",
    "tiny_import_changes",
]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m demo.images [--dir examples] [--force] [--no-gpu] [--no-mpi] [--snakemake]``: what
    ``make images`` runs (``--snakemake``: only the Snakemake image, ``make snakemake-tes-venv``)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m demo.images", description="Build the example images, with no registry (cached)."
    )
    parser.add_argument("--dir", type=Path, default=Path("examples"), help="the examples directory")
    parser.add_argument("--force", action="store_true", help="rebuild even when the images exist")
    parser.add_argument("--no-gpu", dest="gpu", action="store_false", help="skip the CuPy (GPU) image")
    parser.add_argument("--no-mpi", dest="mpi", action="store_false", help="skip the MPI (gang) image")
    parser.add_argument("--snakemake", action="store_true", help="only the Snakemake image of TES tasks")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        if args.snakemake:
            built = [build_snakemake_image(force=args.force, log=log)]
        else:
            built = build_examples(args.dir, force=args.force, gpu=args.gpu, mpi=args.mpi, log=log)
    except HetflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for image in built:
        print(image)
    return 0
