"""What we have: nodes, their CPUs and GPUs, and the probes that discover them."""

from hetflow.inventory.models import Cpu, Gpu, Node
from hetflow.inventory.probe import discover

__all__ = ["Cpu", "Gpu", "Node", "discover"]
