"""hetflow: containerized CPU/GPU workflows on heterogeneous machines.

Data flows one way: spec -> inventory -> plan -> execute -> state/report.
"""

__version__ = "0.1.0"
