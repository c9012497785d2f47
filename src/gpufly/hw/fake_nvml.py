"""A stand-in for the pynvml module that replays a recorded machine, raising NVML's own errors.

Shipped with gpufly (as httpx ships ``MockTransport``) so that tests, demos and users can run any
command against a recorded machine: set ``GPUFLY_NVML_FIXTURE=path/to/fixture.json`` and
``gpufly.hw.load_pynvml()`` returns this fake. Fixtures are recorded by ``scripts/record_nvml_fixture.py``.

The fixture is JSON in the units NVML returns (mW, mJ, KB/s, MHz, bytes)::

    {"driver_version": "550.54.15", "cuda_driver_version": 12040,
     "init_error": "NVML_ERROR_LIBRARY_NOT_FOUND",       # optional: nvmlInit fails with this code
     "lost": [1],                                         # optional: GPUs that have fallen off the bus
     "raises": {"nvmlDeviceGetPowerUsage": "RuntimeError: driver reloading"},  # optional: a broken binding
     "devices": [{"name": ..., "uuid": ..., "memory_total": ..., "memory_used": ..., "not_supported": [...],
                  "utilization": [gpu, memory], "power_mw": ..., "clocks_mhz": {"sm": ..., "mem": ...}, ...}]}

XID events: a device's ``"events"`` list holds what the driver will deliver, each ``{"xid": 79}`` or
``{"ecc": "double_bit"}``; a reader registered for them (``nvmlDeviceRegisterEvents``) gets them one per
``nvmlEventSetWait`` (then NVML_ERROR_TIMEOUT), and ``emit(index, xid)`` adds one while a reader runs. The GPU
offers XID events (plus ECC events where it has ``ecc_volatile``) unless ``"supported_events"`` gives another
mask; listing ``nvmlDeviceRegisterEvents`` in ``not_supported`` makes the registration refused, as on WSL.

A key a device lacks, a call listed in its ``not_supported``, and any NVML function this fake has no
answer for all raise ``NVMLError(NVML_ERROR_NOT_SUPPORTED)``, as a card without that sensor does; so a
reader that learns a new call needs no fixture change to keep running.

``FakePynvml.node(gpus, pids, processes_per_gpu)`` builds a machine of any size without a file (the monitor's
scaling benchmark and tests: 32 GeForce-like GPUs with 8 processes each), and ``fail(call, exc)`` (or the
fixture's ``raises``, with one of ``BINDING_FAILURES``) makes one call raise an exception that is not an
NVMLError, as a broken binding or a driver being reloaded does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pynvml

from gpufly.errors import GpuflyError

FakeClass = TypeVar("FakeClass", bound=type)

Handle = int | tuple[int, int]
"""A GPU's index, or (parent index, slot) for a MIG instance."""


GEFORCE_NOT_SUPPORTED: tuple[str, ...] = (
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetProcessUtilization",
)
"""Calls a GeForce card answers NotSupported (no ECC, no MIG; the power limit and per-process utilization
depend on the board and driver): each costs an NVMLError on every sample, as on a real consumer card."""


BINDING_FAILURES: dict[str, type[Exception]] = {
    kind.__name__: kind for kind in (RuntimeError, OSError, TypeError, AttributeError, ValueError)}
"""The exceptions a fixture's ``raises`` may name: what a broken pynvml or a driver being reloaded raises."""


def _binding_failure(spec: str) -> Exception:
    """``"RuntimeError: driver reloading"`` as the exception it names."""
    kind, _, message = spec.partition(":")
    if kind.strip() not in BINDING_FAILURES:
        raise ValueError(f"'raises' names {kind.strip()!r}; use one of {', '.join(BINDING_FAILURES)}")
    return BINDING_FAILURES[kind.strip()](message.strip())


