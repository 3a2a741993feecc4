# Vendored verbatim from hetflow at commit 4aabbd9 (src/hetflow/spec/models.py), imports rewritten to
# this folder: the loader as it was before the fast path, so bench/loader.py compares both in one run.
# ruff: noqa
# mypy: ignore-errors
"""The workflow format, ``apiVersion: hetflow/v1``: the contract users write against.

Later versions extend these models; they never rename a field.  Every model forbids
unknown keys so a typo is reported (with its line) instead of silently ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from bench._previous_loader.units import cc_tuple, compute_capability, parse_duration, parse_memory

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?\Z")
NAME_HINT = "use 1-63 lowercase letters, digits, '-' or '_', starting and ending alphanumeric"

Memory = Annotated[int, BeforeValidator(parse_memory)]
Duration = Annotated[float, BeforeValidator(parse_duration)]
ParamValue = str | int | float | bool


def _coerce_command(v: object) -> object:
    """A command is an argv list (exec form, like a Kubernetes ``command``); YAML scalars
    in it become the strings the user typed, so ``[--size, 4096]`` and ``[true]`` work."""
    if isinstance(v, str):
        raise ValueError("command must be a list of arguments, e.g. [python3, /app/x.py]")
    if isinstance(v, list):
        return [str(x).lower() if isinstance(x, bool) else str(x) if isinstance(x, int | float) else x for x in v]
    return v


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


GpuVendor = Literal["nvidia", "amd", "intel", "any"]


@dataclass(frozen=True)
class GpuRequest:
    """The accelerators one container asks for, in one value: the home for what the
    format will grow (GPU fractions, MIG instances, other vendors).  Today a workflow can
    only say ``gpus: N`` (whole NVIDIA devices), so ``share`` and ``mig`` are None and
    ``vendor`` is "nvidia"; filters, isolation and backends read the request through this
    value, so a new way to ask for a GPU is added here and handled where it is read."""

    count: int = 0  # whole devices
    vendor: GpuVendor = "nvidia"
    share: float | None = None  # a time-sliced / MPS fraction of one device (0 < share < 1)
    mig: str | None = None  # one MIG instance of this profile, e.g. "1g.10gb"

    @property
    def whole(self) -> bool:
        """Whole devices (or none): nothing shared, nothing sliced."""
        return self.share is None and self.mig is None

    @property
    def devices(self) -> int:
        """Devices the container sees: its whole GPUs, or the one it shares or slices."""
        return self.count if self.whole else 1


class Resources(_Model):
    """What one container of a step needs (Kubernetes requests; Slurm -c/--mem/--gpus)."""

    cpus: float = Field(default=1.0, gt=0, description="logical CPUs")
    memory: Memory = Field(default=512 * 1024**2, description="bytes; 512Mi, 2Gi, ...")
    gpus: int = Field(default=0, ge=0, description="whole GPUs")

    @property
    def gpu_request(self) -> GpuRequest:
        """The accelerator request as one value (see ``GpuRequest``)."""
        return GpuRequest(count=self.gpus)


class GpuConstraint(_Model):
    """Which GPUs qualify (Mesos-style GPU attributes, GFD labels in Kubernetes)."""

    min_memory: Memory = Field(default=0)
    min_compute_capability: str = Field(default="0.0")
    models: tuple[str, ...] = Field(default=(), description="substrings of accepted product names, e.g. [A100, H100]")

    @field_validator("min_compute_capability", mode="before")
    @classmethod
    def _cc(cls, v: object) -> str:
        return compute_capability(v)

    @property
    def cc_tuple(self) -> tuple[int, int]:
        return cc_tuple(self.min_compute_capability)


class Variant(_Model):
    """One way to run a step: an image, a command and what it needs."""

    image: str = Field(min_length=1)
    command: tuple[str, ...] = ()
    resources: Resources = Resources()
    gpu: GpuConstraint | None = None
    estimate: Duration | None = Field(default=None, description="expected run time")
    env: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="node labels required, as Kubernetes' nodeSelector"
    )

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: object) -> object:
        return _coerce_command(v)

    @property
    def uses_gpu(self) -> bool:
        return self.resources.gpus > 0


class Step(_Model):
    """A node of the DAG: one image/command, or named ``variants`` (e.g. cpu and gpu)."""

    image: str | None = None
    command: tuple[str, ...] | None = None
    resources: Resources | None = None
    gpu: GpuConstraint | None = None
    estimate: Duration | None = None
    env: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict, description="applies to every variant")
    variants: dict[str, Variant] | None = None
    needs: tuple[str, ...] = ()
    inputs: dict[str, str] = Field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    sizes: dict[str, Memory] = Field(
        default_factory=dict, description="expected bytes of outputs, for the planner's transfer cost"
    )
    retries: int = Field(default=0, ge=0, le=100)
    network: bool = False
    optional: bool = Field(default=False, description="skip (with a reason) instead of failing when nothing fits")

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: object) -> object:
        return _coerce_command(v)

    @model_validator(mode="after")
    def _one_form(self) -> Step:
        if self.variants is None and self.image is None:
            raise ValueError("a step needs either 'image' (and 'command') or 'variants'")
        if self.variants is not None:
            clash = [k for k in ("image", "command", "resources", "gpu", "estimate") if getattr(self, k) is not None]
            if clash:
                raise ValueError(
                    f"a step with 'variants' cannot also set {', '.join(clash)} at step level; "
                    "move them into each variant"
                )
            if not self.variants:
                raise ValueError("'variants' is empty; give at least one variant")
            for name in self.variants:
                if not NAME_RE.match(name):
                    raise ValueError(f"variant name {name!r} is not valid: {NAME_HINT}")
        return self

    def resolved_variants(self) -> dict[str, Variant]:
        """Every step as named variants; a single-image step has one called 'default'.

        Step-level ``env`` and ``node_selector`` apply to every variant (a variant's own
        keys win)."""
        if self.variants is not None:
            if not self.env and not self.node_selector:
                return dict(self.variants)
            return {
                k: v.model_copy(
                    update={"env": {**self.env, **v.env}, "node_selector": {**self.node_selector, **v.node_selector}}
                )
                for k, v in self.variants.items()
            }
        assert self.image is not None
        return {
            "default": Variant(
                image=self.image,
                command=self.command or (),
                resources=self.resources or Resources(),
                gpu=self.gpu,
                estimate=self.estimate,
                env=dict(self.env),
                node_selector=dict(self.node_selector),
            )
        }

    def dependencies(self) -> tuple[str, ...]:
        """``needs`` plus every step an input is read from, in first-seen order."""
        deps = list(self.needs)
        for ref in self.inputs.values():
            parent = ref.split("/", 1)[0]
            if parent not in deps:
                deps.append(parent)
        return tuple(deps)


class Workflow(_Model):
    """A workflow file.  ``params`` are templated into commands as ``{{ params.NAME }}``."""

    api_version: Literal["hetflow/v1"] = Field(alias="apiVersion")
    name: str
    description: str = ""
    params: dict[str, ParamValue] = Field(default_factory=dict)
    steps: dict[str, Step] = Field(min_length=1)

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"workflow name {v!r} is not valid: {NAME_HINT}")
        return v

    @field_validator("steps")
    @classmethod
    def _step_names(cls, v: dict[str, Step]) -> dict[str, Step]:
        for name in v:
            if not NAME_RE.match(name):
                raise ValueError(f"step name {name!r} is not valid: {NAME_HINT}")
        return v
