"""A stand-in for the pynvml module, answering from a JSON fixture and raising real NVML errors."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent.parent / "fixtures"


class FakePynvml:
    """Mimics the subset of pynvml that gpufly calls; error constants and classes are pynvml's own."""

    NVMLError = pynvml.NVMLError

    def __init__(self, fixture: dict[str, Any] | None = None, init_error: int | None = None,
                 lost: tuple[int, ...] = ()) -> None:
        self._data = fixture or {"devices": []}
        self._init_error = init_error
        self._lost = set(lost)
        self.calls: list[str] = []
        for name in dir(pynvml):
            if name.startswith("NVML_ERROR_"):
                setattr(self, name, getattr(pynvml, name))

    @classmethod
    def from_fixture(cls, name: str, **kwargs: Any) -> FakePynvml:
        return cls(json.loads((FIXTURES / name).read_text()), **kwargs)

    def _device(self, handle: int, call: str) -> dict[str, Any]:
        self.calls.append(call)
        if handle in self._lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        device = self._data["devices"][handle]
        if call in device.get("not_supported", []):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self._init_error is not None:
            raise pynvml.NVMLError(self._init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._data["driver_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self._data["cuda_driver_version"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self._data["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index in self._lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._device(handle, "nvmlDeviceGetName")["name"]

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._device(handle, "nvmlDeviceGetUUID")["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        total = self._device(handle, "nvmlDeviceGetMemoryInfo")["memory_total"]
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return tuple(self._device(handle, "nvmlDeviceGetCudaComputeCapability")["compute_capability"])

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._device(handle, "nvmlDeviceGetPciInfo")["pci_bus_id"])