def _not_supported(*args: Any) -> Any:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def node_fixture(gpus: int, pids: Sequence[int] = (), processes_per_gpu: int = 0,
                 not_supported: Sequence[str] = GEFORCE_NOT_SUPPORTED) -> dict[str, Any]:
    """A recorded machine of ``gpus`` identical GeForce cards, each running ``processes_per_gpu`` of ``pids``.

    GPU i lists the pids from position ``i * processes_per_gpu`` on, wrapping round, so with fewer pids than
    slots a process appears on several GPUs (one process driving many GPUs, as a data loader or a DDP-less job).
    """
    def device(index: int) -> dict[str, Any]:
        start = index * processes_per_gpu
        listed = [pids[(start + slot) % len(pids)] for slot in range(processes_per_gpu)] if pids else []
        return {
            "name": "NVIDIA GeForce RTX 4090", "uuid": f"GPU-00000000-0000-0000-0000-{index:012d}",
            "memory_total": 25757220864, "memory_used": 2**30 * (1 + len(listed)), "compute_capability": [8, 9],
            "pci_bus_id": f"00000000:{index + 1:02X}:00.0", "minor_number": index, "utilization": [88, 41],
            "power_mw": 402000, "power_limit_mw": 450000, "energy_mj": 123456789, "temperature_c": 66,
            "fan_percent": 54, "clocks_mhz": {"sm": 2520, "mem": 10501}, "max_clocks_mhz": {"sm": 3105, "mem": 10501},
            "pcie_kb_per_s": {"tx": 4096, "rx": 65536}, "clocks_event_reasons": 0,
            "processes": {"compute": [{"pid": pid, "used_memory": 2**30} for pid in dict.fromkeys(listed)],
                          "graphics": []},
            "not_supported": list(not_supported),
        }

    return {"driver_version": "550.54.15", "cuda_driver_version": 12040,
            "devices": [device(index) for index in range(gpus)]}


class FakeEventSet:
    """What ``nvmlEventSetCreate`` returns: the GPUs registered on it, each with its event mask."""

    def __init__(self) -> None:
        self.devices: dict[int, int] = {}
        self.freed = False


def _raising(exc: BaseException) -> Any:
    def call(*args: Any) -> Any:
        raise exc.with_traceback(None)  # a fresh traceback on every call, not one growing across calls

    return call


def _with_nvml_constants(cls: FakeClass) -> FakeClass:
    """The class with pynvml's own constants (NVML_CLOCK_SM, NVML_ERROR_*...), copied once, not per fake."""
    for name in dir(pynvml):
        if name.startswith("NVML_"):
            setattr(cls, name, getattr(pynvml, name))
    return cls


