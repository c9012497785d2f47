"""Record this machine's NVML answers as a fixture for the tests' fake pynvml (tests/fakes/pynvml_fake.py).

Makes every NVML call that gpufly's backend (src/gpufly/monitor/backends/nvml.py) makes: the driver and
CUDA driver versions, the device count, and per GPU its handle, name, memory, compute capability, PCI
bus id and UUID. The answers are written in the format the fake reads (tests/fixtures/nvml_two_gpus.json):
names as str, memory in bytes, the CUDA driver version as NVML's int (12040), and a "not_supported" list
per GPU of the calls that raised, which the fake raises again as NVMLError_NotSupported.

    python scripts/record_nvml_fixture.py tests/fixtures/nvml_<machine>.json [--description TEXT]

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

DEFAULT_DESCRIPTION = ("NVML answers recorded by scripts/record_nvml_fixture.py on a real GPU machine, in the types "
                       "nvidia-ml-py returns; 'not_supported' lists calls that raised NVMLError.")

DEVICE_CALLS: tuple[tuple[str, tuple[str, ...], Callable[[Any], dict[str, Any]]], ...] = (
    ("nvmlDeviceGetName", ("name",), lambda name: {"name": _text(name)}),
    ("nvmlDeviceGetMemoryInfo", ("memory_total", "memory_used"),
     lambda memory: {"memory_total": int(memory.total), **({"memory_used": int(memory.used)} if memory.used else {})}),
    ("nvmlDeviceGetCudaComputeCapability", ("compute_capability",),
     lambda capability: {"compute_capability": [int(part) for part in capability]}),
    ("nvmlDeviceGetPciInfo", ("pci_bus_id",), lambda pci: {"pci_bus_id": _text(pci.busId)}),
    ("nvmlDeviceGetUUID", ("uuid",), lambda uuid: {"uuid": _text(uuid)}),
)
"""The per-GPU calls of ``Nvml.device``, in its order, each with the fixture keys its answer fills. The fake
reads ``memory_used`` as 0 when it is absent, so a GPU using no memory records none."""
SYSTEM_CALLS = ("nvmlInit", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion_v2",
                "nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlShutdown")
RECORDED_CALLS = frozenset({*SYSTEM_CALLS, *(name for name, _, _ in DEVICE_CALLS)})
"""Every NVML function this recorder calls; a test holds it to the calls the backend makes."""


class RecordError(Exception):
    """NVML could not be recorded (not installed, no driver, a GPU lost); the message says which."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _error_name(lib: ModuleType, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    return next((name for name in dir(lib) if name.startswith("NVML_ERROR_") and getattr(lib, name) == code),
                f"NVML error {code}")


def _device(lib: ModuleType, index: int, warn: Callable[[str], None]) -> dict[str, Any]:
    try:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
    except lib.NVMLError as exc:
        raise RecordError(f"GPU {index} did not answer ({_error_name(lib, exc)}); the fake cannot replay a GPU "
                          "lost at start, so nothing was written") from exc
    device: dict[str, Any] = {}
    not_supported: list[str] = []
    for call, _, keys in DEVICE_CALLS:
        try:
            device.update(keys(getattr(lib, call)(handle)))
        except lib.NVMLError as exc:
            name = _error_name(lib, exc)
            if name != "NVML_ERROR_NOT_SUPPORTED":
                warn(f"GPU {index}: {call} raised {name}; recorded as not supported")
            not_supported.append(call)
    device["not_supported"] = not_supported
    return device


def _cuda_driver_version(lib: ModuleType) -> int | None:
    """NVML's CUDA driver version, from the _v2 call where this pynvml has it, as the backend asks."""
    getter = getattr(lib, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
        lib, "nvmlSystemGetCudaDriverVersion", None)
    if getter is None:
        return None
    try:
        return int(getter())
    except lib.NVMLError:
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
    parser = argparse.ArgumentParser(description="Record NVML's answers as a fixture for the tests' fake pynvml.")
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
