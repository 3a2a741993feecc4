"""The TES v1.1 messages (models) and how each view shows a task (views)."""

from hetflow.tes.messages.models import (
    ACTIVE,
    TERMINAL,
    CreateTaskResponse,
    Executor,
    ExecutorLog,
    FileType,
    Input,
    ListTasksResponse,
    Organization,
    Output,
    OutputFileLog,
    Resources,
    ServiceInfo,
    State,
    Task,
    TaskLog,
    View,
)
from hetflow.tes.messages.views import render

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "CreateTaskResponse",
    "Executor",
    "ExecutorLog",
    "FileType",
    "Input",
    "ListTasksResponse",
    "Organization",
    "Output",
    "OutputFileLog",
    "Resources",
    "ServiceInfo",
    "State",
    "Task",
    "TaskLog",
    "View",
    "render",
]
