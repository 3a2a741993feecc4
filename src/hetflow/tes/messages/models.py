"""The TES v1.1 messages (third_party/tes/task_execution_service.openapi.yaml, schemas
``tes*``) as pydantic models.  Unknown fields are ignored, as the API's clients send fields of
later versions; a missing required field (an executor's ``image``, an output's ``url``) is a
400 naming it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class State(StrEnum):
    UNKNOWN = "UNKNOWN"
    QUEUED = "QUEUED"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETE = "COMPLETE"
    EXECUTOR_ERROR = "EXECUTOR_ERROR"
    SYSTEM_ERROR = "SYSTEM_ERROR"
    CANCELED = "CANCELED"
    PREEMPTED = "PREEMPTED"
    CANCELING = "CANCELING"


TERMINAL = frozenset({State.COMPLETE, State.EXECUTOR_ERROR, State.SYSTEM_ERROR, State.CANCELED, State.PREEMPTED})
ACTIVE = frozenset({State.INITIALIZING, State.RUNNING, State.CANCELING})


class FileType(StrEnum):
    FILE = "FILE"
    DIRECTORY = "DIRECTORY"


class View(StrEnum):
    MINIMAL = "MINIMAL"
    BASIC = "BASIC"
    FULL = "FULL"


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Input(_Message):
    name: str | None = None
    description: str | None = None
    url: str | None = None
    path: str
    type: FileType = FileType.FILE
    content: str | None = None
    streamable: bool | None = None


class Output(_Message):
    name: str | None = None
    description: str | None = None
    url: str
    path: str
    path_prefix: str | None = None
    type: FileType = FileType.FILE


class Executor(_Message):
    image: str
    command: list[str] = Field(min_length=1)
    workdir: str | None = None
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    env: dict[str, str] | None = None
    ignore_error: bool | None = None


class Resources(_Message):
    cpu_cores: int | None = None
    preemptible: bool | None = None
    ram_gb: float | None = None
    disk_gb: float | None = None
    zones: list[str] | None = None
    backend_parameters: dict[str, str] | None = None
    backend_parameters_strict: bool | None = None


class ExecutorLog(_Message):
    start_time: str | None = None
    end_time: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    exit_code: int


class OutputFileLog(_Message):
    url: str
    path: str
    size_bytes: str


class TaskLog(_Message):
    logs: list[ExecutorLog] = Field(default_factory=list)
    metadata: dict[str, str] | None = None
    start_time: str | None = None
    end_time: str | None = None
    outputs: list[OutputFileLog] = Field(default_factory=list)
    system_logs: list[str] | None = None


class Task(_Message):
    id: str | None = None
    state: State | None = None
    name: str | None = None
    description: str | None = None
    inputs: list[Input] | None = None
    outputs: list[Output] | None = None
    resources: Resources | None = None
    executors: list[Executor] = Field(min_length=1)
    volumes: list[str] | None = None
    tags: dict[str, str] | None = None
    logs: list[TaskLog] | None = None
    creation_time: str | None = None


class CreateTaskResponse(_Message):
    id: str


class ListTasksResponse(_Message):
    tasks: list[Task]
    next_page_token: str | None = None


class ServiceType(_Message):
    group: str = "org.ga4gh"
    artifact: str = "tes"
    version: str = "1.1.0"


class Organization(_Message):
    name: str
    url: str


class ServiceInfo(_Message):
    id: str
    name: str
    type: ServiceType = Field(default_factory=ServiceType)
    description: str | None = None
    organization: Organization
    version: str
    storage: list[str] = Field(default_factory=list)
    tesResources_backend_parameters: list[str] = Field(default_factory=list)  # the API names it so