@_with_nvml_constants
class FakePynvml:
    """Mimics the part of pynvml that gpufly calls; error constants and classes are pynvml's own."""

    NVMLError = pynvml.NVMLError

    def __init__(self, fixture: dict[str, Any] | None = None, init_error: int | None = None,
                 lost: tuple[int, ...] = ()) -> None:
        self._data = fixture or {"devices": []}
        named_error = self._data.get("init_error")
        self._init_error = init_error if named_error is None else getattr(pynvml, named_error)
        self._lost = set(lost) | set(self._data.get("lost", []))
        self.calls: list[str] = []
        for call, spec in self._data.get("raises", {}).items():
            self.fail(call, _binding_failure(spec))

    @classmethod
    def node(cls, gpus: int, pids: Sequence[int] = (), processes_per_gpu: int = 0,
             not_supported: Sequence[str] = GEFORCE_NOT_SUPPORTED) -> FakePynvml:
        """The fake for a machine built in code (``node_fixture``): any number of GPUs and processes."""
        return cls(node_fixture(gpus, pids, processes_per_gpu, not_supported))

    @classmethod
    def from_file(cls, path: Path, **kwargs: Any) -> FakePynvml:
        """The fake for a fixture file; a GpuflyError when the file cannot be read as one."""
        try:
            return cls(json.loads(path.read_text(encoding="utf-8")), **kwargs)
        except (OSError, ValueError) as exc:
            raise GpuflyError(f"cannot read the NVML fixture {path}: {exc}",
                              "unset GPUFLY_NVML_FIXTURE, or point it at a file from scripts/record_nvml_fixture.py"
                              ) from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):
            return _not_supported
        raise AttributeError(name)

    # --- faults a test can set while a reader runs

    def lose(self, index: int) -> None:
        """The GPU falls off the bus: every later call on it raises GPU_IS_LOST."""
        self._lost.add(index)

    def fail(self, call: str, exc: BaseException | None) -> None:
        """Make every later ``call`` (``"nvmlInit"``, ``"nvmlDeviceGetPowerUsage"``...) raise ``exc``, as a
        broken binding or a driver being reloaded does (a RuntimeError, OSError, TypeError...); None heals it."""
        if exc is None:
            self.__dict__.pop(call, None)
        else:
            setattr(self, call, _raising(exc))  # an instance attribute shadows the method of that name

    def emit(self, index: int, xid: int | None = None, ecc: str | None = None) -> None:
        """The driver raises XID ``xid`` (or an ECC event, ``ecc="double_bit"``) on GPU ``index``."""
        self._data["devices"][index].setdefault("events", []).append({"xid": xid} if ecc is None else {"ecc": ecc})

    def set_processes(self, index: int, compute: list[dict[str, Any]],
                      graphics: tuple[dict[str, Any], ...] | list[dict[str, Any]] = ()) -> None:
        self._data["devices"][index]["processes"] = {"compute": list(compute), "graphics": list(graphics)}

    def device_data(self, index: int) -> dict[str, Any]:
        """The recorded answers of GPU ``index``, to change in place (a reading that moves)."""
        return self._data["devices"][index]

    # --- lookups

    def _device(self, handle: Handle, call: str) -> dict[str, Any]:
        self.calls.append(call)
        parent = handle[0] if isinstance(handle, tuple) else handle
        if parent in self._lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        device = self._data["devices"][parent]
        if call in device.get("not_supported", []):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if isinstance(handle, tuple):
            return device["mig_devices"][handle[1]]
        return device

    def _field(self, handle: Handle, call: str, key: str) -> Any:
        device = self._device(handle, call)
        if key not in device:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device[key]

    # --- system

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

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        for device in self._data["devices"]:
            for kind in ("compute", "graphics"):
                for process in (device.get("processes") or {}).get(kind, []):
                    if process["pid"] == pid and "name" in process:
                        return process["name"].encode()
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetCount(self) -> int:
        return len(self._data["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index in self._lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    # --- identity and static facts

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        return self._field(handle, "nvmlDeviceGetName", "name")

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return self._field(handle, "nvmlDeviceGetUUID", "uuid")

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetMinorNumber", "minor_number")

    def nvmlDeviceGetCudaComputeCapability(self, handle: Handle) -> tuple[int, int]:
        return tuple(self._field(handle, "nvmlDeviceGetCudaComputeCapability", "compute_capability"))

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> SimpleNamespace:
        return SimpleNamespace(busId=self._field(handle, "nvmlDeviceGetPciInfo", "pci_bus_id"))

    def _part(self, handle: Handle, call: str, key: str, part: str) -> Any:
        """One part of a recorded group (``clocks_mhz.sm``); a part the recording lacks is not supported."""
        group = self._field(handle, call, key)
        if part not in group:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return group[part]

    def _pcie(self, handle: Handle, call: str, part: str) -> int:
        return self._part(handle, call, "pcie", part)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetCurrPcieLinkGeneration", "gen_current")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetMaxPcieLinkGeneration", "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetCurrPcieLinkWidth", "width_current")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetMaxPcieLinkWidth", "width_max")

    def nvmlDeviceGetPersistenceMode(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetPersistenceMode", "persistence_mode")

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, clock: int) -> int:
        key = "sm" if clock == pynvml.NVML_CLOCK_SM else "mem"
        return self._part(handle, "nvmlDeviceGetMaxClockInfo", "max_clocks_mhz", key)

    # --- dynamic state

    def nvmlDeviceGetMemoryInfo(self, handle: Handle) -> SimpleNamespace:
        device = self._device(handle, "nvmlDeviceGetMemoryInfo")
        if "memory_total" not in device:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        total = device["memory_total"]
        free = device.get("memory_free", total - device.get("memory_used", 0))
        return SimpleNamespace(total=total, free=free, used=total - free)

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> SimpleNamespace:
        gpu, memory = self._field(handle, "nvmlDeviceGetUtilizationRates", "utilization")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetPowerUsage", "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetTotalEnergyConsumption", "energy_mj")

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        return self._field(handle, "nvmlDeviceGetTemperature", "temperature_c")

    def nvmlDeviceGetFanSpeed(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetFanSpeed", "fan_percent")

    def nvmlDeviceGetClockInfo(self, handle: Handle, clock: int) -> int:
        key = "sm" if clock == pynvml.NVML_CLOCK_SM else "mem"
        return self._part(handle, "nvmlDeviceGetClockInfo", "clocks_mhz", key)

    def nvmlDeviceGetPcieThroughput(self, handle: Handle, counter: int) -> int:
        key = "tx" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "rx"
        return self._part(handle, "nvmlDeviceGetPcieThroughput", "pcie_kb_per_s", key)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        return self._field(handle, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons")

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        """Fixture key ``remapped_rows``: ``{"correctable": 0, "uncorrectable": 1, "pending": true, "failed": false}``
        (NVML answers the four in this order)."""
        rows = self._field(handle, "nvmlDeviceGetRemappedRows", "remapped_rows")
        return rows["correctable"], rows["uncorrectable"], int(rows["pending"]), int(rows["failed"])

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Handle) -> int:
        return int(self._field(handle, "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending"))

    def nvmlDeviceGetTotalEccErrors(self, handle: Handle, error_type: int, counter: int) -> int:
        key = "corrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        return self._part(handle, "nvmlDeviceGetTotalEccErrors", "ecc_volatile", key)

    def nvmlDeviceGetEccMode(self, handle: Handle) -> tuple[int, int]:
        mode = self._field(handle, "nvmlDeviceGetEccMode", "ecc_mode")
        return tuple(mode) if isinstance(mode, list) else (mode, mode)

    # --- events

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        device = self._device(handle, "nvmlDeviceGetSupportedEventTypes")
        ecc = pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
        return device.get("supported_events",
                          pynvml.nvmlEventTypeXidCriticalError | (ecc if "ecc_volatile" in device else 0))

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self.calls.append("nvmlEventSetCreate")
        return FakeEventSet()

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: FakeEventSet) -> None:
        """Refused (NOT_SUPPORTED) when a requested type is not offered, as NVML documents."""
        if event_types & ~self.nvmlDeviceGetSupportedEventTypes(handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._device(handle, "nvmlDeviceRegisterEvents")
        event_set.devices[handle] = event_types

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        """The next event of a registered GPU (never waits: a recording has no future); TIMEOUT when none."""
        self.calls.append("nvmlEventSetWait_v2")
        return self._next_event(event_set)

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        """The older entry point (drivers before R470), answering as ``_v2`` does."""
        self.calls.append("nvmlEventSetWait")
        return self._next_event(event_set)

    def _next_event(self, event_set: FakeEventSet) -> SimpleNamespace:
        for index, mask in event_set.devices.items():
            pending = self._data["devices"][index].get("events", [])
            while pending:
                event = pending.pop(0)
                if "xid" in event:
                    kind, data = pynvml.nvmlEventTypeXidCriticalError, event["xid"]
                else:
                    kind, data = (pynvml.nvmlEventTypeDoubleBitEccError if event["ecc"] == "double_bit"
                                  else pynvml.nvmlEventTypeSingleBitEccError), 0
                if kind & mask:
                    return SimpleNamespace(device=index, eventType=kind, eventData=data, gpuInstanceId=0,
                                           computeInstanceId=0)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self.calls.append("nvmlEventSetFree")
        event_set.freed = True

    # --- MIG

    def nvmlDeviceGetMigMode(self, handle: Handle) -> tuple[int, int]:
        mode = self._field(handle, "nvmlDeviceGetMigMode", "mig_mode")
        return tuple(mode) if isinstance(mode, list) else (mode, mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        return len(self._field(handle, "nvmlDeviceGetMaxMigDeviceCount", "mig_devices"))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, slot: int) -> tuple[int, int]:
        devices = self._field(handle, "nvmlDeviceGetMigDeviceHandleByIndex", "mig_devices")
        if devices[slot] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle, slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[int, int]) -> int:
        return self._field(handle, "nvmlDeviceGetGpuInstanceId", "gpu_instance_id")

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[int, int]) -> int:
        return self._field(handle, "nvmlDeviceGetComputeInstanceId", "compute_instance_id")

    # --- processes

    def _processes(self, handle: int, call: str, kind: str) -> list[SimpleNamespace]:
        entries = self._field(handle, call, "processes").get(kind, [])
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
