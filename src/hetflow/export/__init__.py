"""Exporters: a plan written out for an engine hetflow does not drive (Kubernetes)."""
