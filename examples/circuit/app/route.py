"""Step 4 (CPU): global routing estimate on a grid of routing cells (gcells).

Every two-pin connection is routed as an L: horizontal then vertical, or vertical then
horizontal.  The first pass takes the first shape for all; each later pass prices both
shapes of every connection against the current congestion (the overflow a wire would
add to each gcell it crosses, summed with prefix sums) and takes the cheaper one, as
a negotiated-congestion router would, keeping the best pass.  Output: the horizontal
and vertical usage maps, their overflow over the capacity, and each connection's
length, which simulate turns into wire delay.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import Timer, load, save, write_json
from place import connections


def pin_positions(edges: np.ndarray, xy: np.ndarray, pad_xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Site coordinates of each connection's driver and sink (sinks < 0 are pads)."""
    start = xy[edges[:, 0]]
    is_pad = edges[:, 1] < 0
    end = np.where(is_pad[:, None], pad_xy[np.where(is_pad, -1 - edges[:, 1], 0)],
                   xy[np.maximum(edges[:, 1], 0)])  # fmt: skip
    return start, end


def usage(
    grid: tuple[int, int], start: np.ndarray, end: np.ndarray, vertical_first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(horizontal, vertical) wire counts per gcell for the chosen L shapes, counted
    with difference arrays: +1 where a segment starts, -1 after it ends, then cumsum."""
    rows, cols = grid
    corner_x = np.where(vertical_first, start[:, 0], end[:, 0])
    h_row = np.where(vertical_first, end[:, 1], start[:, 1])
    x0, x1 = np.minimum(start[:, 0], end[:, 0]), np.maximum(start[:, 0], end[:, 0])
    y0, y1 = np.minimum(start[:, 1], end[:, 1]), np.maximum(start[:, 1], end[:, 1])
    h = np.zeros((rows, cols + 1), dtype=np.int64)
    np.add.at(h, (h_row, x0), 1)
    np.add.at(h, (h_row, x1 + 1), -1)
    v = np.zeros((rows + 1, cols), dtype=np.int64)
    np.add.at(v, (y0, corner_x), 1)
    np.add.at(v, (y1 + 1, corner_x), -1)
    return np.cumsum(h, axis=1)[:, :cols], np.cumsum(v, axis=0)[:rows]


def shape_costs(
    h_cost: np.ndarray, v_cost: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The congestion price of (horizontal-first, vertical-first) for each connection:
    sums of a cost map along its segments, each in O(1) from prefix sums."""
    ph = np.concatenate([np.zeros((len(h_cost), 1)), np.cumsum(h_cost, axis=1)], axis=1)
    pv = np.concatenate([np.zeros((1, v_cost.shape[1])), np.cumsum(v_cost, axis=0)], axis=0)
    x0, x1 = np.minimum(start[:, 0], end[:, 0]), np.maximum(start[:, 0], end[:, 0])
    y0, y1 = np.minimum(start[:, 1], end[:, 1]), np.maximum(start[:, 1], end[:, 1])

    def along_row(row: np.ndarray) -> np.ndarray:
        return ph[row, x1 + 1] - ph[row, x0]

    def along_column(col: np.ndarray) -> np.ndarray:
        return pv[y1 + 1, col] - pv[y0, col]

    horizontal_first = along_row(start[:, 1]) + along_column(end[:, 0])
    vertical_first = along_column(start[:, 0]) + along_row(end[:, 1])
    return horizontal_first, vertical_first


def overflow(h: np.ndarray, v: np.ndarray, capacity: int) -> int:
    return int(np.maximum(h - capacity, 0).sum() + np.maximum(v - capacity, 0).sum())


def route(
    start: np.ndarray,
    end: np.ndarray,
    grid: tuple[int, int],
    capacity: int,
    passes: int,
    batches: int = 16,
) -> tuple[np.ndarray, list[int]]:
    """The chosen shapes (True = vertical first) and the overflow after each pass.

    A pass rips up and reroutes the connections a batch at a time: the batch's wires
    are taken off the usage maps, each is priced against what the others use, and the
    cheaper shape goes back on.  Rerouting all at once would make every connection
    flee the same hot spot together and oscillate."""
    choice = np.zeros(len(start), dtype=bool)
    h, v = usage(grid, start, end, choice)
    history = [overflow(h, v, capacity)]
    best = choice.copy()
    order = np.random.default_rng(0).permutation(len(start))
    for _ in range(passes - 1):
        for batch in np.array_split(order, batches):
            bh, bv = usage(grid, start[batch], end[batch], choice[batch])
            h, v = h - bh, v - bv
            # Price: the overflow one more wire would meet, plus a little for any
            # use, so that ties go to the emptier side.
            h_cost = np.maximum(h + 1 - capacity, 0) + h / (4.0 * capacity)
            v_cost = np.maximum(v + 1 - capacity, 0) + v / (4.0 * capacity)
            first, second = shape_costs(h_cost, v_cost, start[batch], end[batch])
            choice[batch] = second < first
            bh, bv = usage(grid, start[batch], end[batch], choice[batch])
            h, v = h + bh, v + bv
        history.append(overflow(h, v, capacity))
        if history[-1] <= min(history):
            best = choice.copy()
    return best, history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--netlist", type=Path, required=True, help="synthesized .npz")
    parser.add_argument("--placement", type=Path, required=True, help="placement .npz")
    parser.add_argument("--out", type=Path, required=True, help="the routing .npz")
    parser.add_argument("--report", type=Path, required=True, help="a .json summary")
    parser.add_argument("--gcell", type=int, default=4, help="gcell size in sites")
    parser.add_argument("--capacity", type=int, default=48, help="tracks per gcell and direction")
    parser.add_argument("--passes", type=int, default=4)
    args = parser.parse_args(argv)
    timer = Timer()
    net, placed = load(args.netlist), load(args.placement)
    edges = connections(net["fanin"], int(net["n_inputs"]), net["outputs"])
    start, end = pin_positions(edges, placed["xy"], placed["pad_xy"])
    width, height = (int(d) for d in placed["die"])
    grid = (-(-height // args.gcell), -(-width // args.gcell))
    choice, history = route(start // args.gcell, end // args.gcell, grid, args.capacity,
                            max(args.passes, 1))  # fmt: skip
    h, v = usage(grid, start // args.gcell, end // args.gcell, choice)
    length = np.abs(start - end).sum(axis=1)
    inner = edges[:, 1] >= 0
    fanin_wire = np.zeros(net["fanin"].shape, dtype=np.float64)
    used = (net["fanin"] >= 0).reshape(-1)
    fanin_wire.reshape(-1)[used] = length[inner]  # connections() lists them in this order
    save(args.out, husage=h, vusage=v, capacity=np.array(args.capacity),
         fanin_wire=fanin_wire, output_wire=length[~inner].astype(np.float64))  # fmt: skip
    summary = {
        "gcells": list(grid),
        "capacity": args.capacity,
        "connections": len(edges),
        "wirelength": int(length.sum()),
        "max_usage": int(max(h.max(), v.max())),
        "overflow": history[int(np.argmin(history))],
        "overflow_by_pass": history,
        "overflowed_gcells": int(((h > args.capacity) | (v > args.capacity)).sum()),
        "vertical_first": int(choice.sum()),
        "seconds": timer(),
    }
    write_json(args.report, summary)
    print(
        f"route: {len(edges)} connections on {grid[1]}x{grid[0]} gcells, wirelength "
        f"{summary['wirelength']}, max usage {summary['max_usage']}/{args.capacity}, "
        f"overflow by pass {history}, in {summary['seconds']}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
