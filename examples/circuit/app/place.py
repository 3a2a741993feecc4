"""Step 3 (CPU or GPU): analytic quadratic placement, then spreading onto sites.

Primary inputs are pads on the left edge of the die, primary outputs pads on the
right edge.  Every connection (fanin -> gate, output gate -> pad) is a spring; the
gate positions that minimise the total squared spring length solve L x = b, with L the
Laplacian of the connections among gates and b the pull of the pads: solved for x and
for y with Jacobi-preconditioned conjugate gradients.  The matrix is never formed:
its product with a vector is a gather and two scatter-adds (bincount), which run the
same on NumPy and CuPy.  Quadratic placement piles cells up in the middle, so the
result is spread by rank onto a grid of sites (columns by x, then rows by y within
each column) at about 70% utilisation, which keeps the relative order of the cells.
As in SimPL (Kim, Lee, Markov, ISPD 2010), this repeats for --rounds rounds: each
solve adds springs of growing stiffness pulling every cell toward its spread site, so
the solution approaches a legal one while wirelength stays low.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from common import Timer, array_module, load, save, sync, to_host, write_json

UTILISATION = 0.7


def connections(fanin: np.ndarray, n_inputs: int, outputs: np.ndarray) -> np.ndarray:
    """Every two-pin connection as (driver node, sink); a sink of -1 - p is output pad p."""
    sinks = np.repeat(np.arange(len(fanin)), 2)
    drivers = fanin.reshape(-1)
    used = drivers >= 0
    edges = np.stack([drivers[used], sinks[used]], axis=1)
    pads = np.stack([outputs, -1 - np.arange(len(outputs))], axis=1)
    return np.concatenate([edges, pads]).astype(np.int64)


def die_and_pads(n_gates: int, n_inputs: int, n_outputs: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(width, height, input pad xy, output pad xy): gates fill columns 1..width-2,
    pads sit in columns 0 and width-1, spread evenly over the height."""
    side = max(2, math.ceil(math.sqrt(n_gates / UTILISATION)))
    width, height = side + 2, side
    in_y = (np.arange(n_inputs) + 0.5) * height / n_inputs
    out_y = (np.arange(n_outputs) + 0.5) * height / n_outputs
    in_xy = np.stack([np.zeros(n_inputs), in_y], axis=1)
    out_xy = np.stack([np.full(n_outputs, width - 1.0), out_y], axis=1)
    return width, height, in_xy, out_xy


def pcg(xp: ModuleType, matvec: Callable[[Any], Any], b: Any, diag: Any, tol: float = 1e-8) -> tuple[Any, int]:
    """Conjugate gradients with a Jacobi preconditioner for the SPD system A x = b.
    Dot products are written as sums of products: on CuPy that is a reduction kernel,
    where ``dot`` would need cuBLAS, which the image leaves out."""
    x = b / diag
    r = b - matvec(x)
    z = r / diag
    p = z.copy()
    rz = float((r * z).sum())
    limit = tol * float(xp.sqrt((b * b).sum()))
    for iteration in range(1, 10 * len(b) + 1):
        ap = matvec(p)
        alpha = rz / float((p * ap).sum())
        x += alpha * p
        r -= alpha * ap
        if float(xp.sqrt((r * r).sum())) <= limit:
            return x, iteration
        z = r / diag
        rz, rz_old = float((r * z).sum()), rz
        p = z + (rz / rz_old) * p
    return x, iteration


def quadratic(
    xp: ModuleType,
    edges: np.ndarray,
    n_inputs: int,
    n_nodes: int,
    pads: Any,
    anchors: Any = None,
    stiffness: float = 0.0,
) -> tuple[Any, list[int]]:
    """Gate positions (gates x 2) minimising the squared connection lengths, plus
    stiffness times the squared distances to the anchors when given."""
    n_gates = n_nodes - n_inputs
    driver, sink = edges[:, 0], edges[:, 1]
    inner = (driver >= n_inputs) & (sink >= n_inputs)
    u = xp.asarray(driver[inner] - n_inputs)
    v = xp.asarray(sink[inner] - n_inputs)
    # Connections to a pad: the gate end moves, the pad end is fixed.  (An input pad
    # wired straight to an output pad has no gate end and pulls on nothing.)
    from_pad = (driver < n_inputs) & (sink >= 0)
    to_pad = (sink < 0) & (driver >= n_inputs)
    gate_end = np.concatenate([sink[from_pad], driver[to_pad]]) - n_inputs
    pad_index = np.concatenate([driver[from_pad], n_inputs + (-1 - sink[to_pad])])
    m = xp.asarray(gate_end)
    fixed = xp.asarray(pads)[xp.asarray(pad_index)]
    degree = xp.bincount(u, minlength=n_gates) + xp.bincount(v, minlength=n_gates)
    # A tiny anchor keeps L positive definite even for a gate with no path to a pad.
    diag = (degree + xp.bincount(m, minlength=n_gates)).astype(xp.float64) + 1e-9 + stiffness

    def matvec(x: Any) -> Any:
        pulled = xp.bincount(u, weights=x[v], minlength=n_gates)
        pulled += xp.bincount(v, weights=x[u], minlength=n_gates)
        return diag * x - pulled

    result = xp.empty((n_gates, 2), dtype=xp.float64)
    iterations = []
    for axis in (0, 1):
        b = xp.bincount(m, weights=fixed[:, axis], minlength=n_gates)
        if anchors is not None:
            b += stiffness * anchors[:, axis]
        result[:, axis], steps = pcg(xp, matvec, b, diag)
        iterations.append(steps)
    return result, iterations


