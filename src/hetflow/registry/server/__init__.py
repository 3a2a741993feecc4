"""The proxy as a service: the ASGI app (app), its OCI endpoints (proxy), the
gates in front of it (gates), token auth (auth), who is on a loopback connection (peers),
manifest bodies checked against their media types (documents), and serving it (serving).
"""
