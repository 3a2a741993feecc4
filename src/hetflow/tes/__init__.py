"""``hetflow tes``: hetflow as a GA4GH Task Execution Service (TES v1.1).  A task becomes a
hetflow run whose executors run one after another in hardened containers on a backend; the
tasks, their owners and tokens live in the state store, so the server survives SIGKILL.

    messages/  the TES v1.1 messages (pydantic) and the MINIMAL/BASIC/FULL views
    service/   the service: accepting tasks, the fair-share queue, one worker per task,
               staging inputs and outputs, tokens, recovery after a restart
    http/      the Starlette app and serving it behind the HTTP front
"""

from hetflow.tes.http import DEFAULT_LISTEN, PREFIX, create_app, serve, start_in_thread
from hetflow.tes.messages import State, Task
from hetflow.tes.service import Caller, Decision, TesConfig, TesService, add_token, load_config

__all__ = [
    "DEFAULT_LISTEN",
    "PREFIX",
    "Caller",
    "Decision",
    "State",
    "Task",
    "TesConfig",
    "TesService",
    "add_token",
    "create_app",
    "load_config",
    "serve",
    "start_in_thread",
]
