"""The TES API over HTTP: the Starlette app (app) and serving it behind the HTTP front (serving)."""

from hetflow.tes.http.app import PREFIX, create_app
from hetflow.tes.http.serving import DEFAULT_LISTEN, serve, start_in_thread

__all__ = ["DEFAULT_LISTEN", "PREFIX", "create_app", "serve", "start_in_thread"]
