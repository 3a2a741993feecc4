"""Iterated mean pooling: the CPU-vs-GPU benchmark of the "GPU containers" talk.

One iteration replaces every element by the mean of the --window x --window block that
starts at it, wrapping around at the edges (stride 1, so the matrix keeps its shape and
the iteration can be repeated; wrap-around keeps the global mean exactly, which makes
the result easy to check).  The default window, 4, was tuned so that the CPU variant
at the workflow's defaults (4096x4096, 256 iterations) takes about 11-12 s in the
image (Debian's NumPy 1.24) and 9 s with NumPy 2.4 on this project's 2-core test
machine; with NumPy 2.4 a 2x2 window took under 5 s and 8x8 about 18 s.  A datacenter
GPU needs well under a second, which is the point of the benchmark.

With --gpu the same code runs on CuPy (the array module is a parameter); without it,
on NumPy.  The script prints the compute time (excluding file I/O) and the device.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np


def shifted_add(xp: ModuleType, src: Any, dst: Any, shift: int, axis: int) -> None:
    """dst += src rolled by -shift along axis, without allocating (two slice adds)."""
    if axis == 1:
        xp.add(dst[:, :-shift], src[:, shift:], out=dst[:, :-shift])
        xp.add(dst[:, -shift:], src[:, :shift], out=dst[:, -shift:])
    else:
        xp.add(dst[:-shift], src[shift:], out=dst[:-shift])
        xp.add(dst[-shift:], src[:shift], out=dst[-shift:])


def pool_once(xp: ModuleType, x: Any, out: Any, tmp: Any, window: int) -> None:
    """out = mean of the window x window block starting at each element, wrapping at
    the edges; tmp is scratch of the same shape.

    Separable (window sums along rows, then along columns) and written into
    preallocated buffers so the loop allocates nothing, on NumPy and CuPy alike."""
    xp.copyto(tmp, x)
    for shift in range(1, window):
        shifted_add(xp, x, tmp, shift, axis=1)
    xp.copyto(out, tmp)
    for shift in range(1, window):
        shifted_add(xp, tmp, out, shift, axis=0)
    xp.multiply(out, 1.0 / (window * window), out=out)


def pool(xp: ModuleType, x: Any, iterations: int, window: int, sync: Any) -> tuple[Any, float, float]:
    """Run the iterations; returns (result, first-iteration seconds, total seconds).

    The first iteration is reported apart: it pays for first-touch page faults of the
    buffers, and on CuPy for compiling the kernels (NVRTC) on first use."""
    a = xp.array(x, dtype=xp.float32, copy=True)
    b = xp.empty_like(a)
    tmp = xp.empty_like(a)
    sync()
    start = time.perf_counter()
    first = 0.0
    for i in range(iterations):
        pool_once(xp, a, b, tmp, window)
        a, b = b, a
        if i == 0:
            sync()
            first = time.perf_counter() - start
    sync()
    return a, first, time.perf_counter() - start


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def numpy_backend() -> tuple[ModuleType, Any, Any, str]:
    cores = len(os.sched_getaffinity(0))
    device = f"CPU {cpu_model()} ({cores} cores usable), numpy {np.__version__}"
    return np, (lambda: None), np.asarray, device


def cupy_backend() -> tuple[ModuleType, Any, Any, str]:
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError as exc:
        raise SystemExit(f"pool: --gpu needs CuPy, which is not importable here ({exc})") from exc
    try:
        props = cupy.cuda.runtime.getDeviceProperties(0)
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise SystemExit(f"pool: --gpu but no usable CUDA device ({exc})") from exc
    runtime = cupy.cuda.runtime.runtimeGetVersion()
    driver = cupy.cuda.runtime.driverGetVersion()
    device = (
        f"GPU {props['name'].decode()} (cc {props['major']}.{props['minor']}, "
        f"{props['totalGlobalMem'] / 2**30:.0f} GiB), cupy {cupy.__version__}, "
        f"CUDA runtime {runtime // 1000}.{runtime % 1000 // 10}, "
        f"driver API {driver // 1000}.{driver % 1000 // 10}"
    )
    return cupy, cupy.cuda.Device().synchronize, cupy.asnumpy, device


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--in", dest="inp", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--iterations", type=int, default=256)
    parser.add_argument("--window", type=int, default=4, help="side of the square averaging window (default 4)")
    parser.add_argument("--gpu", action="store_true", help="run on CuPy instead of NumPy")
    args = parser.parse_args(argv)
    if args.iterations < 1:
        parser.error("--iterations must be at least 1")
    if args.window < 2:
        parser.error("--window must be at least 2")

    matrix = np.load(args.inp)
    if matrix.ndim != 2 or min(matrix.shape) < args.window:
        print(
            f"pool: {args.inp} holds shape {matrix.shape}; need a 2-D matrix at least {args.window}x{args.window}",
            file=sys.stderr,
        )
        return 2
    xp, sync, to_host, device = cupy_backend() if args.gpu else numpy_backend()
    result, first, total = pool(xp, matrix, args.iterations, args.window, sync)
    host = np.asarray(to_host(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, host)
    per = (total - first) / max(args.iterations - 1, 1)
    print(f"pool: device: {device}")
    rows, cols = matrix.shape
    print(
        f"pool: {args.iterations} x {args.window}x{args.window} mean pooling of {rows}x{cols} "
        f"float32: {total:.3f}s compute (first iteration {first:.3f}s, then {per * 1e3:.2f} ms "
        f"each); mean {matrix.mean():.6f} -> {host.mean():.6f}, std {matrix.std():.5f} -> "
        f"{host.std():.5f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
