"""An elastic gang on this machine (``spec.fields.elastic``): how large it starts, when it grows, and
what its ranks are told.  Pure: the runner's ``execute.elastic`` acts on the answers.

torchrun's elastic contract (``torchrun --nnodes=MIN:MAX``, torch.distributed.elastic): the
workers rendezvous, and when membership changes every worker is stopped and all start again
with the new WORLD_SIZE and RANK, TORCHELASTIC_RESTART_COUNT one higher; the application
resumes from its checkpoint.  hetflow keeps that contract with containers: a growth stops the
gang's replicas (SIGTERM, then ``stop_grace``) and starts a new attempt with more replicas.
Each replica of an elastic gang sees, besides the launch contract (``replicas``):

- HETFLOW_GANG_MIN, HETFLOW_GANG_MAX: the range (every launcher);
- ``launcher: torch``: PET_NNODES=MIN:MAX (torchrun's ``--nnodes`` as its environment names it),
  TORCHELASTIC_RESTART_COUNT (growths so far), TORCHELASTIC_MAX_RESTARTS (``max - min``: a gang
  only grows, by at least one replica each time) and TORCHELASTIC_RUN_ID (the rendezvous id:
  the run and step, alike over every restart).

These are set on this machine only; Slurm, Ray and the Kubernetes export run an elastic gang
as a fixed gang of ``max`` replicas, so ``LAUNCH_CONTRACT`` (held for every backend) is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.spec import Step

RESIZED = "resized: "  # an attempt's message when it ended to grow (``Attempts.requeue``)


@dataclass(frozen=True)
class Need:
    """CPUs, memory and GPUs: what one replica asks, or what is free."""

    cpus: float
    memory: int
    gpus: int = 0


def with_replicas(step: Step, n: int) -> Step:
    """The step as an attempt of ``n`` replicas runs it (its range kept, ``per_node`` capped)."""
    gang = step.gang
    if gang is None or gang.replicas == n:
        return step
    per_node = None if gang.per_node is None else min(gang.per_node, n)
    # model_copy does not validate: the range (elastic) stays what was written, and n is in it
    return step.model_copy(update={"gang": gang.model_copy(update={"replicas": n, "per_node": per_node})})


def is_gang(step: Step) -> bool:
    """The step runs as a gang's replicas: more than one, or an elastic gang of any size (one
    replica of it still gets the launch contract, to grow from)."""
    return step.gang is not None and (step.replicas > 1 or step.gang.elastic is not None)


def sizes(step: Step) -> list[int]:
    """The sizes to try when an elastic gang starts, largest first; a fixed gang's one size."""
    gang = step.gang
    if gang is None or gang.elastic is None:
        return [step.replicas]
    return list(range(gang.elastic.max, gang.elastic.min - 1, -1))


def grow_to(current: int, most: int, per: Need, free: Need, *, since: float, every: float) -> int:
    """The size a gang of ``current`` replicas grows to now: the largest in (current, most]
    whose added replicas all fit in ``free`` (each needing ``per``), once ``every`` seconds
    have passed ``since`` it started; ``current`` when it does not grow."""
    if current >= most or since < every:
        return current
    room = most - current
    for have, need in ((free.cpus, per.cpus), (float(free.memory), float(per.memory)), (float(free.gpus), per.gpus)):
        if need > 0:
            room = min(room, int(have / need + 1e-9))  # fractional cores add up with rounding error
    return current + max(0, room)


def grow_note(step: str, old: int, new: int, freed: str) -> str:
    """What the run's events say of a growth."""
    return f"gang {step} grows from {old} to {new} replicas ({freed} freed)"


def freed_kind(per: Need) -> str:
    return "GPUs" if per.gpus else "CPUs"


def elastic_env(step: Step, run_id: str, name: str, restarts: int) -> dict[str, str]:
    """What each replica of an elastic gang is told beyond the launch contract (nothing for
    a fixed gang): the range, and under torch torchrun's elastic variables."""
    gang = step.gang
    if gang is None or gang.elastic is None:
        return {}
    lo, hi = gang.elastic.min, gang.elastic.max
    env = {"HETFLOW_GANG_MIN": str(lo), "HETFLOW_GANG_MAX": str(hi)}
    if gang.launcher == "torch":
        env |= {
            "PET_NNODES": f"{lo}:{hi}",
            "TORCHELASTIC_RESTART_COUNT": str(restarts),
            "TORCHELASTIC_MAX_RESTARTS": str(hi - lo),
            "TORCHELASTIC_RUN_ID": f"{run_id}-{name}",
        }
    return env
