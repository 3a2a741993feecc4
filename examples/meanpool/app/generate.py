"""Write a seeded random float32 matrix of --size x --size as .npy (the meanpool input)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def generate(size: int, seed: int) -> np.ndarray:
    """Uniform [0, 1) float32; PCG64 with a fixed seed gives the same matrix on every machine."""
    return np.random.default_rng(seed).random((size, size), dtype=np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.size < 2:
        parser.error("--size must be at least 2")
    start = time.perf_counter()
    matrix = generate(args.size, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.save(args.out, matrix)
    print(
        f"generate: {args.size}x{args.size} float32 seed={args.seed} mean={matrix.mean():.6f} "
        f"-> {args.out} in {time.perf_counter() - start:.2f}s (numpy {np.__version__})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
