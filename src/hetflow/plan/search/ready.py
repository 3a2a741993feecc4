"""When a task's inputs can be on each machine, kept as its parents are placed.

A list pass asks for a task's ready times once per candidate it weighs, and the lookahead
asks for a child's with its parent placed for a moment.  Computed from the parents each time,
a gather step of 2,000 items cost 2,000 parents per question, 2,000 times a pass: quadratic
(a 2,000-item ``foreach:`` spent most of its plan there).  ``ReadyTimes`` keeps per task the
latest finish of its placed parents per machine and the latest arrival from each machine, and
updates them in O(1) per edge when a parent is placed; a placement made for a moment is
undone exactly (``mark``/``undo``).
"""

from __future__ import annotations

from collections.abc import Sequence

# (task, machine, its previous latest finish there, previous arrival from there, previous remote)
_Undo = tuple[int, int, float | None, float | None, float]


class ReadyTimes:
    """Per task: ``remote`` (the latest arrival of a placed parent's data on a machine that
    holds none of them), ``local`` (machine -> latest finish of a parent placed there) and
    ``via`` (machine -> latest arrival elsewhere of a parent's data from there)."""

    def __init__(self, children: Sequence[Sequence[tuple[int, float]]]) -> None:
        n = len(children)
        self.children = children
        self.remote = [0.0] * n
        self.local: list[dict[int, float]] = [{} for _ in range(n)]
        self.via: list[dict[int, float]] = [{} for _ in range(n)]
        self._trail: list[_Undo] | None = None

    def placed(self, t: int, machine: int, finish: float) -> None:
        """``t`` now finishes at ``finish`` on ``machine``: its children learn it."""
        trail = self._trail
        for c, comm in self.children[t]:
            local, via = self.local[c], self.via[c]
            v = finish + comm
            if trail is not None:
                trail.append((c, machine, local.get(machine), via.get(machine), self.remote[c]))
            if finish > local.get(machine, -1.0):
                local[machine] = finish
            if v > via.get(machine, -1.0):
                via[machine] = v
            if v > self.remote[c]:
                self.remote[c] = v

    def mark(self) -> None:
        """Placements from now on are for a moment: ``undo`` takes them back."""
        self._trail = []

    def undo(self) -> None:
        trail, self._trail = self._trail or [], None
        for c, m, local, via, remote in reversed(trail):
            if local is None:
                del self.local[c][m]
            else:
                self.local[c][m] = local
            if via is None:
                del self.via[c][m]
            else:
                self.via[c][m] = via
            self.remote[c] = remote

    def of(self, t: int) -> tuple[float, dict[int, float]]:
        """When the inputs of ``t`` can be on a machine that holds none of its placed parents,
        and on each machine that holds some (those inputs need no transfer there)."""
        remote, local, via = self.remote[t], self.local[t], self.via[t]
        if len(via) <= 1:
            return remote, dict(local)
        # The arrival from the other machines is the largest ``via`` except the machine's own.
        ranked = sorted(via.items(), key=lambda kv: -kv[1])
        (m1, v1), (_m2, v2) = ranked[0], ranked[1]
        near = {m: max(f, v2 if m == m1 else v1) for m, f in local.items()}
        return remote, {m: r for m, r in sorted(near.items())}
