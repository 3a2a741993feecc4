"""The workflow format, ``apiVersion: hetflow/v1``: the contract users write against.

Later versions extend these models; they never rename a field.  Every model forbids
unknown keys so a typo is reported (with its line) instead of silently ignored.
"""

from __future__ import annotations

import re
import weakref
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hetflow.spec.fields.batch import Batch, coerce_batch
from hetflow.spec.fields.checkpoint import Checkpoint, checkpoint_problem, coerce_checkpoint, coerce_grace
from hetflow.spec.fields.elastic import Elastic, coerce_replicas, elastic_checkpoint_problem, elastic_problem
from hetflow.spec.fields.imageref import parse_reference
from hetflow.spec.fields.naming import DATA_PREFIX
from hetflow.spec.fields.resources import (
    GpuConstraint,
    GpuRequest,
    Memory,
    Resources,
    SpecModel,
)
from hetflow.spec.fields.retry import Retry, retry_policy
from hetflow.spec.fields.units import parse_duration

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?\Z")
_WHEN_OUTPUT = re.compile(r"""output\(\s*['"]([^'"]+)['"]\s*\)""")  # spec.when reads the same
NAME_HINT = "use 1-63 lowercase letters, digits, '-' or '_', starting and ending alphanumeric"

MAX_ESTIMATE = 365 * 24 * 3600.0  # a year: the planner's time line, and a sane typo catcher
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # POSIX names: no '=', not empty (podman --env K=V)


def _image(v: str) -> str:
    """An image must parse as a reference (as podman would) and may not look like a flag."""
    if "{{" in v:
        return v  # a fan-out item's image ('img:{{ item.py }}'): checked once expanded (checks.py)
    parse_reference(v)  # ReferenceSyntaxError is a ValueError: pydantic reports it with the field
    return v


ImageRef = Annotated[str, AfterValidator(_image)]


def _estimate(v: float | None) -> float | None:
    # 0 is allowed: an imported trace records instant tasks (WfCommons runtimeInSeconds: 0)
    if v is not None and not 0 <= v <= MAX_ESTIMATE:
        raise ValueError(f"an estimate must be from 0s to a year (365d); got {v:g}s")
    return v


Duration = Annotated[float, BeforeValidator(parse_duration)]
Scalar = str | int | float | bool
# A param is a scalar, or a list (of scalars or mappings) that a ``foreach`` can iterate.
ParamValue = Scalar | list[Scalar | dict[str, Scalar]]


def _coerce_command(v: object) -> object:
    """A command is an argv list (exec form, like a Kubernetes ``command``); YAML scalars
    in it become the strings the user typed, so ``[--size, 4096]`` and ``[true]`` work."""
    if isinstance(v, str):
        raise ValueError("command must be a list of arguments, e.g. [python3, /app/x.py]")
    if isinstance(v, list):
        return [str(x).lower() if isinstance(x, bool) else str(x) if isinstance(x, int | float) else x for x in v]
    return v


_RESOLVED: dict[int, dict[str, Variant]] = {}  # id of a Step -> its resolved variants (Step.resolved_variants)


class Variant(SpecModel):
    """One way to run a step: an image, a command and what it needs."""

    image: ImageRef
    command: tuple[str, ...] = ()
    resources: Resources = Resources()
    gpu: GpuConstraint | None = None
    estimate: Annotated[Duration | None, AfterValidator(_estimate)] = Field(
        default=None, description="expected run time"
    )
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
        return self.resources.uses_gpu

    @property
    def gpu_request(self) -> GpuRequest:
        """What this variant asks of accelerators; ``gpu.min_memory`` and ``resources.gpu_memory``
        both state a memory need, and the larger one counts."""
        r = self.resources.gpu_request
        need = max(r.memory, self.gpu.min_memory if self.gpu is not None else 0)
        return r if need == r.memory else GpuRequest(r.count, r.vendor, r.share, r.mig, need)


GangLauncher = Literal["torch", "mpi", "none"]
GpuLinkNeed = Literal["nvlink", "same-numa", "any"]
GangNetwork = Literal["tcp", "rdma"]


