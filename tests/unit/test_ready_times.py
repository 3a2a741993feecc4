"""The planner's ready times, kept as parents are placed (``plan.search.ready``), equal the
ones computed from every parent each time (what the list pass did before: quadratic on a
gather of thousands of items), through placements for a moment and their undoing."""

from __future__ import annotations

import random

from hetflow.plan.search.ready import ReadyTimes


def scanned(parents: list[tuple[int, float]], placed: dict[int, tuple[int, float]]) -> tuple[float, dict[int, float]]:
    """The ready times of a task from its parents, as the list pass computed them before."""
    remote, local, via = 0.0, dict[int, float](), dict[int, float]()
    for p, comm in parents:
        if p not in placed:
            continue
        m, f = placed[p]
        local[m] = max(local.get(m, -1.0), f)
        via[m] = max(via.get(m, -1.0), f + comm)
        remote = max(remote, f + comm)
    if len(via) <= 1:
        return remote, local
    ranked = sorted(via.values(), reverse=True)
    v1, v2 = ranked[0], ranked[1]
    m1 = max(via, key=lambda m: via[m])
    return remote, {m: max(f, v2 if m == m1 else v1) for m, f in sorted(local.items())}


def test_kept_ready_times_equal_a_scan_of_the_parents_through_moments_and_undos() -> None:
    rnd = random.Random(7)
    for _ in range(40):
        n = rnd.randint(2, 40)
        parents: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        children: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for c in range(1, n):
            for p in rnd.sample(range(c), k=min(c, rnd.choice([0, 1, 2, 5, c]))):
                comm = rnd.choice([0.0, 1.5, 7.0])
                parents[c].append((p, comm))
                children[p].append((c, comm))
        kept, placed = ReadyTimes(children), dict[int, tuple[int, float]]()
        for t in range(n):  # in topological order, as a pass places them
            for c, _ in children[t]:  # the lookahead: t placed for a moment, then taken back
                m, f = rnd.randrange(4), rnd.choice([1.0, 2.0, 3.0]) * rnd.randint(1, 9)
                kept.mark()
                kept.placed(t, m, f)
                assert kept.of(c) == scanned(parents[c], {**placed, t: (m, f)})
                kept.undo()
                assert kept.of(c) == scanned(parents[c], placed)
            m, f = rnd.randrange(4), float(rnd.randint(1, 50))  # ties between machines happen
            kept.placed(t, m, f)
            placed[t] = (m, f)
            for u in range(n):
                assert kept.of(u) == scanned(parents[u], placed), (t, u)


def test_a_gather_of_thousands_learns_each_placed_item_once() -> None:
    # 3,000 items feed one gather: placing them all costs one update each, and the gather's
    # ready time is the latest arrival, with no parent read again
    items = 3000
    children = [[(items, 2.0)] for _ in range(items)] + [[]]
    kept = ReadyTimes(children)
    for i in range(items):
        kept.placed(i, i % 3, float(i))
    remote, near = kept.of(items)
    # the last item (2,999) ends on machine 2: its data reaches the others at 3,001; machine 2
    # holds it, so it waits only for machine 1's last item (2,998 + 2)
    assert remote == items + 1.0
    assert near == {0: items + 1.0, 1: items + 1.0, 2: items + 0.0}
