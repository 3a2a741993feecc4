"""A step's ``checkpoint:`` and ``stop_grace:``: how much of a running step survives a stop, a
crash of hetflow, a lost node or a move to another node.

    checkpoint: true                       # CRIU dumps the container when it is stopped (hetflow stop --checkpoint)
    checkpoint: {every: 10m}               # ... and every 10 minutes while it runs
    checkpoint: {mode: app}                # the step saves its own state under $HETFLOW_CHECKPOINT_DIR
    checkpoint: {mode: app, every: 30m}    # ... and is asked to (SIGUSR1) every 30 minutes
    stop_grace: 60s                        # SIGTERM, then this long before SIGKILL (default 10s)

``mode: criu`` (the default) is transparent: the container's processes are dumped with CRIU
(``podman container checkpoint``) and a later attempt is restored from the last good image
instead of starting from zero (a GPU step's CUDA state is checkpointed through the driver
around it, where the driver can: ``execute.checkpoint.gpus``).  CRIU cannot dump a container
with a network namespace that talks to others (``network: true``), nor a gang's replicas that
talk to each other: those steps use ``mode: app``, the contract Slurm requeue and Kubernetes preemption
users know: the step writes its state under ``HETFLOW_CHECKPOINT_DIR`` (kept across attempts,
resumes and migrations), receives SIGTERM ``stop_grace`` before any stop, preemption or
migration, and resumes from the latest state it finds there.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hetflow.spec.fields.units import parse_duration

CheckpointMode = Literal["criu", "app"]
MIN_EVERY = 1.0  # seconds: a dump is a pause of the whole container; more often is a typo
DEFAULT_STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL (podman stop's default)
MAX_STOP_GRACE = 3600.0


class Checkpoint(BaseModel):
    """``every``: seconds between checkpoints while the step runs (None: only when stopped
    with ``--checkpoint``, migrated or drained); ``mode``: who writes the state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    every: float | None = Field(default=None, description="checkpoint this often while running (10m, 30s)")
    mode: CheckpointMode = Field(
        default="criu",
        description="criu: transparent (CPU steps; GPU steps where the CUDA driver can); app: the step saves itself",
    )

    @model_validator(mode="before")
    @classmethod
    def _every(cls, v: object) -> object:
        if isinstance(v, dict) and v.get("every") is not None:
            seconds = parse_duration(v["every"])
            if seconds < MIN_EVERY:
                raise ValueError(
                    f"checkpoint every {v['every']!r} is too often: each checkpoint pauses the step; "
                    f"write at least {MIN_EVERY:g}s (e.g. 10m)"
                )
            return {**v, "every": seconds}
        return v

    @property
    def transparent(self) -> bool:
        return self.mode == "criu"

    def describe(self) -> str:
        how = "CRIU checkpoints" if self.transparent else "application checkpoints in $HETFLOW_CHECKPOINT_DIR"
        return f"{how} every {self.every:g}s" if self.every else f"{how} when stopped or moved"


def coerce_checkpoint(v: object) -> object:
    """``checkpoint: true`` is ``{}`` (CRIU, only when stopped); ``false`` is no checkpoint."""
    if v is True:
        return {}
    if v is False:
        return None
    if isinstance(v, str | int | float):
        raise ValueError(f"checkpoint: {v!r} is not a checkpoint setting; write true, {{every: 10m}} or {{mode: app}}")
    return v


def coerce_grace(v: object) -> object:
    if v is None:
        return v
    seconds = parse_duration(v)
    if not 0 <= seconds <= MAX_STOP_GRACE:
        raise ValueError(f"stop_grace {v!r} must be from 0s to 1h (the time between SIGTERM and SIGKILL)")
    return seconds


def checkpoint_problem(c: Checkpoint | None, *, gang: bool, network: bool, batch: object) -> None:
    """CRIU dumps one container's processes: not a gang's replicas talking to each other,
    not a network namespace with peers, not a batch of many items (ValueError says what to write)."""
    if c is None or not c.transparent:
        return
    why = "a gang's replicas talk to each other" if gang else "it has a network (network: true)" if network else ""
    if why:
        raise ValueError(
            f"checkpoint: CRIU cannot dump this step: {why}; write checkpoint: {{mode: app}} and save the "
            "step's state under $HETFLOW_CHECKPOINT_DIR (it resumes from there), or drop 'checkpoint'"
        )
    if isinstance(batch, BaseModel):
        raise ValueError(
            "checkpoint and batch do not go together: a batch runs many items in one container; "
            "drop 'batch' (a checkpointed step runs each item in its own container)"
        )
