"""A step's ``batch:``: several small items of a fan-out run one after another in one
container, as Nextflow's ``array`` directive and Snakemake's job groups pack many tasks into
one cluster job.  Each item keeps its own attempt, exit code, log, outputs and cache entry;
the batch is how they are started, nothing more (``execute.batching``).

    batch: 50                     # at most 50 items to a container
    batch: {max: 200, target: 30s} # as many as fill about 30 s by the items' estimate, at most 200
    batch: false                  # never (the automatic default below is off for this step)

With no ``batch:``, the items of a fan-out of at least ``AUTO_MIN_ITEMS`` whose estimate is at
most ``AUTO_MAX_ESTIMATE`` are batched by ``AUTO_BATCH``: a container's start costs more than such
an item's whole run.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetflow.spec.fields.units import parse_duration

AUTO_MIN_ITEMS = 100  # a fan-out this wide of short items is batched with no ``batch:``
AUTO_MAX_ESTIMATE = 10.0  # seconds: an item estimated longer than this runs in its own container
MAX_ITEMS = 10_000


class Batch(BaseModel):
    """How many items of a fan-out one container runs: at most ``max``; with ``target``, as
    many as the items' estimate says fill ``target`` seconds (at least one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max: int = Field(ge=1, le=MAX_ITEMS, description="at most this many items to a container")
    target: float | None = Field(default=None, description="seconds of work per container, by the items' estimate")

    @model_validator(mode="before")
    @classmethod
    def _target(cls, v: object) -> object:
        if isinstance(v, dict) and "target" in v and v["target"] is not None:
            seconds = parse_duration(v["target"])
            if seconds <= 0:
                raise ValueError(f"batch target {v['target']!r} must be above 0 (write it as 30s or 2m)")
            return {**v, "target": seconds}
        return v

    def size(self, estimate: float | None) -> int:
        """Items to a container for items estimated at ``estimate`` seconds (None: unknown)."""
        if self.target is None or not estimate:
            return self.max
        return max(1, min(self.max, math.floor(self.target / estimate)))

    def describe(self) -> str:
        target = f", about {self.target:g}s of work each" if self.target is not None else ""
        return f"up to {self.max} items to a container{target}"


AUTO_BATCH = Batch(max=100, target=30.0)


def coerce_batch(v: object) -> object:
    """``batch: 50`` is short for ``{max: 50}``; ``true`` for the automatic sizing; ``false`` stays."""
    if v is True:
        return AUTO_BATCH
    if isinstance(v, int) and not isinstance(v, bool):
        if v < 1:
            raise ValueError(f"batch: {v} is not a number of items; write at least 1 (or false to never batch)")
        return {"max": v}
    return v