class Gang(SpecModel):
    """One step as ``replicas`` containers started together on one or more nodes, each with
    the step's ``resources`` (an MPI job, a torchrun job): all of them or none.

    ``launcher`` says what every replica is told: ``torch`` sets torchrun's variables
    (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK),
    ``mpi`` runs the command under ``mpirun`` in replica 0 with a hostfile of the others
    (kubeflow mpi-operator's launcher/worker shape), ``none`` only HETFLOW_RANK and
    HETFLOW_WORLD_SIZE.  ``replicas: {min, max}`` makes it elastic (``spec.fields.elastic``).
    ``gpu_link`` is what a replica's GPUs must share on their node (NVLink, a NUMA node, or
    anything: the default only prefers NVLink); ``network: rdma`` asks for nodes with an
    RDMA device (/dev/infiniband/*, passed to each replica)."""

    replicas: int = Field(ge=1, le=1024, description="containers started together, each with the step's resources")
    per_node: int | None = Field(default=None, ge=1, description="at most this many replicas on one node")
    launcher: GangLauncher = "none"
    gpu_link: GpuLinkNeed = "any"
    network: GangNetwork = "tcp"
    port: int = Field(default=29500, ge=1024, le=65535, description="MASTER_PORT for launcher: torch")
    comm: Memory = Field(
        default=0, description="bytes each replica exchanges over the run (an allreduce), for the planner's model"
    )
    elastic: Elastic | None = Field(default=None, description="set by replicas: {min, max}: the size's range")

    _replicas = model_validator(mode="before")(coerce_replicas)

    @model_validator(mode="after")
    def _fits(self) -> Gang:
        elastic_problem(self.elastic, self.replicas)
        if self.per_node is not None and self.per_node > self.replicas:
            raise ValueError(
                f"per_node ({self.per_node}) is more than replicas ({self.replicas}); "
                f"set per_node to at most {self.replicas} or leave it out"
            )
        return self

    def nodes_at_least(self) -> int:
        """The fewest nodes the gang can be spread over (per_node replicas on each)."""
        return 1 if self.per_node is None else -(-self.replicas // self.per_node)


def _coerce_data(v: object) -> object:
    """``reads: inputs/*.txt`` is short for ``reads: {path: inputs/*.txt}``; an ``s3://`` URL for ``{url: ...}``."""
    if isinstance(v, str):
        return {"url": v} if "://" in v else {"path": v}
    return v


class DataSet(SpecModel):
    """Workflow-level data: a host file, directory or glob, or objects under an S3 URL.

    Host paths are relative to the workflow file (or absolute) and mounted read-only where
    they are: on Slurm and Ray they must be on a file system every node shares.  S3 data is
    listed when the run is submitted and downloaded into the run's work directory."""

    path: str | None = Field(default=None, description="host file, directory or glob (*, **, ?)")
    url: str | None = Field(default=None, description="s3://bucket/key or s3://bucket/prefix/")
    endpoint: str | None = Field(default=None, description="S3 endpoint URL (else AWS_ENDPOINT_URL)")

    @model_validator(mode="after")
    def _one_source(self) -> DataSet:
        if (self.path is None) == (self.url is None):
            raise ValueError("give exactly one of 'path' (a host file, directory or glob) or 'url' (s3://...)")
        if self.path is not None and not self.path.strip():
            raise ValueError("'path' is empty; give a file, directory or glob")
        if self.url is not None and not self.url.startswith("s3://"):
            raise ValueError(f"url {self.url!r} is not supported; write s3://BUCKET/KEY or s3://BUCKET/PREFIX/")
        if self.url is not None and not self.url.removeprefix("s3://").split("/", 1)[0]:
            raise ValueError(f"url {self.url!r} names no bucket; write s3://BUCKET/KEY")
        if self.endpoint is not None and self.url is None:
            raise ValueError("'endpoint' applies only to 'url' (S3) data")
        return self

    @property
    def is_s3(self) -> bool:
        return self.url is not None


PublishMode = Literal["copy", "link", "overwrite"]


class Publish(SpecModel):
    """Copy (or hard-link) a step's outputs out when it succeeds, like Nextflow's publishDir.

    ``mode: copy`` (the default) and ``link`` replace a different file already there only
    when it is this workflow's own earlier result, unchanged since (``execute.data.publishing.publish``);
    else the step fails with a message instead; ``overwrite`` says replacing is wanted."""

    to: str = Field(min_length=1, description="host directory (relative to the workflow file) or s3://bucket/prefix/")
    outputs: tuple[str, ...] = Field(default=(), description="which outputs; default: all declared outputs")
    mode: PublishMode = "copy"
    endpoint: str | None = None

    @model_validator(mode="after")
    def _mode(self) -> Publish:
        why = target_problem(self.to, self.mode)
        if why is not None:
            raise ValueError(why)
        return self


def target_problem(to: str, mode: str) -> str | None:
    """What is wrong with a publish target (checked again once a template filled it in)."""
    if to.startswith("s3://") and mode == "link":
        return "mode 'link' cannot publish to S3; use copy or overwrite"
    if "://" in to and not to.startswith("s3://"):
        return f"publish target {to!r} is not supported; give a directory or s3://BUCKET/PREFIX/"
    return None


def _coerce_publish(v: object) -> object:
    """One mapping or a list of them; a bare string is ``{to: STRING}``."""
    if isinstance(v, str):
        return [{"to": v}]
    if isinstance(v, dict):
        return [v]
    return v


class Step(SpecModel):
    """A node of the DAG: one image/command, or named ``variants`` (e.g. cpu and gpu)."""

    image: ImageRef | None = None
    command: tuple[str, ...] | None = None
    resources: Resources | None = None
    gpu: GpuConstraint | None = None
    estimate: Annotated[Duration | None, AfterValidator(_estimate)] = None
    env: dict[str, str] = Field(default_factory=dict)
    secrets: tuple[str, ...] = Field(
        default=(),
        description="secret names: from the environment or --secrets-file, as $NAME and /run/secrets/NAME",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="applies to every variant")
    variants: dict[str, Variant] | None = None
    needs: tuple[str, ...] = ()
    inputs: dict[str, str] = Field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    sizes: dict[str, Memory] = Field(
        default_factory=dict, description="expected bytes of outputs, for the planner's transfer cost"
    )
    retries: int = Field(default=0, ge=0, le=100, description="short for retry: {count: N}")
    retry: Retry | None = Field(default=None, description="count, backoff, growth, fallback, avoid_failed_node")
    network: bool = False
    optional: bool = Field(default=False, description="skip (with a reason) instead of failing when nothing fits")
    cache: bool = Field(default=True, description="reuse this step's result across runs when its key is unchanged")
    publish: Annotated[tuple[Publish, ...], BeforeValidator(_coerce_publish)] = ()
    use: str | None = Field(default=None, description="the template this step was written from")
    foreach: object = Field(
        default=None,
        description="a list, {range: N | [start, stop, step]}, '{{ params.NAME }}', {files: REF} or {lines: REF}",
    )
    matrix: dict[str, object] | None = Field(default=None, description="axes (lists) and an optional 'exclude'")
    gang: Gang | None = Field(default=None, description="run as several replicas started together (MPI, torchrun)")
    batch: Annotated[Batch | bool | None, BeforeValidator(coerce_batch)] = Field(
        default=None, description="fan-out items run several to a container: N, {max: N, target: 30s}, or false"
    )
    when: str | None = Field(
        default=None,
        description="run only when this condition holds: params.NAME, output('STEP/OUT'), and/or/not, comparisons",
    )
    checkpoint: Annotated[Checkpoint | None, BeforeValidator(coerce_checkpoint)] = Field(
        default=None, description="true, {every: 10m} (CRIU) or {mode: app}: what survives a stop, crash or move"
    )
    stop_grace: Annotated[float | None, BeforeValidator(coerce_grace)] = Field(
        default=None, description="seconds between SIGTERM and SIGKILL when the step is stopped (default 10s)"
    )

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, v: object) -> object:
        return _coerce_command(v)

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        # a secret is an env var NAME and a file /run/secrets/NAME: a POSIX name is both
        for name in v:
            if not ENV_NAME.match(name) or name.startswith("HETFLOW_"):
                raise ValueError(
                    f"secret name {name!r} is not valid: use letters, digits and '_', not starting with a digit "
                    "nor with HETFLOW_ (e.g. API_TOKEN)"
                )
        if len(set(v)) != len(v):
            raise ValueError(f"secrets lists a name twice: {', '.join(sorted({n for n in v if v.count(n) > 1}))}")
        return v

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
        checkpoint_problem(self.checkpoint, gang=self.gang is not None, network=self.network, batch=self.batch)
        elastic_checkpoint_problem(self.gang.elastic if self.gang else None, self.checkpoint)
        if self.retry is not None and "retries" in self.model_fields_set:
            raise ValueError("set either 'retries' or 'retry', not both: 'retries: N' is short for 'retry: {count: N}'")
        if self.retry is not None and self.retry.fallback:
            names = tuple(self.variants) if self.variants is not None else ("default",)
            unknown = [v for v in self.retry.fallback if v not in names]
            if unknown:
                raise ValueError(
                    f"retry fallback names variant {unknown[0]!r}, which this step does not have; "
                    f"its variants: {', '.join(names)}"
                )
        return self

    @property
    def retry_policy(self) -> Retry:
        """How the step retries: its ``retry:``, or ``retries: N`` as ``{count: N}``."""
        return retry_policy(self.retries, self.retry)

    def resolved_variants(self) -> dict[str, Variant]:
        """Every step as named variants; a single-image step has one called 'default'.

        Step-level ``env`` and ``node_selector`` apply to every variant (a variant's own
        keys win).  Worked out once a step (it is frozen): the planner, the dispatch, the
        checks and the cache key each ask, several times a step of a 10,000-step run."""
        known = _RESOLVED.get(id(self))
        if known is None:
            known = _RESOLVED[id(self)] = self._resolve_variants()
            # the entry goes with the step, before its id can be another object's
            weakref.finalize(self, _RESOLVED.pop, id(self), None)
        return dict(known)

    def _resolve_variants(self) -> dict[str, Variant]:
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
        # Every field was validated on the step by the validators a Variant would run again
        # (the image reference, the command, the estimate): built without validation, ten
        # times faster, which a 10,000-step plan pays once per step.
        return {
            "default": Variant.model_construct(
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
        """``needs`` plus every step an input (or a pending fan-out's list) is read from, in
        first-seen order; workflow data (``data.NAME``) is no step."""
        deps = list(self.needs)
        refs = list(self.inputs.values())
        if self.when:  # output('STEP/OUT') in the condition: read once STEP has succeeded
            refs += _WHEN_OUTPUT.findall(self.when)
        if isinstance(self.foreach, dict) and len(self.foreach) == 1:  # {files|lines: STEP/OUT}: read from STEP
            source = next(iter(self.foreach.values()))
            if isinstance(source, str) and "/" in source:
                refs.insert(0, source)
        for ref in refs:
            if ref.startswith(DATA_PREFIX) or "{{" in ref:
                continue  # workflow data, or a pending fan-out item's input
            parent = ref.split("/", 1)[0]
            if parent not in deps:
                deps.append(parent)
        return tuple(deps)

    @property
    def replicas(self) -> int:
        """Containers one run of this step starts together: the gang's size, else 1."""
        return self.gang.replicas if self.gang is not None else 1


class WorkflowPublish(Publish):
    """Workflow-level ``publish: [{from: STEP/OUTPUT, to: DIR}]``: the same as the step's own."""

    from_: str = Field(alias="from", min_length=1, description="STEP/OUTPUT (or STEP: all its outputs)")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Workflow(SpecModel):
    """A workflow file.  ``params`` are templated into commands as ``{{ params.NAME }}``."""

    api_version: Literal["hetflow/v1"] = Field(alias="apiVersion")
    name: str
    description: str = ""
    params: dict[str, ParamValue] = Field(default_factory=dict)
    include: tuple[str, ...] = Field(default=(), description="files whose 'templates' this file may 'use'")
    templates: dict[str, dict[str, object]] = Field(default_factory=dict, description="partial steps to 'use'")
    data: dict[str, Annotated[DataSet, BeforeValidator(_coerce_data)]] = Field(default_factory=dict)
    publish: tuple[WorkflowPublish, ...] = ()
    steps: dict[str, Step] = Field(min_length=1)

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"workflow name {v!r} is not valid: {NAME_HINT}")
        return v

    @field_validator("data")
    @classmethod
    def _data_names(cls, v: dict[str, DataSet]) -> dict[str, DataSet]:
        for name in v:
            if not NAME_RE.match(name):
                raise ValueError(f"data name {name!r} is not valid: {NAME_HINT}")
        return v

    @field_validator("steps")
    @classmethod
    def _step_names(cls, v: dict[str, Step]) -> dict[str, Step]:
        for name in v:
            if not NAME_RE.match(name):
                raise ValueError(f"step name {name!r} is not valid: {NAME_HINT}")
            if name == "data":
                raise ValueError("'data' cannot name a step: inputs read workflow data as data.NAME")
        return v
