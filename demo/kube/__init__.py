"""A local Kubernetes test cluster on this one machine (cluster): what it writes
before it starts (objects), kwok's configuration (kwok), a real node (kubelet), its
processes (processes); and ``make demo-kubernetes`` on it (demo).
"""
