"""Step 1 (CPU): generate a random gate-level netlist from a seed.

Each gate takes its fanins mostly from the few hundred nodes just before it (local
logic, which gives the netlist depth) and sometimes from anywhere earlier (long
wires).  Buffers and inverters are included on purpose: a real netlist from a
front end has them, and synthesize removes the redundant ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import AND, BUF, GATES, INPUT, NAND, NOR, NOT, ONE_INPUT, OR, XOR, Timer, save

# How often each gate kind is drawn.
MIX = {BUF: 0.08, NOT: 0.14, AND: 0.2, OR: 0.18, NAND: 0.16, NOR: 0.1, XOR: 0.14}
LOCAL_WINDOW = 200
LONG_WIRE = 0.15


def generate(seed: int, gates: int, inputs: int, outputs: int) -> dict[str, np.ndarray]:
    """The netlist arrays (see common.py): primary inputs first, then the gates."""
    rng = np.random.default_rng(seed)
    nodes = inputs + gates
    ids = np.arange(inputs, nodes)
    kinds = np.array(list(MIX), dtype=np.int8)
    kind = np.concatenate([np.full(inputs, INPUT, np.int8), rng.choice(kinds, gates, p=list(MIX.values()))])
    fanin = np.full((nodes, 2), -1, dtype=np.int32)
    for column in (0, 1):
        span = np.minimum(ids, LOCAL_WINDOW)
        local = ids - 1 - (rng.random(gates) * span).astype(np.int64)
        anywhere = (rng.random(gates) * ids).astype(np.int64)
        fanin[inputs:, column] = np.where(rng.random(gates) < LONG_WIRE, anywhere, local)
    # Two distinct fanins per two-input gate (ids >= inputs >= 2, so a neighbour exists).
    gate_fanin = fanin[inputs:]
    same = gate_fanin[:, 0] == gate_fanin[:, 1]
    gate_fanin[same, 1] = np.where(gate_fanin[same, 0] > 0, gate_fanin[same, 0] - 1, 1)
    fanin[np.isin(kind, ONE_INPUT), 1] = -1
    return {
        "kind": kind,
        "fanin": fanin,
        "n_inputs": np.array(inputs),
        "outputs": np.arange(nodes - outputs, nodes, dtype=np.int32),
        "seed": np.array(seed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gates", type=int, default=6000)
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--outputs", type=int, default=32)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.inputs < 2 or not 1 <= args.outputs <= args.gates:
        parser.error("need --inputs >= 2 and 1 <= --outputs <= --gates")
    timer = Timer()
    netlist = generate(args.seed, args.gates, args.inputs, args.outputs)
    save(args.out, **netlist)
    counts = np.bincount(netlist["kind"], minlength=len(GATES))
    mix = ", ".join(f"{GATES[k]} {counts[k]}" for k in range(1, len(GATES)))
    print(
        f"netlist: seed {args.seed}: {args.inputs} inputs, {args.gates} gates ({mix}), "
        f"{args.outputs} outputs -> {args.out} in {timer()}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
