"""GPU probe through NVML, the library behind ``nvidia-smi``.

The seam is the ``nvml`` argument: the ``pynvml`` module (from nvidia-ml-py) in
production, ``hetflow.inventory.fakes.FakeNvml`` in tests.  A machine without the
NVIDIA driver is normal, so "NVML is not usable" is the answer ``None``, not an error.
"""

from __future__ import annotations

import logging
from typing import Any

from hetflow.inventory.models import Gpu

log = logging.getLogger(__name__)


def _text(value: str | bytes) -> str:
    # pynvml before 11.5 returned bytes for names, UUIDs and versions; later ones str.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version as "major.minor": 12040 -> "12.4".

    NVML encodes it as ``1000 * major + 10 * minor`` (nvml.h, cudaDriverGetVersion).
    """
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def _load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:  # nvidia-ml-py is a dependency, but a broken install is possible
        return None
    return pynvml


def _device(nvml: Any, index: int, driver: str, cuda: str | None) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
    return Gpu(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=_text(nvml.nvmlDeviceGetName(handle)),
        memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=f"{major}.{minor_cc}",
        driver_version=driver,
        cuda_version=cuda,
        device_path=f"/dev/nvidia{minor}",
        minor=minor,
    )


def _cuda_or_none(nvml: Any, errors: tuple[type[BaseException], ...]) -> str | None:
    # Drivers older than 418 lack the _v2 call; the CUDA version is optional in Gpu.
    catch: tuple[type[BaseException], ...] = (*errors, AttributeError)
    try:
        return cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    except catch:
        return None


def probe_nvml(nvml: object | None = None) -> list[Gpu] | None:
    """The GPUs NVML sees, in NVML index order; ``None`` when NVML is not usable.

    ``nvml`` is the ``pynvml`` module (imported when None) or a fake with the same
    functions.  Not usable means: pynvml cannot be imported, the library is missing,
    the driver is not loaded, or any query fails (a GPU that fell off the bus makes
    the whole answer untrustworthy, so the caller falls back to procfs).
    """
    api: Any = _load_pynvml() if nvml is None else nvml
    if api is None:
        return None
    # pynvml raises NVMLError subclasses; OSError covers a libnvidia-ml.so that exists
    # but cannot be loaded (wrong architecture, missing dependency).
    errors: tuple[type[BaseException], ...] = (getattr(api, "NVMLError", OSError), OSError)
    try:
        api.nvmlInit()
    except errors as err:
        log.debug("NVML not usable: %s", err)
        return None
    try:
        driver = _text(api.nvmlSystemGetDriverVersion())
        cuda = _cuda_or_none(api, errors)
        return [_device(api, i, driver, cuda) for i in range(int(api.nvmlDeviceGetCount()))]
    except errors as err:
        log.warning("NVML initialised but a query failed (%s); not trusting its answer", err)
        return None
    finally:
        try:
            api.nvmlShutdown()
        except errors as err:
            log.debug("nvmlShutdown failed: %s", err)
