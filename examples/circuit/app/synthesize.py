"""Step 2 (CPU): simplify and levelize the netlist.

Rewrites, applied in one topological pass (every rewrite points a node at an earlier
one, so the order stays topological):
  - a buffer is replaced by its input;
  - an inverter of an inverter is replaced by the original signal;
  - AND/OR of a signal with itself is the signal, NAND/NOR of it is its inverse;
  - structural hashing: a gate with the same kind and inputs as an earlier gate is
    replaced by that gate (inputs of commutative gates are sorted first);
then every node that no primary output depends on is dropped, the rest renumbered,
and each gate gets its logic level (longest path from a primary input).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import (
    AND,
    BUF,
    COMMUTATIVE,
    GATES,
    NAND,
    NOR,
    NOT,
    OR,
    Timer,
    load,
    save,
    write_json,
)


def simplify(
    kind: np.ndarray, fanin: np.ndarray, n_inputs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(new kind, new fanin, representative of each old node, rewrite counts); the
    arrays keep the old numbering, gates replaced by others are left in place."""
    kind = kind.copy()
    fanin = fanin.copy()
    rep = np.arange(len(kind))
    seen: dict[tuple[int, int, int], int] = {}
    counts = {"buffers": 0, "double_inverters": 0, "self_inputs": 0, "merged": 0}
    for node in range(n_inputs, len(kind)):
        a = int(rep[fanin[node, 0]])
        b = int(rep[fanin[node, 1]]) if fanin[node, 1] >= 0 else -1
        k = int(kind[node])
        if k == BUF:
            rep[node], counts["buffers"] = a, counts["buffers"] + 1
            continue
        if a == b and k in (AND, OR):
            rep[node], counts["self_inputs"] = a, counts["self_inputs"] + 1
            continue
        if a == b and k in (NAND, NOR):
            k, b = NOT, -1
            counts["self_inputs"] += 1
        if k == NOT and kind[a] == NOT:
            rep[node] = fanin[a, 0]
            counts["double_inverters"] += 1
            continue
        if k in COMMUTATIVE:
            a, b = min(a, b), max(a, b)
        kind[node], fanin[node] = k, (a, b)
        earlier = seen.setdefault((k, a, b), node)
        if earlier != node:
            rep[node] = earlier
            counts["merged"] += 1
    return kind, fanin, rep, counts


def live_nodes(fanin: np.ndarray, n_inputs: int, outputs: np.ndarray) -> np.ndarray:
    """A mask of the nodes some output depends on; primary inputs always stay (they
    are the block's interface, used or not)."""
    live = np.zeros(len(fanin), dtype=bool)
    live[:n_inputs] = True
    live[outputs] = True
    for node in range(len(fanin) - 1, n_inputs - 1, -1):  # fanins come before gates
        if live[node]:
            live[fanin[node][fanin[node] >= 0]] = True
    return live


def levelize(fanin: np.ndarray, n_inputs: int) -> np.ndarray:
    level = np.zeros(len(fanin), dtype=np.int32)
    for node in range(n_inputs, len(fanin)):
        level[node] = 1 + level[fanin[node][fanin[node] >= 0]].max()
    return level


def synthesize(net: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    n_inputs = int(net["n_inputs"])
    kind, fanin, rep, counts = simplify(net["kind"], net["fanin"], n_inputs)
    outputs = rep[net["outputs"]]
    # Gates that were replaced are referenced by no one, so they are not live either.
    live = live_nodes(fanin, n_inputs, outputs)
    new_id = np.cumsum(live) - 1
    kept = np.flatnonzero(live)
    new_fanin = np.where(fanin[kept] >= 0, new_id[np.maximum(fanin[kept], 0)], -1)
    counts["dead"] = int((rep == np.arange(len(rep))).sum() - live.sum())
    result = {
        "kind": kind[kept],
        "fanin": new_fanin.astype(np.int32),
        "n_inputs": np.array(n_inputs),
        "outputs": new_id[outputs].astype(np.int32),
        "level": levelize(new_fanin, n_inputs),
        "origin": kept.astype(np.int32),
    }
    return result, counts


def gate_counts(kind: np.ndarray) -> dict[str, int]:
    counts = np.bincount(kind, minlength=len(GATES))
    return {GATES[k]: int(counts[k]) for k in range(1, len(GATES)) if counts[k]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--in", dest="inp", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the synthesized .npz")
    parser.add_argument("--report", type=Path, required=True, help="a .json summary")
    args = parser.parse_args(argv)
    timer = Timer()
    net = load(args.inp)
    result, rewrites = synthesize(net)
    save(args.out, **result)
    n_inputs = int(net["n_inputs"])
    summary = {
        "gates_before": len(net["kind"]) - n_inputs,
        "gates_after": len(result["kind"]) - n_inputs,
        "kinds_before": gate_counts(net["kind"]),
        "kinds_after": gate_counts(result["kind"]),
        "rewrites": rewrites,
        "depth": int(result["level"].max()),
        "seconds": timer(),
    }
    write_json(args.report, summary)
    print(
        f"synthesize: {summary['gates_before']} -> {summary['gates_after']} gates "
        f"(removed {rewrites['buffers']} buffers, {rewrites['double_inverters']} double "
        f"inverters, merged {rewrites['merged']}, {rewrites['dead']} dead), depth "
        f"{summary['depth']}, in {summary['seconds']}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
