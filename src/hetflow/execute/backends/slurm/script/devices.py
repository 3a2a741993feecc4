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
from hetflow.execute.devices.migtable import MigInstance

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


# Shell: a MIG job's one instance (``execute.devices.migtable``).  Slurm gives its gres index
# (SLURM_JOB_GPUS) and, where it detects MIG through NVML, the instance's UUID in
# CUDA_VISIBLE_DEVICES; the node's table (slurm.mig_devices) says which UUID and device files
# that is.  The container gets the parent GPU's node, only the instance's nvidia-caps nodes,
# the control nodes and NVIDIA_VISIBLE_DEVICES=CUDA_VISIBLE_DEVICES=MIG-..., as on this
# machine (``execute/devices/gpu.py``, ``_nvidia_mig``).
_MIG_DEVICES = """  migs=()
  case "$node" in
CASES  esac
  pick=""
  for m in "${migs[@]}"; do  # Slurm's UUID first, then its gres index
    read -r idx uuid _ <<< "$m"
    if [ "$uuid" = "${CUDA_VISIBLE_DEVICES:-}" ]; then pick="$m"; break; fi
  done
  if [ -z "$pick" ]; then
    for m in "${migs[@]}"; do
      read -r idx uuid _ <<< "$m"
      if [ "${#given[@]}" = 1 ] && [ "$idx" = "${given[0]}" ]; then pick="$m"; break; fi
    done
  fi
  if [ -z "$pick" ]; then
    cri "Slurm gave MIG gres '$(IFS=,; echo "${given[*]}")' on $node, but slurm.mig_devices lists" \
      "no such instance of $node (${#migs[@]} listed); add it"
    FAIL 125
  fi
  read -r idx uuid gpu_uuid profile mfiles <<< "$pick"
  IFS=, read -r -a mfiles <<< "$mfiles"
  for f in "${mfiles[@]}"; do
    if [ ! -c "$f" ]; then cri "MIG instance $uuid on $node: $f is not a device node"; FAIL 125; fi
    b=$(basename "$f")
    case "$b" in nvidia-cap*) gpu+=(--device "$f:/dev/nvidia-caps/$b") ;; *) gpu+=(--device "$f:/dev/$b") ;; esac
  done
  for c in nvidiactl nvidia-uvm nvidia-uvm-tools; do
    if [ -c "$devdir/$c" ]; then gpu+=(--device "$devdir/$c:/dev/$c"); fi
  done
  gpu+=(--env "NVIDIA_VISIBLE_DEVICES=$uuid" --env "CUDA_VISIBLE_DEVICES=$uuid" --env "HETFLOW_MIG_UUID=$uuid"
        --env "NVIDIA_DRIVER_CAPABILITIES=compute,utility" --env "HETFLOW_SLURM_GPUS=$(IFS=,; echo "${given[*]}")")
  if [ "$gpu_uuid" != - ]; then gpu+=(--env "HETFLOW_GPU_UUIDS=$gpu_uuid"); fi
"""


def mig_devices(settings: SlurmSettings, fail: str) -> str:
    """The ``_MIG_DEVICES`` block for a script whose exit function is ``fail``: each node's
    instances as ``INDEX UUID GPU_UUID PROFILE FILE,FILE,...`` words."""
    q = shlex.quote
    cases = "".join(
        f"    {q(node)}) migs=({' '.join(q(_mig_word(m)) for m in instances)}) ;;\n"
        for node, instances in settings.mig_devices.items()
    )
    return _MIG_DEVICES.replace("CASES", cases).replace("FAIL", fail)


def _mig_word(m: MigInstance) -> str:
    return f"{m.index} {m.uuid} {m.gpu_uuid or '-'} {m.profile} {','.join(m.files)}"
