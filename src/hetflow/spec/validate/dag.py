"""DAG helpers over a workflow's steps: order, cycles, descendants."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle as ``[a, b, c, a]`` (each needs the next... read as a -> b: a needs b),
    or None.  ``edges`` maps a step to the steps it depends on; unknown names are ignored."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(edges, white)
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        color[n] = grey
        stack.append(n)
        for m in edges.get(n, ()):
            if m not in color:
                continue
            if color[m] == grey:
                return [*stack[stack.index(m) :], m]
            if color[m] == white:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        color[n] = black
        return None

    for n in edges:
        if color[n] == white:
            found = visit(n)
            if found:
                return found
    return None


def topo_order(edges: Mapping[str, Sequence[str]]) -> list[str]:
    """Steps so that every step comes after what it depends on; ties keep file order."""
    order: list[str] = []
    done: set[str] = set()

    def visit(n: str) -> None:
        if n in done:
            return
        done.add(n)
        for m in edges.get(n, ()):
            if m in edges:
                visit(m)
        order.append(n)

    for n in edges:
        visit(n)
    return order


def children(edges: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {n: [] for n in edges}
    for n, deps in edges.items():
        for d in deps:
            if d in out:
                out[d].append(n)
    return out


def descendants(edges: Mapping[str, Sequence[str]], start: str) -> set[str]:
    kids = children(edges)
    seen: set[str] = set()
    todo = [start]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return seen
