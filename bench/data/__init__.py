"""The benchmark's data, carried in the repository so that a clone needs nothing beside it:
the rules (README.md), the HEFT paper's graph (canonical/topcuoglu2002.json) and five
WfInstances traces (wfinstances/, LGPL-3.0: its LICENSE and README say where they come from).
"""

from pathlib import Path

__all__ = ["CANONICAL", "DATA", "TRACES"]

DATA = Path(__file__).resolve().parent
CANONICAL = DATA / "canonical"
TRACES = DATA / "wfinstances"
