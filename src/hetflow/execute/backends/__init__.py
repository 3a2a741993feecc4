"""Where step attempts run: this machine (podman), Slurm, Ray.  One contract (base.py)."""
