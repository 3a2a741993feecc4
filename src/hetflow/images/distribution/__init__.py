"""The OCI distribution API: the client (client), an image's config blob
(config), an in-memory registry for tests (fake), and multi-build indexes assembled from
per-build tags (index_build).
"""
