"""Fake GPUs for a machine without them: from configuration (gpus), their
device nodes and MIG instances (devnodes), and a fake pynvml for tests (nvml).
"""
