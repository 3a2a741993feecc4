"""Step 7 (CPU): sign-off: check, combine and judge the results of the flow.

Equivalence: the ORIGINAL netlist (before synthesis) is evaluated gate by gate, in
plain NumPy, on the first --check-words words of the input vectors that simulate
used, and its outputs must equal what simulate computed on the SYNTHESIZED netlist:
that checks synthesis and simulation against each other.  Then timing (slack),
routing (overflow) and the step summaries go into report.json with a verdict; the
step fails (exit 1) only when equivalence fails, since that means a tool is wrong,
while timing or routing violations are findings for the designer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from common import Timer, evaluate, load, read_json, write_json


def equivalence(original: dict[str, np.ndarray], sim: dict[str, np.ndarray], words: int) -> int:
    """How many (output, vector) pairs differ between the original netlist and the
    simulated synthesized one, over the first ``words`` x 64 vectors."""
    inputs = sim["in_words"][:, :words]
    values = evaluate(original["kind"], original["fanin"], inputs)
    reference = values[original["outputs"]]
    differ = reference ^ sim["out_words"][:, :words]
    return int(np.unpackbits(differ.view(np.uint8)).sum())


def verdict(mismatches: int, timing: dict[str, Any], routing: dict[str, Any]) -> list[str]:
    """The reasons the design does not sign off; empty when it does."""
    problems = []
    if mismatches:
        problems.append(f"{mismatches} output bits differ from the original netlist")
    if timing["worst_slack_ps"] < 0:
        problems.append(
            f"timing: worst slack {timing['worst_slack_ps']} ps at a {timing['clock_ps']} ps "
            f"clock ({timing['failing_outputs']} outputs late)"
        )
    if routing["overflow"] > 0:
        problems.append(f"routing: overflow {routing['overflow']} in {routing['overflowed_gcells']} gcells")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--netlist", type=Path, required=True, help="original netlist .npz")
    parser.add_argument("--synthesis", type=Path, required=True, help="synthesis .json")
    parser.add_argument("--placement", type=Path, required=True, help="placement .json")
    parser.add_argument("--routing", type=Path, required=True, help="routing .json")
    parser.add_argument("--simulation", type=Path, required=True, help="simulation .npz")
    parser.add_argument("--timing", type=Path, required=True, help="timing .json")
    parser.add_argument("--out", type=Path, required=True, help="report.json")
    parser.add_argument("--check-words", type=int, default=16, help="x 64 vectors to check")
    args = parser.parse_args(argv)
    timer = Timer()
    original, sim = load(args.netlist), load(args.simulation)
    words = max(1, min(args.check_words, sim["in_words"].shape[1]))
    mismatches = equivalence(original, sim, words)
    timing, routing = read_json(args.timing), read_json(args.routing)
    problems = verdict(mismatches, timing, routing)
    report = {
        "status": "PASS" if not problems else "FAIL",
        "problems": problems,
        "equivalence": {"vectors_checked": words * 64, "mismatched_bits": mismatches},
        "synthesis": read_json(args.synthesis),
        "placement": read_json(args.placement),
        "routing": routing,
        "timing": timing,
        "seconds": timer(),
    }
    write_json(args.out, report)
    synth = report["synthesis"]
    print(f"signoff: {report['status']}")
    print(f"  gates        {synth['gates_before']} -> {synth['gates_after']}, depth {synth['depth']}")
    print(f"  equivalence  {mismatches} mismatched bits over {words * 64} vectors")
    print(f"  wirelength   {routing['wirelength']} sites, overflow {routing['overflow']}")
    print(f"  timing       critical {timing['critical_ps']} ps, slack {timing['worst_slack_ps']} ps")
    print(f"  placed on    {report['placement']['device']}")
    print(f"  simulated on {timing['device']}")
    for problem in problems:
        print(f"  problem: {problem}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
