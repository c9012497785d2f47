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
            if name.startswith("NVML_"):
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
        return self._field(handle, "nvmlDeviceGetName", "name")

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._field(handle, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        call = "nvmlDeviceGetMemoryInfo"
        device = self._mig(handle, call) if isinstance(handle, tuple) else self._device(handle, call)
        total, used = device["memory_total"], device.get("memory_used", 0)
        return SimpleNamespace(total=total, free=total - used, used=used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return tuple(self._device(handle, "nvmlDeviceGetCudaComputeCapability")["compute_capability"])

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._device(handle, "nvmlDeviceGetPciInfo")["pci_bus_id"])

    # --- dynamic fields, for the monitor: each reads a key of the device; a missing key is "not supported"

    def lose(self, index: int) -> None:
        """The GPU falls off the bus: every later call on it raises GPU_IS_LOST."""
        self._lost.add(index)

    def _field(self, handle: Any, call: str, key: str) -> Any:
        if isinstance(handle, tuple):  # a MIG device handle: (parent, slot)
            return self._mig(handle, call)[key]
        device = self._device(handle, call)
        if key not in device:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device[key]

    def _mig(self, handle: tuple[int, int], call: str) -> dict[str, Any]:
        parent, slot = handle
        return self._device(parent, call)["mig_devices"][slot]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        gpu, memory = self._field(handle, "nvmlDeviceGetUtilizationRates", "utilization")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._field(handle, "nvmlDeviceGetPowerUsage", "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._field(handle, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return self._field(handle, "nvmlDeviceGetTotalEnergyConsumption", "energy_mj")

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return self._field(handle, "nvmlDeviceGetTemperature", "temperature_c")

    def nvmlDeviceGetFanSpeed(self, handle: int) -> int:
        return self._field(handle, "nvmlDeviceGetFanSpeed", "fan_percent")

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        key = "sm" if clock == pynvml.NVML_CLOCK_SM else "mem"
        return self._field(handle, "nvmlDeviceGetClockInfo", "clocks_mhz")[key]

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        key = "sm" if clock == pynvml.NVML_CLOCK_SM else "mem"
        return self._field(handle, "nvmlDeviceGetMaxClockInfo", "max_clocks_mhz")[key]

    def nvmlDeviceGetPcieThroughput(self, handle: int, counter: int) -> int:
        key = "tx" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "rx"
        return self._field(handle, "nvmlDeviceGetPcieThroughput", "pcie_kb_per_s")[key]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._field(handle, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons")

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        key = "corrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        return self._field(handle, "nvmlDeviceGetTotalEccErrors", "ecc_volatile")[key]

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return self._field(handle, "nvmlDeviceGetMinorNumber", "minor_number")

    def nvmlDeviceGetMigMode(self, handle: int) -> tuple[int, int]:
        mode = self._field(handle, "nvmlDeviceGetMigMode", "mig_mode")
        return (mode, mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        return len(self._field(handle, "nvmlDeviceGetMaxMigDeviceCount", "mig_devices"))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, slot: int) -> tuple[int, int]:
        devices = self._field(handle, "nvmlDeviceGetMigDeviceHandleByIndex", "mig_devices")
        if devices[slot] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle, slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[int, int]) -> int:
        return self._mig(handle, "nvmlDeviceGetGpuInstanceId")["gpu_instance_id"]

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[int, int]) -> int:
        return self._mig(handle, "nvmlDeviceGetComputeInstanceId")["compute_instance_id"]

    def _processes(self, handle: int, call: str, key: str) -> list[SimpleNamespace]:
        entries = self._field(handle, call, "processes").get(key, [])
        return [SimpleNamespace(pid=e["pid"], usedGpuMemory=e.get("used_memory")) for e in entries]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses", "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return self._processes(handle, "nvmlDeviceGetGraphicsRunningProcesses", "graphics")

    def nvmlDeviceGetProcessUtilization(self, handle: int, last_seen: int) -> list[SimpleNamespace]:
        """Per-process samples newer than ``last_seen`` (fixture key ``process_utilization``: pid, sm, time)."""
        entries = self._field(handle, "nvmlDeviceGetProcessUtilization", "process_utilization")
        return [SimpleNamespace(pid=e["pid"], smUtil=e["sm"], memUtil=0, timeStamp=e["time"]) for e in entries
                if e["time"] > last_seen]

    def set_processes(self, index: int, compute: list[dict[str, Any]], graphics: list[dict[str, Any]] = ()) -> None:
        self._data["devices"][index]["processes"] = {"compute": list(compute), "graphics": list(graphics)}