def simpl(
    xp: ModuleType, edges: np.ndarray, n_inputs: int, n_nodes: int, pads: Any, size: Any, rounds: int
) -> tuple[Any, Any, list[dict[str, Any]]]:
    """(quadratic positions, sites, per-round history) after the given anchor rounds."""
    width, height = size
    glob, steps = quadratic(xp, edges, n_inputs, n_nodes, pads)
    sites = spread(xp, glob, width, height)
    history = [{"stiffness": 0.0, "cg_iterations": steps}]
    for round_ in range(1, rounds + 1):
        stiffness = 0.02 * 2.0**round_  # SimPL grows the anchor weight geometrically
        glob, steps = quadratic(xp, edges, n_inputs, n_nodes, pads, sites, stiffness)
        sites = spread(xp, glob, width, height)
        history.append({"stiffness": stiffness, "cg_iterations": steps})
    return glob, sites, history


def argsort(xp: ModuleType, a: Any) -> Any:
    # CuPy's argsort is always stable and takes no kind; NumPy's must be asked.
    return np.argsort(a, kind="stable") if xp is np else xp.argsort(a)


def spread(xp: ModuleType, xy: Any, width: int, height: int) -> Any:
    """Integer sites (columns 1..width-2, rows 0..height-1), one cell per site: cells
    are dealt into columns by x rank, then spread over the rows by y rank."""
    n, columns = len(xy), width - 2
    column = xp.empty(n, dtype=xp.int64)
    column[argsort(xp, xy[:, 0])] = xp.arange(n) * columns // n
    y = xy[:, 1]
    y01 = (y - y.min()) / (float(y.max() - y.min()) + 1e-12) * 0.999
    order = argsort(xp, column + y01)
    count = xp.bincount(column, minlength=columns)
    first = xp.cumsum(count) - count
    rank = xp.arange(n) - first[column[order]]
    sites = xp.empty((n, 2), dtype=xp.int64)
    sites[order, 0] = column[order] + 1
    sites[order, 1] = rank * height // count[column[order]]
    return sites


def wirelength(xy: np.ndarray, pad_xy: np.ndarray, edges: np.ndarray) -> float:
    """Total Manhattan length of the two-pin connections (= their HPWL)."""
    start = xy[edges[:, 0]]
    end = np.where((edges[:, 1] >= 0)[:, None], xy[np.maximum(edges[:, 1], 0)],
                   pad_xy[-1 - np.minimum(edges[:, 1], -1)])  # fmt: skip
    return float(np.abs(start - end).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--in", dest="inp", type=Path, required=True, help="synthesized .npz")
    parser.add_argument("--out", type=Path, required=True, help="the placement .npz")
    parser.add_argument("--report", type=Path, required=True, help="a .json summary")
    parser.add_argument("--rounds", type=int, default=6, help="anchoring rounds (SimPL)")
    parser.add_argument("--gpu", action="store_true", help="solve on CuPy instead of NumPy")
    args = parser.parse_args(argv)
    timer = Timer()
    xp, device = array_module(args.gpu)
    net = load(args.inp)
    n_inputs, n_nodes = int(net["n_inputs"]), len(net["kind"])
    edges = connections(net["fanin"], n_inputs, net["outputs"])
    width, height, in_xy, out_xy = die_and_pads(n_nodes - n_inputs, n_inputs, len(net["outputs"]))
    compute = Timer()
    pads = np.concatenate([in_xy, out_xy])
    glob, sites, history = simpl(xp, edges, n_inputs, n_nodes, pads, (width, height), args.rounds)
    sync(xp)
    seconds = compute()
    pad_xy = np.rint(out_xy).astype(np.int32)
    xy = np.concatenate([np.rint(in_xy), to_host(sites)]).astype(np.int32)
    xy_global = np.concatenate([in_xy, to_host(glob)])
    save(args.out, xy=xy, pad_xy=pad_xy, die=np.array([width, height]), xy_global=xy_global)
    summary = {
        "device": device,
        "die": [width, height],
        "gates": n_nodes - n_inputs,
        "connections": len(edges),
        "rounds": history,
        "wirelength_global": round(wirelength(xy_global, out_xy, edges), 1),
        "wirelength_legal": wirelength(xy.astype(np.float64), pad_xy, edges),
        "compute_seconds": seconds,
        "seconds": timer(),
    }
    write_json(args.report, summary)
    steps = sum(sum(h["cg_iterations"]) for h in history)
    print(
        f"place: {summary['gates']} gates on a {width}x{height} die, {args.rounds} rounds, "
        f"{steps} CG iterations, wirelength {summary['wirelength_global']} (quadratic) -> "
        f"{summary['wirelength_legal']:.0f} (on sites); {seconds}s on {device}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
