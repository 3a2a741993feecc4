"""The shell that gives a Slurm job's container the GPUs Slurm assigned, shared by the
single-step script (``translate``) and a gang's task script (``gang``)."""

from __future__ import annotations

import shlex

from hetflow.execute.backends.slurm.settings import SlurmSettings

# Shell, shared by the single-step and the gang scripts: the GPUs whose gres indices are in
# the array ``given`` become ``gpu`` (podman's --device and --env arguments).  Slurm numbers
# a node's GPUs by gres index, their place in gres.conf's File= list (Slurm 22.05,
# gres_common.c), not by device minor: index i is the i-th file.  ``FAIL`` is the script's
# way out (it records the exit code); ``cri`` writes to the step's log.
_GPU_DEVICES = """  files=()
  case "$node" in
CASES    *) while read -r m; do files+=("$devdir/nvidia$m"); done < <(
         ls -1 "$devdir" 2>/dev/null | sed -n 's/^nvidia\\([0-9][0-9]*\\)$/\\1/p' | sort -n) ;;
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
    gpu+=(--device "$f:/dev/$(basename "$f")")
    inside="$inside${inside:+,}$n"; n=$((n + 1))
  done
  for c in nvidiactl nvidia-uvm nvidia-uvm-tools; do
    if [ -c "$devdir/$c" ]; then gpu+=(--device "$devdir/$c:/dev/$c"); fi
  done
  # Inside, the GPUs are 0..n-1, as CUDA numbers what it can see (execute/gpu.py).
  gpu+=(--env "NVIDIA_VISIBLE_DEVICES=$inside" --env "CUDA_VISIBLE_DEVICES=$inside"
        --env "HETFLOW_SLURM_GPUS=$(IFS=,; echo "${given[*]}")")
"""


def gpu_devices(settings: SlurmSettings, fail: str) -> str:
    """The ``_GPU_DEVICES`` block for a script whose exit function is ``fail``."""
    q = shlex.quote
    cases = "".join(
        f"    {q(node)}) files=({' '.join(q(f) for f in files)}) ;;\n" for node, files in settings.gres_files.items()
    )
    return _GPU_DEVICES.replace("CASES", cases).replace("FAIL", fail)


def device_dir(settings: SlurmSettings) -> str:
    """Shell: the folder of the node's GPU device nodes (``{node}``: the Slurm node name)."""
    q = shlex.quote
    prefix, _, suffix = settings.device_dir.partition("{node}")
    return q(prefix) + ('"$node"' + q(suffix) if "{node}" in settings.device_dir else "")
