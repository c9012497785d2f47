"""Record this machine's NVML answers as a fixture for gpufly's replaying fake (src/gpufly/hw/fake_nvml.py).

Makes every NVML call that gpufly's one GPU reader (src/gpufly/hw/gpu.py, ``GpuReader``) and its NVML
session (src/gpufly/hw/nvml.py) make: the driver and CUDA driver versions, the device count, and per GPU
its static facts (name, UUID, memory, compute capability, PCI bus id, PCIe link, MIG and persistence mode,
maximum clocks), its moving state (utilization, memory, power, energy, temperature, fan, clocks, PCIe
throughput, clock-event reasons, ECC), its processes and its MIG instances. The answers are written in the
format the fake reads (tests/fixtures/monitor/nvml_live.json): NVML's own units, the CUDA driver version
as NVML's int (12040), and a "not_supported" list per GPU of the calls that raised.

    python scripts/record_nvml_fixture.py tests/fixtures/hw/nvml_<machine>.json [--description TEXT]
    GPUFLY_NVML_FIXTURE=tests/fixtures/hw/nvml_<machine>.json gpufly top --once   # replay it

Needs nvidia-ml-py and an NVIDIA driver; exits 1 with the reason when NVML does not open. Standard
library only besides pynvml, so it runs from a bare checkout on a GPU machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

DEFAULT_DESCRIPTION = ("NVML answers recorded by scripts/record_nvml_fixture.py on a real GPU machine, in the units "
                       "NVML returns; 'not_supported' lists calls that raised NVMLError.")

Reading = tuple[str, str, tuple[tuple[str, tuple[str, ...]], ...], Callable[[Any], Any]]
"""(function, fixture key, ((part, constant names), ...), answer -> fixture value); part "" for a plain value."""

FALLBACKS: dict[str, str] = {
    "nvmlDeviceGetEnforcedPowerLimit": "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons",
}
"""The older call gpufly asks where the newer one does not answer; its answer is recorded under the newer
call's key, which the fake answers, so the replay reads the same value."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _number(value: Any) -> Any:
    return value if isinstance(value, int | float) else None


