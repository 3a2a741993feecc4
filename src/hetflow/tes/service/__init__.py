"""The TES service: tasks in the store, the queue and its fair share, one worker per task.

config    TesConfig: file roots, auth, limits (``--config FILE``)
accept    what a task must be to be accepted (else ``Refused``, a 400)
staging   a task's file system: mounts, inputs in, outputs out
worker    TaskWork: one attempt of one task, as a hetflow run
queue     decide: which queued task starts next (fair share, limits), and why
tokens    bearer tokens, stored hashed
core      TesService: create, get, list, cancel; the scheduler thread; recovery
"""

from hetflow.tes.service.accept import SUPPORTED_PARAMETERS, Refused
from hetflow.tes.service.config import LOCAL_USER, Limits, TesConfig, load_config
from hetflow.tes.service.core import Caller, Page, TesService, as_task
from hetflow.tes.service.queue import Decision, Queued, decide
from hetflow.tes.service.tokens import add_token, who

__all__ = [
    "LOCAL_USER",
    "SUPPORTED_PARAMETERS",
    "Caller",
    "Decision",
    "Limits",
    "Page",
    "Queued",
    "Refused",
    "TesConfig",
    "TesService",
    "add_token",
    "as_task",
    "decide",
    "load_config",
    "who",
]
