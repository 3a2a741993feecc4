"""Which queued tasks start now, and why the others wait: a pure function of the queue, what
each user runs, the users' limits and the server's free slots (``hetflow tes queue
--explain`` prints its answer).

Fair share (max-min over running tasks, as a fair-share scheduler with equal weights): the
next task to start is the oldest queued task of the user who runs the fewest tasks and is
under their own limits; ties go to the user whose oldest queued task is older.  So a second
user's tasks start while a first user has hundreds queued."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hetflow.tes.service.config import TesConfig


@dataclass(frozen=True)
class Queued:
    task_id: str
    owner: str
    gpus: int
    seq: int


@dataclass(frozen=True)
class Decision:
    task_id: str
    owner: str
    start: bool
    why: str


def decide(
    queue: Sequence[Queued], running: Mapping[str, tuple[int, int]], config: TesConfig, *, free: int, free_gpus: int
) -> list[Decision]:
    """Every queued task in the order it would start, each with whether it starts now."""
    tasks_of: dict[str, list[Queued]] = {}
    for q in sorted(queue, key=lambda q: q.seq):
        tasks_of.setdefault(q.owner, []).append(q)
    counts = {u: list(running.get(u, (0, 0))) for u in tasks_of}
    out: list[Decision] = []
    while any(tasks_of.values()):
        candidates = [u for u, qs in tasks_of.items() if qs]
        user = min(candidates, key=lambda u: (counts[u][0], tasks_of[u][0].seq))
        head = tasks_of[user].pop(0)
        n, g = counts[user]
        limits = config.limits(user)
        if limits.max_running is not None and n >= limits.max_running:
            out.append(Decision(head.task_id, user, False, f"{user} runs {n} of at most {limits.max_running} tasks"))
            continue
        if limits.max_gpus is not None and g + head.gpus > limits.max_gpus:
            out.append(
                Decision(
                    head.task_id,
                    user,
                    False,
                    f"{user} holds {g} of at most {limits.max_gpus} GPUs; it asks {head.gpus}",
                )
            )
            continue
        if free <= 0:
            out.append(
                Decision(
                    head.task_id,
                    user,
                    False,
                    f"the server runs {config.max_running} tasks (max_running); next for {user}, who runs {n}",
                )
            )
            counts[user][0] += 1  # its turn is taken: the next one goes to whoever runs fewest
            continue
        if head.gpus > free_gpus:
            out.append(Decision(head.task_id, user, False, f"asks {head.gpus} GPUs; {free_gpus} free"))
            continue
        out.append(Decision(head.task_id, user, True, f"starts: {user} runs {n}, the fewest of the users waiting"))
        counts[user][0] += 1
        counts[user][1] += head.gpus
        free -= 1
        free_gpus -= head.gpus
    return out
