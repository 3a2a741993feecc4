"""hetflow on a real GPU: the acceptance check (docs/guides/real-gpu.md).

There, as root, from the folder `make gpu-kit` made (carried to a bare GPU machine):

    python3 gpu-kit/gpu-check OUTDIR [--parts discovery,injection,sharing,gang] [--budget 420]

Here: `tools/gpu-check --dry-run [--kit gpu-kit] [OUTDIR]` verifies the kit folder.

Six parts, each passed, failed (with the error) or skipped (with why):
  discovery  `hetflow nodes --json` and `--topo` against the real NVML, field by field
             against what nvidia-smi prints;
  injection  the carried podman runs a workflow through `hetflow run`: a GPU step runs a
             CUDA program (built here with nvcc, CUDA runtime linked statically) in a
             hardened container that sees only its GPU's nodes, the control nodes and the
             driver's libraries hetflow injects; a CPU step of the same run sees no GPU; the
             run record holds the GPU step's NVML-sampled use.  Where containers cannot run,
             the same program runs as a plain process with hetflow's GPU variables;
  sharing    1, 2 and 4 processes of the same CUDA loop on one GPU at once (time-slicing,
             and MPS when nvidia-cuda-mps-control is there): the slowdown ``s`` of
             ``solo x (1 + s x (load - 1))`` fitted by hetflow's ``learn_slowdown``, beside
             the model's default; written to OUTDIR/slowdown.json for `hetflow profile slowdown`;
  gang       two ranks with the environment hetflow gives a torch gang (``replica_env``) do
             an all-reduce of a known tensor (NCCL; gloo where NCCL refuses two ranks on one GPU);
  checkpoint a CUDA program with its state in device memory (ckpt.cu) through `hetflow run`
             with the carried CRIU 4.1.1 and ``checkpoint: {every: 5s}``: kill -9 of executor
             and container, `hetflow resume`; then `stop --checkpoint` + `resume`: each ends
             with an uninterrupted run's result; dump and restore times, image size per GiB.

Writes OUTDIR/gpu-check.json and OUTDIR/gpu-check.md (and each part's raw output); exits 0
only if every part that ran passed.  It runs its own podman: on a machine whose own podman
runs containers, both would share one lock segment (/dev/shm/libpod_lock); the GPU machines
it is made for are bare.  Standard library only: it runs before hetflow is
installed (it installs the kit's wheels into a private folder first).
"""

from .checkpoint import judge_resumed, steps_of
from .checkpoint import table as checkpoint_table
from .cli import main
from .common import KIT_LIMIT, NEEDED_DEBS, PARTS, CheckError, Part
from .discovery import QUERY, compare_discovery, parse_query, parse_smi_xml, parse_topo
from .gang import why_refused
from .injection import judge_injection, step_lines
from .kit import CRIU_LIBS, kit_files, verify_kit, write_manifest
from .leases import judge_leases, mps_clients
from .report import markdown, overall
from .sharing import fit_slowdown, loop_seconds, sharing_samples

__all__ = [
    "CRIU_LIBS",
    "KIT_LIMIT",
    "NEEDED_DEBS",
    "PARTS",
    "QUERY",
    "CheckError",
    "Part",
    "checkpoint_table",
    "compare_discovery",
    "fit_slowdown",
    "judge_injection",
    "judge_leases",
    "judge_resumed",
    "kit_files",
    "loop_seconds",
    "main",
    "markdown",
    "mps_clients",
    "overall",
    "parse_query",
    "parse_smi_xml",
    "parse_topo",
    "sharing_samples",
    "step_lines",
    "steps_of",
    "verify_kit",
    "why_refused",
    "write_manifest",
]