PLAIN = (("", ()),)
READINGS: tuple[Reading, ...] = (
    ("nvmlDeviceGetName", "name", PLAIN, _text),
    ("nvmlDeviceGetUUID", "uuid", PLAIN, _text),
    ("nvmlDeviceGetCudaComputeCapability", "compute_capability", PLAIN, lambda cc: [int(part) for part in cc]),
    ("nvmlDeviceGetPciInfo", "pci_bus_id", PLAIN, lambda pci: _text(pci.busId)),
    ("nvmlDeviceGetMinorNumber", "minor_number", PLAIN, int),
    ("nvmlDeviceGetCurrPcieLinkGeneration", "pcie", (("gen_current", ()),), int),
    ("nvmlDeviceGetMaxPcieLinkGeneration", "pcie", (("gen_max", ()),), int),
    ("nvmlDeviceGetCurrPcieLinkWidth", "pcie", (("width_current", ()),), int),
    ("nvmlDeviceGetMaxPcieLinkWidth", "pcie", (("width_max", ()),), int),
    ("nvmlDeviceGetPersistenceMode", "persistence_mode", PLAIN, int),
    ("nvmlDeviceGetMigMode", "mig_mode", PLAIN, lambda mode: [int(part) for part in mode]),
    ("nvmlDeviceGetEccMode", "ecc_mode", PLAIN, lambda mode: [int(part) for part in mode]),
    ("nvmlDeviceGetMaxClockInfo", "max_clocks_mhz", (("sm", ("NVML_CLOCK_SM",)), ("mem", ("NVML_CLOCK_MEM",))), int),
    ("nvmlDeviceGetClockInfo", "clocks_mhz", (("sm", ("NVML_CLOCK_SM",)), ("mem", ("NVML_CLOCK_MEM",))), int),
    ("nvmlDeviceGetUtilizationRates", "utilization", PLAIN, lambda rates: [int(rates.gpu), int(rates.memory)]),
    ("nvmlDeviceGetPowerUsage", "power_mw", PLAIN, int),
    ("nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw", PLAIN, int),
    ("nvmlDeviceGetTotalEnergyConsumption", "energy_mj", PLAIN, int),
    ("nvmlDeviceGetTemperature", "temperature_c", (("", ("NVML_TEMPERATURE_GPU",)),), int),
    ("nvmlDeviceGetFanSpeed", "fan_percent", PLAIN, int),
    ("nvmlDeviceGetPcieThroughput", "pcie_kb_per_s",
     (("tx", ("NVML_PCIE_UTIL_TX_BYTES",)), ("rx", ("NVML_PCIE_UTIL_RX_BYTES",))), int),
    ("nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons", PLAIN, int),
    ("nvmlDeviceGetTotalEccErrors", "ecc_volatile",
     (("corrected", ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC")),
      ("uncorrected", ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"))), int),
    ("nvmlDeviceGetRemappedRows", "remapped_rows", PLAIN,
     lambda rows: {"correctable": int(rows[0]), "uncorrectable": int(rows[1]), "pending": bool(rows[2]),
                   "failed": bool(rows[3])}),
    ("nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending", PLAIN, int),
)
"""Every per-GPU reading of the reader, with the fixture key (and parts) its answers fill."""

SYSTEM_CALLS = ("nvmlInit", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
                "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlShutdown")
OTHER_DEVICE_CALLS = ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses",
                      "nvmlDeviceGetGraphicsRunningProcesses", "nvmlSystemGetProcessName",
                      "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetMaxMigDeviceCount",
                      "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetGpuInstanceId",
                      "nvmlDeviceGetComputeInstanceId")
RECORDED_CALLS = frozenset({*SYSTEM_CALLS, *OTHER_DEVICE_CALLS, *(reading[0] for reading in READINGS),
                            *FALLBACKS.values()})
"""Every NVML function this recorder calls; a test holds it to the calls gpufly's reader makes."""


class RecordError(Exception):
    """NVML could not be recorded (not installed, no driver, a GPU lost); the message says which."""


def _error_name(lib: ModuleType, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    return next((name for name in dir(lib) if name.startswith("NVML_ERROR_") and getattr(lib, name) == code),
                f"NVML error {code}")


class _Recorder:
    """Calls NVML for one handle, keeping each call that raised (warning for anything but NOT_SUPPORTED)."""

    def __init__(self, lib: ModuleType, where: str, warn: Callable[[str], None]) -> None:
        self.lib, self.where, self.warn = lib, where, warn
        self.not_supported: list[str] = []

    def ask(self, call: str, *args: Any, absent: bool = False) -> Any:
        """NVML's answer, or None; ``absent=True`` where NOT_FOUND is an answer (an empty MIG slot, a process
        gone), which the fake gives back by itself and so is not recorded as a failed call."""
        try:
            return getattr(self.lib, call)(*args)
        except self.lib.NVMLError as exc:
            name = _error_name(self.lib, exc)
            if absent and name == "NVML_ERROR_NOT_FOUND":
                return None
            if name != "NVML_ERROR_NOT_SUPPORTED":
                self.warn(f"{self.where}: {call} raised {name}; recorded as not supported")
            if call not in self.not_supported:
                self.not_supported.append(call)
            return None


def _memory(answer: Any) -> dict[str, Any]:
    """Total, and used where any (the fake reads a missing ``memory_used`` as 0)."""
    if answer is None:
        return {}
    return {"memory_total": int(answer.total), **({"memory_used": int(answer.used)} if answer.used else {})}


def _processes(rec: _Recorder, handle: Any) -> dict[str, Any]:
    found: dict[str, list[dict[str, Any]]] = {}
    for kind, call in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                       ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        answer = rec.ask(call, handle)
        if answer is None:
            continue
        found[kind] = []
        for entry in answer:
            process = {"pid": int(entry.pid), "used_memory": _number(getattr(entry, "usedGpuMemory", None))}
            name = rec.ask("nvmlSystemGetProcessName", entry.pid, absent=True)
            found[kind].append(process | ({"name": _text(name)} if name is not None else {}))
    return {"processes": found} if found else {}


def _process_utilization(rec: _Recorder, handle: Any) -> dict[str, Any]:
    samples = rec.ask("nvmlDeviceGetProcessUtilization", handle, 0)
    if samples is None:
        return {}
    return {"process_utilization": [{"pid": int(s.pid), "sm": int(s.smUtil), "time": int(s.timeStamp)}
                                    for s in samples]}


def _mig_devices(rec: _Recorder, handle: Any) -> dict[str, Any]:
    slots = rec.ask("nvmlDeviceGetMaxMigDeviceCount", handle)
    if not slots:
        return {}
    instances: list[dict[str, Any] | None] = []
    for slot in range(slots):
        mig = rec.ask("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, absent=True)
        if mig is None:
            instances.append(None)
            continue
        instance = {"name": rec.ask("nvmlDeviceGetName", mig), "uuid": rec.ask("nvmlDeviceGetUUID", mig),
                    "gpu_instance_id": rec.ask("nvmlDeviceGetGpuInstanceId", mig),
                    "compute_instance_id": rec.ask("nvmlDeviceGetComputeInstanceId", mig),
                    **_memory(rec.ask("nvmlDeviceGetMemoryInfo", mig))}
        instances.append({key: _text(value) if isinstance(value, bytes) else value
                          for key, value in instance.items() if value is not None})
    return {"mig_devices": instances}


def _device(lib: ModuleType, index: int, warn: Callable[[str], None]) -> dict[str, Any]:
    try:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
    except lib.NVMLError as exc:
        raise RecordError(f"GPU {index} did not answer ({_error_name(lib, exc)}); the fake cannot replay a GPU "
                          "lost at start, so nothing was written") from exc
    rec = _Recorder(lib, f"GPU {index}", warn)
    device: dict[str, Any] = _memory(rec.ask("nvmlDeviceGetMemoryInfo", handle))
    for call, key, parts, convert in READINGS:
        for part, constants in parts:
            args = [getattr(lib, name) for name in constants]
            answer = rec.ask(call, handle, *args)
            if answer is None and call in FALLBACKS:
                answer = rec.ask(FALLBACKS[call], handle, *args)
                if answer is not None:
                    rec.not_supported.remove(call)
            if answer is None:
                continue
            if part:
                device.setdefault(key, {})[part] = convert(answer)
            else:
                device[key] = convert(answer)
    device |= _processes(rec, handle) | _process_utilization(rec, handle)
    if device.get("mig_mode", [0])[0] == 1:
        device |= _mig_devices(rec, handle)
    device["not_supported"] = rec.not_supported
    return device


def _cuda_driver_version(lib: ModuleType) -> int | None:
    """NVML's CUDA driver version, from the _v2 call, as gpufly asks it."""
    try:
        return int(lib.nvmlSystemGetCudaDriverVersion_v2())
    except (AttributeError, lib.NVMLError):
        return None


def record(lib: ModuleType | None = None, description: str = DEFAULT_DESCRIPTION,
           warn: Callable[[str], None] = lambda message: print(f"warning: {message}", file=sys.stderr),
           ) -> dict[str, Any]:
    """The fixture for the NVML that ``lib`` (pynvml, or a fake of it) talks to."""
    if lib is None:
        try:
            import pynvml as lib
        except ImportError as exc:
            raise RecordError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from exc
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        raise RecordError(f"NVML did not open ({_error_name(lib, exc)})") from exc
    try:
        try:
            driver: str | None = _text(lib.nvmlSystemGetDriverVersion())
        except lib.NVMLError:
            driver = None
        count = lib.nvmlDeviceGetCount()
        return {"description": description, "driver_version": driver, "cuda_driver_version": _cuda_driver_version(lib),
                "devices": [_device(lib, index, warn) for index in range(count)]}
    finally:
        lib.nvmlShutdown()


def main(argv: list[str] | None = None, lib: ModuleType | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record NVML's answers as a fixture for gpufly's fake NVML.")
    parser.add_argument("out", type=Path, help="the JSON file to write")
    parser.add_argument("--description", default=DEFAULT_DESCRIPTION, help="what machine this is")
    args = parser.parse_args(argv)
    try:
        fixture = record(lib, args.description)
    except RecordError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(fixture, indent=2) + "\n")
    names = ", ".join(device.get("name", "?") for device in fixture["devices"]) or "no GPU"
    print(f"wrote {args.out}: driver {fixture['driver_version']}, {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
