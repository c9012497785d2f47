"""The live backend: one ``Snapshot`` per call, from NVML (GPUs, processes) and psutil (host).

Every NVML call goes through ``Nvml.call``, so a field the card does not support reads as None, a
GPU that falls off the bus is marked lost while the others go on, and a process that exits
between NVML listing it and psutil reading it is skipped. Static facts (name, UUID, bus id, maximum
clocks) are read once per GPU and cached: they cost NVML calls and do not change.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from gpufly.monitor.backends.nvml import Nvml
from gpufly.monitor.sample import GpuSample, HostSample, MigSample, ProcessSample, Snapshot

LOST = "NVML_ERROR_GPU_IS_LOST"
FIRST_CPU_INTERVAL_S = 0.1
"""The shortest interval the first snapshot's CPU figures are measured over (psutil needs two readings)."""

THROTTLE_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML's clock-event (throttle) reason bits, from nvml.h (``nvmlClocksEventReason*``)."""


def throttle_reason_names(mask: int) -> list[str]:
    """The names of the bits set in an NVML clock-event reason mask.

    >>> throttle_reason_names(0x4 | 0x40)
    ['sw_power_cap', 'hw_thermal_slowdown']
    """
    return [name for bit, name in THROTTLE_REASON_BITS.items() if mask & bit]


_CONTAINER_PATTERNS = (
    re.compile(r"docker[-/]([0-9a-f]{12,64})"),
    re.compile(r"cri-containerd[-:]([0-9a-f]{12,64})"),
    re.compile(r"libpod-([0-9a-f]{12,64})"),
    re.compile(r"crio-([0-9a-f]{12,64})"),
    re.compile(r"kubepods.*?([0-9a-f]{64})"),
)


def container_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The short (12 hex digit) id of the container a process runs in, from /proc/PID/cgroup.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "7").mkdir()
    >>> _ = (root / "7" / "cgroup").write_text("0::/system.slice/docker-4f1c2a3e8d55b1e9f0a2b7c41d0e91112345.scope\\n")
    >>> container_of(7, root)
    '4f1c2a3e8d55'
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return None
    for pattern in _CONTAINER_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1)[:12]
    return None


