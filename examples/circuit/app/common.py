"""What the circuit steps share: the gate library, the array module, files and timing.

A netlist is a set of arrays (saved with np.savez): ``kind[n]`` is a gate kind below,
``fanin[n] = (a, b)`` are node ids (``b = -1`` for one-input gates, both -1 for primary
inputs), nodes are numbered so that every fanin comes before its gate, the first
``n_inputs`` nodes are the primary inputs, and ``outputs`` lists the primary outputs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

GATES = ("INPUT", "BUF", "NOT", "AND", "OR", "NAND", "NOR", "XOR")
INPUT, BUF, NOT, AND, OR, NAND, NOR, XOR = range(len(GATES))
ONE_INPUT = (BUF, NOT)
COMMUTATIVE = (AND, OR, NAND, NOR, XOR)

# Illustrative delays in ps (the order of a 45 nm library): intrinsic delay of each
# kind, and extra delay per fanout it drives.
GATE_DELAY = np.array([0.0, 12.0, 8.0, 18.0, 20.0, 12.0, 14.0, 26.0])
FANOUT_DELAY = 3.0
# Wire delay over L sites: driver resistance times wire capacitance (linear) plus the
# distributed RC of the wire itself (Elmore, quadratic in L).
WIRE_LINEAR = 0.6
WIRE_QUADRATIC = 0.01


def array_module(gpu: bool) -> tuple[ModuleType, str]:
    """(numpy or cupy, a line naming the device); exits with a message if --gpu
    cannot be honoured, since a GPU variant silently running on CPU would lie."""
    if not gpu:
        cores = len(os.sched_getaffinity(0))
        return np, f"CPU ({cores} cores usable), numpy {np.__version__}"
    try:
        import cupy  # type: ignore[import-not-found]

        props = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception as exc:  # ImportError, or CUDARuntimeError when there is no GPU
        sys.exit(f"--gpu needs CuPy and a CUDA device: {type(exc).__name__}: {exc}")
    name = props["name"].decode()
    return cupy, f"GPU {name} (cc {props['major']}.{props['minor']}), cupy {cupy.__version__}"


def to_host(a: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array."""
    get = getattr(a, "get", None)
    return np.asarray(get() if callable(get) else a)


def sync(xp: ModuleType) -> None:
    """Wait for queued GPU work, so timings measure the work and not its launch."""
    if xp is not np:
        xp.cuda.Device().synchronize()


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def save(path: Path, **arrays: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text())
    return result


class Timer:
    """Seconds since creation, for the one-line summaries each step prints."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return round(time.perf_counter() - self.start, 3)


def evaluate(kind: np.ndarray, fanin: np.ndarray, inputs: np.ndarray, xp: ModuleType = np) -> Any:
    """Bit-parallel logic simulation: ``inputs[i, w]`` holds 64 input vectors per
    uint64 word; returns the value words of every node, shape (nodes, words).

    One node at a time in id order (fanins come first): simulate.py evaluates a whole
    logic level per step instead, and signoff uses this plain form to check it."""
    values = xp.zeros((len(kind), inputs.shape[1]), dtype=xp.uint64)
    values[: len(inputs)] = inputs
    for node in range(len(inputs), len(kind)):
        a = values[fanin[node, 0]]
        b = values[fanin[node, 1]] if fanin[node, 1] >= 0 else a
        values[node] = gate(xp, int(kind[node]), a, b)
    return values


def gate(xp: ModuleType, kind: int, a: Any, b: Any) -> Any:
    """The bitwise function of one gate kind on value words."""
    if kind == BUF:
        return a.copy()
    if kind == NOT:
        return xp.invert(a)
    if kind == AND:
        return a & b
    if kind == OR:
        return a | b
    if kind == NAND:
        return xp.invert(a & b)
    if kind == NOR:
        return xp.invert(a | b)
    if kind == XOR:
        return a ^ b
    raise ValueError(f"gate kind {kind} has no logic function")
