"""``hetflow ui``: a live web dashboard over the state store (read-only): runs, one run's
DAG, Gantt and logs as they happen, this machine's nodes and GPUs, plans and the
virtual-cluster Pareto front; stop, resume and retry behind ``--actions``.

    auth      UiConfig (what ``hetflow ui`` was started with) and Gate: the token on every path
    views     the API's JSON, built from the store with the report stage's functions
    streams   server-sent events: a run's event stream, a step's log
    planning  the plans view: ``hetflow plan --explain`` and ``cluster plan`` for files under --root
    app       the starlette app, and ``bind`` (its port, bound first)
    serving   ``serve``: the app behind the HTTP front (hetflow.front)

The page itself (HTML, JS, CSS and the vendored libraries, with their licenses) is
``hetflow/share/ui``.
"""

from hetflow.ui.app import bind, create_app, finite
from hetflow.ui.auth import UiConfig, is_loopback, new_token
from hetflow.ui.serving import serve

__all__ = ["UiConfig", "bind", "create_app", "finite", "is_loopback", "new_token", "serve"]