def read_host() -> HostSample:
    """CPU per core, memory, swap and load; the first call's CPU figures are since boot (psutil's rule)."""
    per_core = psutil.cpu_percent(percpu=True)
    memory = psutil.virtual_memory()
    swap = psutil.swap_memory()
    try:
        load = [round(x, 2) for x in psutil.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return HostSample(
        cpu_percent=round(sum(per_core) / len(per_core), 1) if per_core else None,
        cpu_percent_per_core=per_core,
        memory_used_bytes=int(memory.total - memory.available),
        memory_total_bytes=int(memory.total),
        swap_used_bytes=int(swap.used),
        swap_total_bytes=int(swap.total),
        load_average=load,
    )


class ProcessJoiner:
    """Joins NVML's (pid, memory) with psutil's user, command, CPU% and RSS.

    psutil measures CPU% between two calls on the same ``Process`` object, so the objects are kept
    between snapshots; the first sight of a process reads 0% CPU, as in top.
    """

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self._known: dict[int, psutil.Process] = {}
        self._proc_root = proc_root

    def join(self, sample: ProcessSample) -> ProcessSample | None:
        """Fill in the OS facts; None when the process has exited since NVML listed it."""
        try:
            proc = self._known.get(sample.pid) or psutil.Process(sample.pid)
            self._known[sample.pid] = proc
            with proc.oneshot():
                sample.name = proc.name()
                sample.cmdline = " ".join(proc.cmdline()) or sample.name
                sample.cpu_percent = proc.cpu_percent()
                sample.rss_bytes = int(proc.memory_info().rss)
                sample.user = _user_of(proc)
        except psutil.NoSuchProcess:
            self._known.pop(sample.pid, None)
            return None
        except psutil.AccessDenied:
            pass
        sample.container = container_of(sample.pid, self._proc_root)
        return sample

    def forget_except(self, pids: set[int]) -> None:
        for pid in set(self._known) - pids:
            del self._known[pid]


def _user_of(proc: psutil.Process) -> str | None:
    try:
        return proc.username()
    except (KeyError, psutil.Error):
        return None


@dataclass
class _StaticFacts:
    name: str
    uuid: str | None
    pci_bus_id: str | None
    minor_number: int | None
    sm_clock_max_mhz: float | None
    memory_clock_max_mhz: float | None


@dataclass
class _Reader:
    """Reads one GPU's fields, remembering whether any call said the GPU is lost."""

    nvml: Nvml
    handle: Any
    lost: bool = False
    unsupported: list[str] = field(default_factory=list)

    def get(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        if fn is None or self.lost:
            return None
        value, error = self.nvml.call(fn, self.handle, *args)
        if error == LOST:
            self.lost = True
        return value


def _mhz(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _scaled(value: Any, factor: float) -> float | None:
    return float(value) * factor if isinstance(value, int | float) else None


def _mig_profile(name: str | None) -> str | None:
    """'NVIDIA A100-SXM4-80GB MIG 1g.10gb' -> '1g.10gb' (DCGM's GPU_I_PROFILE label)."""
    if not name or " MIG " not in name:
        return None
    return name.rsplit(" MIG ", 1)[1].strip() or None


class LiveBackend:
    """Samples this machine. ``lib`` injects a fake pynvml in tests; ``hostname`` overrides the label."""

    def __init__(self, lib: ModuleType | None = None, hostname: str | None = None,
                 proc_root: Path = Path("/proc"), clock: Callable[[], float] = time.time) -> None:
        self._nvml = Nvml(lib)
        self._status = self._nvml.open()
        self._hostname = hostname or socket.gethostname()
        self._clock = clock
        self._joiner = ProcessJoiner(proc_root)
        self._static: dict[int, _StaticFacts] = {}
        self._util_seen: dict[int, int] = {}
        self._driver = self._nvml.driver_version() if self._status.available else None
        self._cuda = self._nvml.cuda_driver_version() if self._status.available else None
        read_host()  # prime psutil's CPU counters so the first snapshot measures an interval
        self._primed_at: float | None = time.monotonic()

    @property
    def gpu_status(self) -> str | None:
        """None when NVML is up; otherwise why there are no GPUs, in words."""
        return None if self._status.available else self._status.reason

    def snapshot(self) -> Snapshot:
        if self._primed_at is not None:  # psutil reads 0% CPU over an interval this short
            time.sleep(max(0.0, FIRST_CPU_INTERVAL_S - (time.monotonic() - self._primed_at)))
            self._primed_at = None
        gpus = self._read_gpus() if self._status.available else []
        return Snapshot(
            time=self._clock(),
            hostname=self._hostname,
            gpus=gpus,
            host=read_host(),
            driver_version=self._driver,
            cuda_driver_version=self._cuda,
            gpu_status=self._describe_absence(gpus),
        )

    def _describe_absence(self, gpus: list[GpuSample]) -> str | None:
        if not self._status.available:
            return self._status.reason
        return None if gpus else "the NVIDIA driver is loaded but lists no GPU"

    def close(self) -> None:
        self._nvml.close()

    def _read_gpus(self) -> list[GpuSample]:
        gpus = [self._read_gpu(index) for index in range(self._nvml.device_count())]
        self._joiner.forget_except({p.pid for g in gpus for p in g.processes})
        return gpus

    def _read_gpu(self, index: int) -> GpuSample:
        lib = self._nvml.lib
        handle, _ = self._nvml.call(lib.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return self._lost(index)
        reader = _Reader(self._nvml, handle)
        facts = self._static.get(index) or self._read_static(reader)
        if reader.lost:
            return self._lost(index)
        self._static[index] = facts
        gpu = GpuSample(index=index, name=facts.name, uuid=facts.uuid, pci_bus_id=facts.pci_bus_id,
                        minor_number=facts.minor_number, sm_clock_max_mhz=facts.sm_clock_max_mhz,
                        memory_clock_max_mhz=facts.memory_clock_max_mhz)
        self._fill_dynamic(gpu, reader)
        if reader.lost:
            return self._lost(index)
        gpu.processes = self._read_processes(reader, index)
        return self._lost(index) if reader.lost else gpu

    def _lost(self, index: int) -> GpuSample:
        facts = self._static.get(index)
        name = facts.name if facts else "unknown GPU"
        return GpuSample(index=index, name=name, uuid=facts.uuid if facts else None,
                         pci_bus_id=facts.pci_bus_id if facts else None, lost=True)

    def _read_static(self, reader: _Reader) -> _StaticFacts:
        lib = self._nvml.lib
        pci = reader.get(lib.nvmlDeviceGetPciInfo)
        bus_id = getattr(pci, "busId", None) if pci is not None else None
        return _StaticFacts(
            name=reader.get(lib.nvmlDeviceGetName) or "unknown GPU",
            uuid=reader.get(lib.nvmlDeviceGetUUID),
            pci_bus_id=bus_id.decode() if isinstance(bus_id, bytes) else bus_id,
            minor_number=reader.get(getattr(lib, "nvmlDeviceGetMinorNumber", None)),
            sm_clock_max_mhz=_mhz(reader.get(lib.nvmlDeviceGetMaxClockInfo, lib.NVML_CLOCK_SM)),
            memory_clock_max_mhz=_mhz(reader.get(lib.nvmlDeviceGetMaxClockInfo, lib.NVML_CLOCK_MEM)),
        )

    def _fill_dynamic(self, gpu: GpuSample, reader: _Reader) -> None:
        lib = self._nvml.lib
        rates = reader.get(lib.nvmlDeviceGetUtilizationRates)
        if rates is not None:
            gpu.utilization_gpu_percent = float(rates.gpu)
            gpu.utilization_memory_percent = float(rates.memory)
        memory = reader.get(lib.nvmlDeviceGetMemoryInfo)
        if memory is not None:
            gpu.memory_used_bytes, gpu.memory_total_bytes = int(memory.used), int(memory.total)
            gpu.memory_free_bytes = int(memory.free)
        gpu.power_w = _scaled(reader.get(lib.nvmlDeviceGetPowerUsage), 1e-3)
        gpu.power_limit_w = _scaled(reader.get(lib.nvmlDeviceGetEnforcedPowerLimit), 1e-3)
        gpu.energy_j = _scaled(reader.get(lib.nvmlDeviceGetTotalEnergyConsumption), 1e-3)
        gpu.temperature_c = _mhz(reader.get(lib.nvmlDeviceGetTemperature, lib.NVML_TEMPERATURE_GPU))
        gpu.fan_percent = _mhz(reader.get(lib.nvmlDeviceGetFanSpeed))
        gpu.sm_clock_mhz = _mhz(reader.get(lib.nvmlDeviceGetClockInfo, lib.NVML_CLOCK_SM))
        gpu.memory_clock_mhz = _mhz(reader.get(lib.nvmlDeviceGetClockInfo, lib.NVML_CLOCK_MEM))
        pcie = lib.nvmlDeviceGetPcieThroughput  # KB/s over the last 20 ms, per nvml.h
        gpu.pcie_tx_bytes_per_s = _scaled(reader.get(pcie, lib.NVML_PCIE_UTIL_TX_BYTES), 1024)
        gpu.pcie_rx_bytes_per_s = _scaled(reader.get(pcie, lib.NVML_PCIE_UTIL_RX_BYTES), 1024)
        gpu.throttle_reasons = self._throttle(reader)
        corrected, uncorrected = lib.NVML_MEMORY_ERROR_TYPE_CORRECTED, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        gpu.ecc_corrected_volatile = reader.get(lib.nvmlDeviceGetTotalEccErrors, corrected, lib.NVML_VOLATILE_ECC)
        gpu.ecc_uncorrected_volatile = reader.get(lib.nvmlDeviceGetTotalEccErrors, uncorrected, lib.NVML_VOLATILE_ECC)
        self._fill_mig(gpu, reader)

    def _throttle(self, reader: _Reader) -> list[str] | None:
        """Clock-event reasons: the R535+ name first, the older "throttle" name where the binding lacks it."""
        lib = self._nvml.lib
        getter = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = reader.get(getter)
        return throttle_reason_names(int(mask)) if isinstance(mask, int) else None

    def _fill_mig(self, gpu: GpuSample, reader: _Reader) -> None:
        lib = self._nvml.lib
        mode = reader.get(getattr(lib, "nvmlDeviceGetMigMode", None))
        if mode is None:
            return
        gpu.mig_enabled = bool(mode[0])
        if not gpu.mig_enabled:
            return
        for slot in range(reader.get(lib.nvmlDeviceGetMaxMigDeviceCount) or 0):
            mig_handle, _ = self._nvml.call(lib.nvmlDeviceGetMigDeviceHandleByIndex, reader.handle, slot)
            if mig_handle is not None:
                gpu.mig.append(self._read_mig(mig_handle))

    def _read_mig(self, handle: Any) -> MigSample:
        lib = self._nvml.lib
        mig = _Reader(self._nvml, handle)
        memory = mig.get(lib.nvmlDeviceGetMemoryInfo)
        return MigSample(
            gpu_instance_id=mig.get(lib.nvmlDeviceGetGpuInstanceId),
            compute_instance_id=mig.get(lib.nvmlDeviceGetComputeInstanceId),
            profile=_mig_profile(mig.get(lib.nvmlDeviceGetName)),
            uuid=mig.get(lib.nvmlDeviceGetUUID),
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
        )

    def _process_utilization(self, reader: _Reader, index: int) -> dict[int, float]:
        """SM% per pid from NVML's samples newer than the last ones seen; empty where unsupported.

        NVML keeps a short buffer of per-process samples; asking from the last timestamp seen gives the
        ones since the previous snapshot, and a pid's latest sample is its figure for this interval.
        """
        since = self._util_seen.get(index, 0)
        samples = reader.get(getattr(self._nvml.lib, "nvmlDeviceGetProcessUtilization", None), since) or []
        latest: dict[int, tuple[int, float]] = {}
        for sample in samples:
            stamp = int(getattr(sample, "timeStamp", 0))
            if stamp >= latest.get(int(sample.pid), (-1, 0.0))[0]:
                latest[int(sample.pid)] = (stamp, float(sample.smUtil))
        if latest:
            self._util_seen[index] = max(stamp for stamp, _ in latest.values())
        return {pid: value for pid, (_, value) in latest.items()}

    def _read_processes(self, reader: _Reader, index: int) -> list[ProcessSample]:
        lib = self._nvml.lib
        by_pid: dict[int, ProcessSample] = {}
        for kind, getter in (("compute", lib.nvmlDeviceGetComputeRunningProcesses),
                             ("graphics", lib.nvmlDeviceGetGraphicsRunningProcesses)):
            for entry in reader.get(getter) or []:
                memory = getattr(entry, "usedGpuMemory", None)
                memory = int(memory) if isinstance(memory, int) else None
                known = by_pid.get(entry.pid)
                if known is None:
                    by_pid[entry.pid] = ProcessSample(pid=int(entry.pid), gpu_index=index, kind=kind,
                                                      gpu_memory_bytes=memory)
                else:
                    known.kind = "compute+graphics"
        for pid, sm_percent in self._process_utilization(reader, index).items():
            if pid in by_pid:
                by_pid[pid].gpu_sm_percent = sm_percent
        joined = (self._joiner.join(sample) for sample in by_pid.values())
        return [sample for sample in joined if sample is not None]
