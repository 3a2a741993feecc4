"""The HTTP front both services run behind: HAProxy on the port, the app under uvicorn on a
private Unix socket behind it.

``hetflow registry serve`` and ``hetflow ui`` bind their port themselves (a taken port is a
clear error), then hand the socket to HAProxy, which enforces what a hardened web server
gives and hetflow's own code did not: a deadline for a whole request (headers and body), a
cut for a client idle or not reading, keep-alive timeouts, and limits per client address
that count every connection, those still sending headers too (``FrontLimits``).  The
docs/guides/images.md, "The HTTP front", has the attack figures behind this choice.

    limits    FrontLimits (what is enforced) and Answers (the service's words for the front's refusals)
    haproxy   the configuration: a pure function of the limits
    process   the HAProxy process: started on the inherited socket, ended with the service
    backend   the app under uvicorn on the Unix socket, in a thread
    serving   Served (background: tests, bench), serve_app (foreground, until a signal) and
              listen_socket (a service's port, bound first)
"""

from hetflow.front.haproxy import render
from hetflow.front.limits import Answers, FrontLimits
from hetflow.front.process import find_haproxy
from hetflow.front.serving import Served, listen_socket, serve_app

__all__ = ["Answers", "FrontLimits", "Served", "find_haproxy", "listen_socket", "render", "serve_app"]
