"""What this machine is: host, NVIDIA driver, and each GPU matched to its catalog entry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufly.catalog import Catalog, GpuSpec, default_catalog
from gpufly.hw import GpuDevice, GpuReader, HostFacts, Nvml, NvmlStatus, probe_host
from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GpuEntry:
    """One GPU found on the machine, with the catalog's spec for it when the catalog has it."""

    device: GpuDevice
    spec: GpuSpec | None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.device.to_dict(),
            "catalog_id": self.spec.id if self.spec else None,
            "catalog_name": self.spec.name if self.spec else None,
        }


@dataclass(frozen=True)
class MachineReport:
    """The machine section of `gpufly report`."""

    host: HostFacts
    nvml: NvmlStatus
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuEntry] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One line a person reads first."""
        if not self.gpus:
            why = f" ({self.nvml.reason})" if self.nvml.reason else ""
            return _("no NVIDIA GPU found{why}; CPU: {cpu}").format(why=why, cpu=self.host.cpu_model)
        names = ", ".join(gpu.device.name for gpu in self.gpus)
        return ngettext("{count} NVIDIA GPU: {names}; driver {driver}", "{count} NVIDIA GPUs: {names}; driver {driver}",
                        len(self.gpus)).format(count=len(self.gpus), names=names,
                                               driver=self.driver_version or _("unknown"))

    def gpu_types(self) -> list[tuple[GpuSpec, int]]:
        """Each catalog GPU type found, with how many of it (GPUs not in the catalog left out)."""
        found: dict[str, list[GpuSpec]] = {}
        for entry in self.gpus:
            if entry.spec is not None:
                found.setdefault(entry.spec.id, []).append(entry.spec)
        return [(specs[0], len(specs)) for specs in found.values()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "summary": self.summary,
            "host": self.host.to_dict(),
            "nvml": {"available": self.nvml.available, "reason": self.nvml.reason},
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }


def match_gpus(devices: list[GpuDevice], catalog: Catalog) -> list[GpuEntry]:
    return [GpuEntry(d, None if d.lost else catalog.match_device(d.name, d.memory_total_bytes))
            for d in devices]


def probe_machine(nvml: Nvml | None = None, host: HostFacts | None = None,
                  catalog: Catalog | None = None) -> MachineReport:
    """Read the host and NVML; on a machine without a driver the report says so and goes on."""
    host = host or probe_host()
    nvml = nvml or Nvml()
    status = nvml.open()
    if not status.available:
        return MachineReport(host=host, nvml=status)
    with nvml:
        devices = GpuReader(nvml).devices()
        return MachineReport(
            host=host,
            nvml=status,
            driver_version=nvml.driver_version(),
            cuda_driver_version=nvml.cuda_driver_version(),
            gpus=match_gpus(devices, catalog or default_catalog()),
        )
