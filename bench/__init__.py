"""Benchmarks, each figure against an anchor from the same run: ``python -m bench.ROOM.NAME``.

planning/   the planner, at scale, GPU sharing, virtual clusters, gangs
local/      the local runner: launch overhead, throughput, loading, checkpoints
engines/    Kubernetes, Ray and Slurm overhead
proxy/      the registry proxy
peers/      Snakemake and cwltool on the same workloads
conformance/  the CWL v1.2 conformance suite: hetflow's CWL runner and cwltool, passed/failed per tag
gitanchor   an anchor taken from git history;  ui: how fast the dashboard draws
"""
