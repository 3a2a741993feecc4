"""Which of a node's free GPUs a step (or each replica of a gang) gets: topology first.

A replica's GPUs talk to each other most, so they should share NVLink, then one PCIe
switch, then one NUMA node (the order of ``nvidia-smi topo -m``'s legend, nearest first).
The pick is greedy: each replica's set grows from a seed GPU by adding the free GPU best
joined to those already in it; every seed is tried and the best-joined set kept; replicas
are served in turn.  ``need`` makes a link a hard rule (``gang.gpu_link``): ``nvlink``
(every pair in a set joined by NVLink) or ``same-numa`` (one NUMA node); with ``any`` the
same preference decides but nothing is refused.  On a node with no known topology every
pair scores alike, so the pick is the lowest free indices, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetflow.inventory import Gpu, Node

# A link's score, nearest first: NVLink (more links better), one PCIe switch, several,
# a host bridge, across bridges inside a NUMA node, across NUMA nodes; unknown as SYS.
_PCIE = {"PIX": 40, "PXB": 30, "PHB": 20, "NODE": 10, "SYS": 0, "": 0}


def link_score(node: Node, a: Gpu, b: Gpu) -> int:
    cell = node.link(a.index, b.index)
    score = 100 + int(cell[2:] or 0) if cell.startswith("NV") else _PCIE.get(cell, 0)
    if a.numa_node is not None and a.numa_node == b.numa_node:
        score += 5
    return score


def _ok(node: Node, group: Sequence[Gpu], gpu: Gpu, need: str) -> bool:
    if need == "nvlink":
        return all(node.nvlinked(gpu.index, g.index) for g in group)
    if need == "same-numa":
        return all(g.numa_node is not None and g.numa_node == gpu.numa_node for g in group)
    return True


def _grow(node: Node, seed: Gpu, pool: Sequence[Gpu], size: int, need: str) -> tuple[int, list[Gpu]] | None:
    group = [seed]
    total = 0
    rest = [g for g in pool if g.uuid != seed.uuid]
    while len(group) < size:
        best: tuple[int, int, Gpu] | None = None
        for g in rest:
            if not _ok(node, group, g, need):
                continue
            gain = sum(link_score(node, g, h) for h in group)
            if best is None or (gain, -g.index) > best[:2]:
                best = (gain, -g.index, g)
        if best is None:
            return None
        total += best[0]
        group.append(best[2])
        rest = [g for g in rest if g.uuid != best[2].uuid]
    if need == "same-numa" and seed.numa_node is None:
        return None
    return total, group


def pick_gpus(node: Node, free: Sequence[Gpu], replicas: int, per_replica: int, need: str = "any") -> list[Gpu] | None:
    """``replicas`` sets of ``per_replica`` GPUs from ``free``, concatenated in replica
    order (replica i gets ``[i * per_replica, (i + 1) * per_replica)``); None when the free
    GPUs cannot make the sets under ``need``."""
    if per_replica <= 0:
        return []
    pool = sorted(free, key=lambda g: g.index)
    out: list[Gpu] = []
    for _ in range(replicas):
        best: tuple[int, list[Gpu]] | None = None
        for seed in pool:
            grown = _grow(node, seed, pool, per_replica, need)
            if grown is not None and (best is None or grown[0] > best[0]):
                best = grown
        if best is None:
            return None
        group = sorted(best[1], key=lambda g: g.index)
        out += group
        taken = {g.uuid for g in group}
        pool = [g for g in pool if g.uuid not in taken]
    return out
