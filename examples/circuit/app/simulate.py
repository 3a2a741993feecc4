"""Step 5 (CPU or GPU): logic simulation with random vectors, and static timing.

Logic: --vectors random input vectors, 64 to a uint64 word, so the values of all nodes
form a (nodes x words) matrix that is filled one logic level at a time: each level is
a gather of its fanins' rows and a bitwise op selected per gate.  From that matrix come
each node's signal probability and toggle rate (transitions between consecutive
vectors, counted with a SWAR popcount).

Timing: arrival time at each gate = its delay (intrinsic + per fanout) + the latest of
its fanins' arrival plus the Elmore delay of the routed wire from that fanin, again a
level at a time; the critical path is traced back from the latest output.  All of
this is array code that runs the same on NumPy and CuPy.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from common import (
    AND,
    FANOUT_DELAY,
    GATE_DELAY,
    NAND,
    NOR,
    NOT,
    OR,
    WIRE_LINEAR,
    WIRE_QUADRATIC,
    XOR,
    Timer,
    array_module,
    load,
    save,
    sync,
    to_host,
    write_json,
)

# Switched capacitance per toggle: a gate input pin, and a site of wire (fF).
PIN_CAPACITANCE = 1.0
WIRE_CAPACITANCE = 0.2


def levels(level: np.ndarray) -> list[np.ndarray]:
    """Node ids per logic level, level 1 upwards (level 0 is the primary inputs)."""
    order = np.argsort(level, kind="stable")
    bounds = np.searchsorted(level[order], np.arange(1, level.max() + 2))
    return [order[a:b] for a, b in itertools.pairwise(bounds)]


def logic(xp: ModuleType, net: dict[str, np.ndarray], inputs: np.ndarray) -> Any:
    """The (nodes x words) value matrix for the given input words."""
    kind = xp.asarray(net["kind"])
    fanin = net["fanin"]
    first = xp.asarray(fanin[:, 0])
    second = xp.asarray(np.where(fanin[:, 1] >= 0, fanin[:, 1], fanin[:, 0]))
    values = xp.zeros((len(kind), inputs.shape[1]), dtype=xp.uint64)
    values[: len(inputs)] = xp.asarray(inputs)
    for ids in levels(net["level"]):
        idx = xp.asarray(ids)
        a, b, k = values[first[idx]], values[second[idx]], kind[idx][:, None]
        out = xp.where(k == NOT, ~a, a)  # BUF is the default: synthesis removed them anyway
        out = xp.where(k == AND, a & b, out)
        out = xp.where(k == OR, a | b, out)
        out = xp.where(k == NAND, ~(a & b), out)
        out = xp.where(k == NOR, ~(a | b), out)
        out = xp.where(k == XOR, a ^ b, out)
        values[idx] = out
    return values


def popcount(xp: ModuleType, x: Any) -> Any:
    """Set bits per uint64 element (Hacker's Delight 5-1); NumPy 1.24 in the image has
    no bitwise_count."""
    u = xp.uint64
    x = x - ((x >> u(1)) & u(0x5555555555555555))
    x = (x & u(0x3333333333333333)) + ((x >> u(2)) & u(0x3333333333333333))
    x = (x + (x >> u(4))) & u(0x0F0F0F0F0F0F0F0F)
    return (x * u(0x0101010101010101)) >> u(56)


def activity(xp: ModuleType, values: Any, vectors: int) -> tuple[Any, Any]:
    """(probability of 1, toggle rate between consecutive vectors) per node."""
    u = xp.uint64
    ones = popcount(xp, values).sum(axis=1)
    inside = popcount(xp, (values ^ (values >> u(1))) & u(0x7FFFFFFFFFFFFFFF)).sum(axis=1)
    across = ((values[:, :-1] >> u(63)) ^ (values[:, 1:] & u(1))).sum(axis=1)
    return ones / vectors, (inside + across) / (vectors - 1)


def timing(xp: ModuleType, net: dict[str, np.ndarray], route: dict[str, np.ndarray]) -> tuple[Any, Any, Any]:
    """(arrival time per node, output arrival times, gate delays) in ps."""
    fanin, outputs = net["fanin"], net["outputs"]
    fanout = np.bincount(fanin[fanin >= 0], minlength=len(fanin))
    fanout += np.bincount(outputs, minlength=len(fanin))
    gate_delay = GATE_DELAY[net["kind"]] + FANOUT_DELAY * fanout
    gate_delay[: int(net["n_inputs"])] = 0.0
    wire = route["fanin_wire"]
    wire_delay = xp.asarray(WIRE_LINEAR * wire + WIRE_QUADRATIC * wire**2)
    first, second = xp.asarray(fanin[:, 0]), xp.asarray(fanin[:, 1])
    delay = xp.asarray(gate_delay)
    arrival = xp.zeros(len(fanin), dtype=xp.float64)
    for ids in levels(net["level"]):
        idx = xp.asarray(ids)
        t0 = arrival[first[idx]] + wire_delay[idx, 0]
        s = second[idx]
        t1 = xp.where(s >= 0, arrival[xp.maximum(s, 0)] + wire_delay[idx, 1], -xp.inf)
        arrival[idx] = xp.maximum(t0, t1) + delay[idx]
    out_wire = route["output_wire"]
    out_arrival = arrival[xp.asarray(outputs)] + xp.asarray(WIRE_LINEAR * out_wire + WIRE_QUADRATIC * out_wire**2)
    return arrival, out_arrival, gate_delay


def switched_capacitance(net: dict[str, np.ndarray], routing: dict[str, np.ndarray], toggle: np.ndarray) -> np.ndarray:
    """Capacitance each node charges or discharges per cycle on average (fF): its
    toggle rate times the pins and the wire it drives (dynamic power is this x V^2 f)."""
    fanin, outputs = net["fanin"], net["outputs"]
    used = fanin >= 0
    pins = np.bincount(fanin[used], minlength=len(fanin))
    wire = np.bincount(fanin[used], weights=routing["fanin_wire"][used], minlength=len(fanin))
    wire += np.bincount(outputs, weights=routing["output_wire"], minlength=len(fanin))
    return toggle * (PIN_CAPACITANCE * pins + WIRE_CAPACITANCE * wire)


def critical_path(arrival: np.ndarray, fanin: np.ndarray, wire: np.ndarray, end: int) -> list[int]:
    """Node ids from a primary input to ``end``, following the latest fanin."""
    wire_delay = WIRE_LINEAR * wire + WIRE_QUADRATIC * wire**2
    path = [end]
    while fanin[path[-1], 0] >= 0:
        node = path[-1]
        slots = [s for s in (0, 1) if fanin[node, s] >= 0]
        slot = max(slots, key=lambda s: arrival[fanin[node, s]] + wire_delay[node, s])
        path.append(int(fanin[node, slot]))
    return path[::-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--netlist", type=Path, required=True, help="synthesized .npz")
    parser.add_argument("--routing", type=Path, required=True, help="routing .npz")
    parser.add_argument("--out", type=Path, required=True, help="the simulation .npz")
    parser.add_argument("--report", type=Path, required=True, help="timing .json")
    parser.add_argument("--vectors", type=int, default=65536)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clock", type=float, default=5000.0, help="clock period, ps")
    parser.add_argument("--gpu", action="store_true", help="simulate on CuPy instead of NumPy")
    args = parser.parse_args(argv)
    if args.vectors < 128 or args.vectors % 64:
        parser.error("--vectors must be a multiple of 64, at least 128")
    timer = Timer()
    xp, device = array_module(args.gpu)
    net, routing = load(args.netlist), load(args.routing)
    words = args.vectors // 64
    rng = np.random.default_rng(args.seed)
    inputs = rng.integers(0, 2**64, size=(int(net["n_inputs"]), words), dtype=np.uint64)
    compute = Timer()
    values = logic(xp, net, inputs)
    prob, toggle = activity(xp, values, args.vectors)
    arrival, out_arrival, _ = timing(xp, net, routing)
    sync(xp)
    seconds = compute()
    arrival_h, out_h = to_host(arrival), to_host(out_arrival)
    outputs = net["outputs"]
    worst = int(np.argmax(out_h))
    path = critical_path(arrival_h, net["fanin"], routing["fanin_wire"], int(outputs[worst]))
    toggle_h = to_host(toggle)
    switched = switched_capacitance(net, routing, toggle_h)
    save(args.out, in_words=inputs, out_words=to_host(values[xp.asarray(outputs)]),
         arrival=arrival_h, output_arrival=out_h, probability=to_host(prob),
         toggle=toggle_h, critical_path=np.array(path, dtype=np.int32))  # fmt: skip
    summary = {
        "device": device,
        "vectors": args.vectors,
        "clock_ps": args.clock,
        "critical_ps": round(float(out_h.max()), 2),
        "worst_slack_ps": round(args.clock - float(out_h.max()), 2),
        "failing_outputs": int((out_h > args.clock).sum()),
        "critical_path_gates": len(path) - 1,
        "mean_toggle_rate": round(float(toggle_h[int(net["n_inputs"]) :].mean()), 4),
        "switched_capacitance_fF_per_cycle": round(float(switched.sum()), 1),
        "compute_seconds": seconds,
        "seconds": timer(),
    }
    write_json(args.report, summary)
    print(
        f"simulate: {args.vectors} vectors through {len(net['kind'])} nodes; critical path "
        f"{summary['critical_ps']} ps over {summary['critical_path_gates']} gates, slack "
        f"{summary['worst_slack_ps']} ps at {args.clock} ps; {seconds}s on {device}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
