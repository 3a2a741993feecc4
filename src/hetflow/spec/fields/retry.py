"""A step's retry policy, ``retry:``: how often a failed step runs again, how long it waits,
and what changes for the next attempt.

Users ask every engine for the same three things: more memory after an out-of-memory kill
(Nextflow ``memory { 2.GB * task.attempt }``), another variant after one fails at run time
(a GPU build falling back to the CPU build), and another node type after a node died
(nextflow#7396 spot then on-demand, Argo #2091, Ray #39861).  ``retries: N`` stays the
shorthand for ``retry: {count: N}``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from hetflow.spec.fields.units import parse_duration

MAX_FACTOR = 64.0  # x64 of 6 MiB is already 384 MiB; more is a typo, not a policy
MAX_WAIT = 24 * 3600.0  # a day between attempts: longer is a typo
_FACTOR_RE = re.compile(r"^\s*[x*]\s*([0-9]*\.?[0-9]+)\s*$|^\s*([0-9]*\.?[0-9]+)\s*[x]\s*$", re.IGNORECASE)
FACTOR_HINT = "write a multiplier as x2 (or 1.5x), from above 1 up to x64"


def parse_factor(value: object) -> float:
    """``x2``, ``2x``, ``x1.5`` or a bare number, as a float above 1 and at most 64."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a multiplier; {FACTOR_HINT}")
    if isinstance(value, int | float):
        f = float(value)
    else:
        m = _FACTOR_RE.match(str(value))
        if m is None:
            raise ValueError(f"{value!r} is not a multiplier; {FACTOR_HINT}")
        f = float(m.group(1) or m.group(2))
    if not math.isfinite(f) or not 1 < f <= MAX_FACTOR:
        raise ValueError(f"multiplier {value!r} is out of range; {FACTOR_HINT}")
    return f


def _wait(value: object) -> float:
    seconds = parse_duration(value)
    if seconds > MAX_WAIT:
        raise ValueError(f"a backoff wait must be at most a day (24h); got {value!r}")
    return seconds


Factor = Annotated[float, BeforeValidator(parse_factor)]
Wait = Annotated[float, BeforeValidator(_wait)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Backoff(_Model):
    """The wait before retry k (1, 2, ...): ``initial * factor**(k-1)``, at most ``max``.
    ``None`` fields take the runner's defaults (2 s doubling up to 300 s;
    HETFLOW_RETRY_BACKOFF sets the first wait)."""

    initial: Wait | None = None
    factor: float | None = Field(default=None, ge=1, le=10)
    max: Wait | None = None

    @model_validator(mode="after")
    def _order(self) -> Backoff:
        if self.initial is not None and self.max is not None and self.max < self.initial:
            raise ValueError(f"backoff max ({self.max:g}s) is below its initial wait ({self.initial:g}s)")
        return self

    def delay(self, retry: int, default_initial: float, default_max: float) -> float:
        """Seconds before retry ``retry`` (1 for the first)."""
        initial = default_initial if self.initial is None else self.initial
        factor = 2.0 if self.factor is None else self.factor
        cap = default_max if self.max is None else self.max
        return float(min(initial * factor ** max(0, retry - 1), cap))


def _coerce_backoff(v: object) -> object:
    """A plain duration is the first wait (doubling from there, as by default)."""
    if isinstance(v, str | int | float) and not isinstance(v, bool):
        return {"initial": v}
    return v


class Retry(_Model):
    """``retry:`` of a step or template.

    - ``count``: attempts after the first (0..100).
    - ``backoff``: a duration (the first wait, doubling) or {initial, factor, max}.
    - ``memory: x2``: after an out-of-memory kill, the next attempt asks this much more
      memory (capped at what the machine or node class has).
    - ``cpus: x2``: every retry asks this much more CPU (capped likewise): a step that
      failed slow or starved gets more room, as ``cpus { 2 * task.attempt }`` does.
    - ``fallback: [cpu]``: after a failure of a variant, the next attempt runs the next
      variant in this list (the first, for a variant not in it).
    - ``avoid_failed_node``: the next attempt avoids the node class a failed attempt ran on
      (a cluster plan; on this one machine there is nothing else, and a note says so).
    """

    count: int = Field(default=0, ge=0, le=100)
    backoff: Annotated[Backoff | None, BeforeValidator(_coerce_backoff)] = None
    memory: Factor | None = None
    cpus: Factor | None = None
    fallback: tuple[str, ...] = ()
    avoid_failed_node: bool = False

    @model_validator(mode="after")
    def _fallback(self) -> Retry:
        seen = [v for i, v in enumerate(self.fallback) if v in self.fallback[:i]]
        if seen:
            raise ValueError(f"retry fallback names variant {seen[0]!r} twice; list each variant once")
        return self

    def next_variant(self, failed: str, variants: tuple[str, ...]) -> str | None:
        """The variant the attempt after a failure of ``failed`` runs (None: the same)."""
        chain = [v for v in self.fallback if v in variants]
        if failed in chain:
            later = chain[chain.index(failed) + 1 :]
            return later[0] if later else None
        return next((v for v in chain if v != failed), None)


def retry_policy(count: int, retry: Retry | None) -> Retry:
    """A step's policy: its ``retry:``, else ``retries: N`` as ``{count: N}``."""
    return retry if retry is not None else Retry(count=count)
