"""An elastic gang: ``gang: {replicas: {min: 2, max: 4}, launcher: torch}``.

The gang starts with as many replicas as fit when it is ready (at least ``min``, at most
``max``) and grows towards ``max`` when capacity frees up, as torchrun's ``--nnodes=MIN:MAX``
admits new workers: the ranks are stopped (SIGTERM, ``stop_grace``) and started again with
the larger world, as a new attempt outside the step's retries, and the application resumes
from its own checkpoint.  So an elastic gang must say ``checkpoint: {mode: app}``: it saves
its state under ``$HETFLOW_CHECKPOINT_DIR`` and resumes from there, or a growth loses its work.

What every other stage reads is unchanged: ``Gang.replicas`` is the size to plan for, the
``max`` (the planner, Slurm, Ray and the Kubernetes export run an elastic gang as a fixed
gang of ``max`` replicas); ``Gang.elastic`` holds the range.  Written out (a run's stored
spec) the gang reads ``replicas: 4, elastic: {min: 2, max: 4}``, which validates back alike.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetflow.spec.fields.checkpoint import Checkpoint

MAX_REPLICAS = 1024
HINT = "write replicas: N (a fixed gang) or replicas: {min: M, max: N} with 1 <= M <= N <= 1024"


class Elastic(BaseModel):
    """The range of an elastic gang's size: ``min`` replicas to start, ``max`` to grow to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min: int = Field(ge=1, le=MAX_REPLICAS, description="replicas the gang starts with at least")
    max: int = Field(ge=1, le=MAX_REPLICAS, description="replicas the gang grows to at most")

    @model_validator(mode="after")
    def _ordered(self) -> Elastic:
        if self.min >= self.max:
            raise ValueError(
                f"replicas: {{min: {self.min}, max: {self.max}}} leaves nothing to grow: min must be less than max "
                f"(for a fixed gang write replicas: {self.max})"
            )
        return self

    def describe(self) -> str:
        return f"{self.min}:{self.max}"


def coerce_replicas(data: object) -> object:
    """A gang's ``replicas: {min, max}`` as ``replicas: max`` with ``elastic: {min, max}``
    (``{min: N, max: N}`` is a fixed gang of N); ValueError names the field and what to write."""
    if not isinstance(data, dict):
        return data
    r = data.get("replicas")
    if isinstance(r, dict):
        unknown = sorted(set(r) - {"min", "max"})
        if unknown or "min" not in r or "max" not in r:
            what = f"has {', '.join(map(str, unknown))}" if unknown else "needs both min and max"
            raise ValueError(f"replicas {what}; {HINT}")
        lo, hi = r["min"], r["max"]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi)):
            raise ValueError(f"replicas: {{min: {lo!r}, max: {hi!r}}} must be whole numbers; {HINT}")
        if lo > hi:
            raise ValueError(f"replicas: min ({lo}) is more than max ({hi}); {HINT}")
        if not 1 <= lo <= hi <= MAX_REPLICAS:
            raise ValueError(f"replicas: {{min: {lo}, max: {hi}}} is out of range; {HINT}")
        if "elastic" in data:
            raise ValueError("give the range once: replicas: {min, max} (elastic: is how it is stored)")
        return {**data, "replicas": hi, **({"elastic": {"min": lo, "max": hi}} if lo < hi else {})}
    return data


def elastic_problem(elastic: Elastic | None, replicas: int) -> None:
    """An ``elastic:`` written out must agree with ``replicas`` (its ``max``)."""
    if elastic is not None and elastic.max != replicas:
        raise ValueError(
            f"elastic max ({elastic.max}) differs from replicas ({replicas}); "
            f"write replicas: {{min: {elastic.min}, max: {elastic.max}}}"
        )


def elastic_checkpoint_problem(elastic: Elastic | None, checkpoint: Checkpoint | None) -> None:
    """Growing restarts every rank: an elastic gang must save its own state (``mode: app``)."""
    if elastic is not None and (checkpoint is None or checkpoint.transparent):
        raise ValueError(
            f"gang replicas {{min: {elastic.min}, max: {elastic.max}}} is elastic: growing it stops every rank and "
            "starts them again with the larger world, so the step must save and resume its own state; add "
            "checkpoint: {mode: app} (state under $HETFLOW_CHECKPOINT_DIR), or write a fixed replicas: N"
        )
