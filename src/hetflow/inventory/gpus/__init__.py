"""GPU probes, one per source: NVML (nvml) with its MIG instances (nvmlmig) and
current use (nvmlusage), ``/proc/driver/nvidia`` (procfs), AMD's KFD (amd), Intel's DRM
(intel), and the GPU model table they share (gpumodels).
"""
