"""One moment of the machine: every GPU, its processes and the host, as plain data.

A ``Snapshot`` is what every backend produces (NVML live, or a replayed file) and what every view
consumes (the terminal UI, ``top --once``, the CSV/JSONL logger, the Prometheus exporter, the web
page). A field the card does not report is None and is rendered "N/A"; nothing here guesses.

The JSONL form (``Snapshot.to_dict`` / ``Snapshot.from_dict``) is the recording format: `gpufly
watch` writes one snapshot per line and ``--replay`` reads them back, so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1
"""Version of one JSONL line; bumped when a field changes meaning, never when one is added."""


@dataclass
class ProcessSample:
    """A process holding GPU memory, joined with what the OS says about it (psutil)."""

    pid: int
    gpu_index: int
    kind: str
    """"compute", "graphics" or "compute+graphics", as NVML lists it."""
    gpu_memory_bytes: int | None = None
    user: str | None = None
    name: str | None = None
    cmdline: str | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    container: str | None = None
    """Short container id from /proc/PID/cgroup (docker, containerd, podman, kubepods), where readable."""
    gpu_sm_percent: float | None = None
    """The process's share of SM time since the last sample (NVML process utilization); None where the
    card or mode (MIG, vGPU) does not report it."""


@dataclass
class MigSample:
    """One MIG instance of a GPU in MIG mode."""

    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None
    uuid: str | None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None


@dataclass
class GpuSample:
    """The dynamic state of one GPU; a lost GPU keeps its index and name, the rest is None."""

    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = None
    lost: bool = False
    utilization_gpu_percent: float | None = None
    """NVML "GPU utilization": share of time some kernel ran, not how busy the SMs were."""
    utilization_memory_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    """Energy since the driver loaded (NVML's total energy counter), in joules."""
    temperature_c: float | None = None
    fan_percent: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    memory_clock_mhz: float | None = None
    memory_clock_max_mhz: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    throttle_reasons: list[str] | None = None
    """Active clock-event reasons by name (``sw_power_cap``, ``hw_thermal_slowdown``, ...); [] when none."""
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    mig_enabled: bool | None = None
    mig: list[MigSample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def power_fraction(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return self.power_w / self.power_limit_w

    @property
    def sm_clock_fraction(self) -> float | None:
        if self.sm_clock_mhz is None or not self.sm_clock_max_mhz:
            return None
        return self.sm_clock_mhz / self.sm_clock_max_mhz

    @property
    def slowdown_reasons(self) -> list[str]:
        """Active reasons that cost speed; idle and application-clock settings are not slowdowns."""
        return [r for r in self.throttle_reasons or [] if r not in _NOT_SLOWDOWNS]


_NOT_SLOWDOWNS = {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}


@dataclass
class HostSample:
    """The machine around the GPUs, from psutil."""

    cpu_percent: float | None = None
    cpu_percent_per_core: list[float] = field(default_factory=list)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    load_average: list[float] | None = None


@dataclass
class Snapshot:
    """Everything one sample saw. ``gpu_status`` says in words why there are no GPUs, when there are none."""

    time: float
    hostname: str
    gpus: list[GpuSample] = field(default_factory=list)
    host: HostSample = field(default_factory=HostSample)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpu_status: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        """Rebuild a snapshot from its JSONL form; unknown keys (from newer versions) are ignored."""
        gpus = [_gpu_from_dict(g) for g in data.get("gpus") or []]
        return cls(
            time=float(data["time"]),
            hostname=str(data.get("hostname") or "unknown"),
            gpus=gpus,
            host=_build(HostSample, data.get("host") or {}),
            driver_version=data.get("driver_version"),
            cuda_driver_version=data.get("cuda_driver_version"),
            gpu_status=data.get("gpu_status"),
        )


def _build(cls: type, data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


def _gpu_from_dict(data: dict[str, Any]) -> GpuSample:
    gpu = _build(GpuSample, {k: v for k, v in data.items() if k not in ("mig", "processes")})
    gpu.mig = [_build(MigSample, m) for m in data.get("mig") or []]
    gpu.processes = [_build(ProcessSample, p) for p in data.get("processes") or []]
    return gpu
