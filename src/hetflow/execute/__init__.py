"""Running steps: the container engine seam, container specs, and the runner."""
