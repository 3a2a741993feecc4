"""The shell that gives a Slurm job's container the GPUs Slurm assigned, shared by the
single-step script (``translate``) and a gang's task script (``gang``).

Per vendor (as ``execute/devices/gpu.py`` isolates a local step): NVIDIA GPUs are ``nvidiaN`` with
nvidiactl/nvidia-uvm and NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES; AMD GPUs their DRM
render nodes (``dri/renderD*``) with ``kfd`` and ROCR_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES;
Intel GPUs their render nodes with ZE_AFFINITY_MASK.  Inside, the GPUs are 0..n-1."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from hetflow.execute.backends.slurm.settings import SlurmSettings

# Shell, shared by the single-step and the gang scripts: the GPUs whose gres indices are in
# the array ``given`` become ``gpu`` (podman's --device and --env arguments).  Slurm numbers
# a node's GPUs by gres index, their place in gres.conf's File= list (Slurm 22.05,
# gres_common.c), not by device minor: index i is the i-th file.  ``FAIL`` is the script's
# way out (it records the exit code); ``cri`` writes to the step's log.
_GPU_DEVICES = """  files=()
  case "$node" in
CASES    *) while read -r m; do files+=("$devdir/PREFIX$m"); done < <(
         ls -1 "$devdir/SUBDIR" 2>/dev/null | sed -n 's/^NODE\\([0-9][0-9]*\\)$/\\1/p' | sort -n) ;;
  esac
  inside=""; n=0
  for i in "${given[@]}"; do
    case "$i" in
      ''|*[!0-9]*) cri "Slurm's GPU list '$(IFS=,; echo "${given[*]}")' on $node names no GPU index"; FAIL 125 ;;
    esac
    f="${files[$i]:-}"
    if [ -z "$f" ] || [ ! -c "$f" ]; then
      cri "Slurm gave GPU $i on $node, but $devdir has ${#files[@]} GPU device node(s)"; FAIL 125
    fi
    gpu+=(--device "$f:/dev/INSIDE$(basename "$f")")
    inside="$inside${inside:+,}$n"; n=$((n + 1))
  done
  for c in CONTROL; do
    if [ -c "$devdir/$c" ]; then gpu+=(--device "$devdir/$c:/dev/$c"); fi
  done
  # Inside, the GPUs are 0..n-1, as CUDA numbers what it can see (execute/devices/gpu.py).
  gpu+=(ENV--env "HETFLOW_SLURM_GPUS=$(IFS=,; echo "${given[*]}")")
"""


# vendor -> (folder under the device dir, file prefix, control nodes, visibility variables)
_VENDOR: Mapping[str, tuple[str, str, str, tuple[str, ...]]] = {
    "nvidia": (
        "",
        "nvidia",
        "nvidiactl nvidia-uvm nvidia-uvm-tools",
        ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    ),
    "amd": ("dri", "renderD", "kfd", ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")),
    "intel": ("dri", "renderD", "", ("ZE_AFFINITY_MASK",)),
}


def gpu_devices(
    settings: SlurmSettings, fail: str, vendor: str = "nvidia", env: Mapping[str, str] | None = None
) -> str:
    """The ``_GPU_DEVICES`` block for a script whose exit function is ``fail``: the
    ``vendor``'s device nodes and variables, plus ``env`` (MPS limits) for the container."""
    q = shlex.quote
    cases = "".join(
        f"    {q(node)}) files=({' '.join(q(f) for f in files)}) ;;\n" for node, files in settings.gres_files.items()
    )
    subdir, prefix, control, names = _VENDOR[vendor]
    pairs = [f'--env "{name}=$inside"' for name in names] + [f"--env {q(f'{k}={v}')}" for k, v in (env or {}).items()]
    return (
        _GPU_DEVICES.replace("CASES", cases)
        .replace("FAIL", fail)
        .replace("SUBDIR", subdir)
        .replace("PREFIX", f"{subdir}/{prefix}" if subdir else prefix)
        .replace("NODE", prefix)
        .replace("INSIDE", f"{subdir}/" if subdir else "")
        .replace("CONTROL", control or "none")
        .replace("ENV", " ".join(pairs) + "\n        ")
    )


def device_dir(settings: SlurmSettings) -> str:
    """Shell: the folder of the node's GPU device nodes (``{node}``: the Slurm node name)."""
    q = shlex.quote
    prefix, _, suffix = settings.device_dir.partition("{node}")
    return q(prefix) + ('"$node"' + q(suffix) if "{node}" in settings.device_dir else "")
