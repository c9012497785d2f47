"""NVML through nvidia-ml-py, behind one choke point that never lets an NVML exception out.

Every call goes through ``Nvml.query``: "not supported" and similar per-field answers become None,
so callers render "N/A" instead of crashing. Opening NVML on a machine without the driver gives a
fact (``NvmlStatus(available=False, reason="NVML library not found ...")``), not an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

_UNAVAILABLE_REASONS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML library not found (no NVIDIA driver installed)",
    "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA driver installed but not loaded",
    "NVML_ERROR_NO_PERMISSION": "no permission to talk to the NVIDIA driver",
    "NVML_ERROR_INSUFFICIENT_SIZE": "the NVIDIA driver is older than nvidia-ml-py expects",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "the NVIDIA driver is older than nvidia-ml-py expects",
}


@dataclass(frozen=True)
class NvmlStatus:
    """Whether NVML could be opened and, if not, why in words a person can act on."""

    available: bool
    reason: str | None = None


@dataclass(frozen=True)
class GpuDevice:
    """Static facts of one GPU as NVML reports them; a field NVML cannot give is None."""

    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int | None
    compute_capability: str | None
    pci_bus_id: str | None
    lost: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _decode(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _error_name(lib: ModuleType, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    for name in dir(lib):
        if name.startswith("NVML_ERROR_") and getattr(lib, name) == code:
            return name
    return "NVML_ERROR_UNKNOWN"


def _load_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


class Nvml:
    """A session with NVML. ``lib`` is the pynvml module, or a fake of it in tests."""

    def __init__(self, lib: ModuleType | None = None) -> None:
        self._lib = lib if lib is not None else _load_pynvml()
        self._open = False

    def open(self) -> NvmlStatus:
        """Initialise NVML; report why not instead of raising."""
        if self._lib is None:
            return NvmlStatus(False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        try:
            self._lib.nvmlInit()
        except self._lib.NVMLError as exc:
            name = _error_name(self._lib, exc)
            return NvmlStatus(False, _UNAVAILABLE_REASONS.get(name, f"NVML failed to start ({name})"))
        except OSError as exc:
            return NvmlStatus(False, f"NVML library could not be loaded ({exc})")
        self._open = True
        return NvmlStatus(True)

    def close(self) -> None:
        if self._open and self._lib is not None:
            self.query(self._lib.nvmlShutdown)
            self._open = False

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def query(self, fn: Callable[..., T], *args: Any) -> T | None:
        """Call one NVML function; None for any NVML error (not supported, GPU lost, ...)."""
        assert self._lib is not None
        try:
            return _decode(fn(*args))
        except self._lib.NVMLError:
            return None

    def call(self, fn: Callable[..., T], *args: Any) -> tuple[T | None, str | None]:
        """Call one NVML function; (value, None) or (None, "NVML_ERROR_...") so callers can tell a
        field the card lacks from a GPU that fell off the bus."""
        assert self._lib is not None
        try:
            return _decode(fn(*args)), None
        except self._lib.NVMLError as exc:
            return None, _error_name(self._lib, exc)

    @property
    def lib(self) -> ModuleType:
        """The pynvml module (or its fake) this session talks to; only valid after a successful open."""
        assert self._lib is not None
        return self._lib

    def driver_version(self) -> str | None:
        return self.query(self._lib.nvmlSystemGetDriverVersion) if self._lib else None

    def cuda_driver_version(self) -> str | None:
        """The newest CUDA version the driver supports, e.g. '12.4' (from 12040)."""
        if self._lib is None:
            return None
        getter = getattr(self._lib, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
            self._lib, "nvmlSystemGetCudaDriverVersion", None
        )
        version = self.query(getter) if getter else None
        if not isinstance(version, int):
            return None
        return f"{version // 1000}.{version % 1000 // 10}"

    def device_count(self) -> int:
        count = self.query(self._lib.nvmlDeviceGetCount) if self._lib else None
        return count or 0

    def device(self, index: int) -> GpuDevice:
        """Static facts of GPU ``index``; a GPU that fell off the bus comes back with lost=True."""
        lib = self._lib
        assert lib is not None
        handle = self.query(lib.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return GpuDevice(index, "unknown (GPU lost or inaccessible)", None, None, None, None, lost=True)
        name = self.query(lib.nvmlDeviceGetName, handle) or "unknown"
        memory = self.query(lib.nvmlDeviceGetMemoryInfo, handle)
        capability = self.query(lib.nvmlDeviceGetCudaComputeCapability, handle)
        pci = self.query(lib.nvmlDeviceGetPciInfo, handle)
        return GpuDevice(
            index=index,
            name=name,
            uuid=self.query(lib.nvmlDeviceGetUUID, handle),
            memory_total_bytes=int(memory.total) if memory is not None else None,
            compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
            pci_bus_id=_decode(pci.busId) if pci is not None else None,
        )

    def devices(self) -> list[GpuDevice]:
        return [self.device(index) for index in range(self.device_count())]
