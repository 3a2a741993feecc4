"""``HETFLOW_GPU_SHARING``: how this machine shares each GPU, as ``GpuSharing``.

    exclusive                       one container per GPU (the default)
    time-slicing:4                  up to 4 containers take turns on a GPU (the NVIDIA
                                    device plugin's ``timeSlicing.resources[].replicas``)
    time-slicing:4,slowdown=0.5     ... with the planner's modeled slowdown per unit of
                                    load above 1 (default DEFAULT_TIMESLICE_SLOWDOWN)
    mps:4                           up to 4 MPS clients at once, each held to its share
    mps:4,memory=10Gi               ... each pinned to at most 10 GiB of device memory

Words are case-insensitive; ``timeslicing``/``time_slicing`` are accepted for
``time-slicing``.  A bad value is an ``InventoryError`` naming the variable and value.
"""

from __future__ import annotations

from pydantic import ValidationError

from hetflow.errors import InventoryError
from hetflow.inventory.models import GpuSharing
from hetflow.spec import parse_memory

SHARING_VAR = "HETFLOW_GPU_SHARING"
_EXAMPLES = "exclusive, time-slicing:4, time-slicing:4,slowdown=0.5, mps:4 or mps:4,memory=10Gi"
_MODES = {"exclusive": "exclusive", "time-slicing": "time-slicing", "timeslicing": "time-slicing", "mps": "mps"}


def _bad(text: str, why: str) -> InventoryError:
    return InventoryError(f"{SHARING_VAR}={text!r}: {why}; write one of {_EXAMPLES}")


def parse_gpu_sharing(text: str) -> GpuSharing:
    """``"time-slicing:4,slowdown=0.5"`` -> GpuSharing(mode="time-slicing", replicas=4,
    slowdown=0.5); ``""`` is exclusive."""
    raw = text.strip()
    if not raw:
        return GpuSharing()
    head, *options = (part.strip() for part in raw.split(","))
    word, _, count = head.partition(":")
    mode = _MODES.get(word.strip().lower().replace("_", "-"))
    if mode is None:
        raise _bad(text, f"{word.strip()!r} is not a sharing mode")
    fields: dict[str, object] = {"mode": mode}
    if mode == "exclusive":
        if count.strip() or options:
            raise _bad(text, "exclusive takes no count or options")
        return GpuSharing()
    if not count.strip().isdigit():
        raise _bad(text, f"{mode} needs a replica count of 2 or more after ':'")
    fields["replicas"] = int(count)
    for option in filter(None, options):
        key, sep, value = (x.strip() for x in option.partition("="))
        try:
            if sep and key.lower() == "slowdown" and mode == "time-slicing":
                fields["slowdown"] = float(value)
            elif sep and key.lower() == "memory" and mode == "mps":
                fields["mps_memory_limit"] = parse_memory(value)
            else:
                allowed = "slowdown=X" if mode == "time-slicing" else "memory=SIZE"
                raise _bad(text, f"{option!r} is not an option of {mode} (it takes {allowed})")
        except ValueError as err:
            raise _bad(text, f"{option!r}: {err}") from None
    try:
        return GpuSharing.model_validate(fields)
    except ValidationError as err:
        why = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {str(e['msg']).removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise _bad(text, why) from None
