"""What a container gets of this machine's accelerators, and what it did with them.

``gpu`` gives a container exactly its GPUs and nothing more (CDI, device nodes and the
driver's libraries, or fake nodes), with ``gpunodes`` holding each vendor's device nodes and
variables and what NVIDIA's shared modes (time-slicing, MPS, MIG) add; ``usage`` samples a
running attempt's GPUs through NVML (utilisation, the memory its processes hold).  The
launch path (``execute.launch``), the dispatcher and the cluster backends (Ray, Slurm) all
use these, so they sit below every one of them.
"""
