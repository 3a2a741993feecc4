"""Content on the proxy's disk and how it gets there: the content-addressed store
(store), content sent only when it hashes to its digest (verify), the upstream registry's
side (upstream), fills from upstream (fetch) and when a fill must end (fillwatch).
"""
