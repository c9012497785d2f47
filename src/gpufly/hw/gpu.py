"""THE reader of GPU state: one NVML device in, plain dataclasses out, for every stage that needs a GPU fact.

``GpuDevice`` holds what does not change while a process runs (name, UUID, bus id, compute capability,
PCIe link, MIG and persistence mode, maximum clocks); ``GpuSample`` holds the moving state (utilization,
memory, power, clocks, temperature, slowdown reasons, ECC, MIG instances, processes). A field and its NVML
read sit side by side: ``power_w: float | None = nvml("nvmlDeviceGetPowerUsage", convert=scaled(1e-3))``,
and ``GpuReader`` fills every field so declared. Adding a metric is one such line; the monitor's table
(``gpufly.monitor.metrics``) decides how it is shown and exported.

XID events are not a value to poll: NVML delivers them through an event set. A reader asked to
(``GpuReader(nvml, watch_xids=True)``, as the monitor does) registers each GPU once for
``nvmlEventTypeXidCriticalError`` (and double-bit ECC events where the GPU offers them), drains the set without
waiting on every sample, and each sample carries the XIDs of the last ``XID_KEEP_S`` seconds
(``GpuSample.xid_events``); where the driver refuses the registration, ``GpuSample.xid_unwatched`` says why.

A call the card does not support reads as None; a GPU that falls off the bus mid-read comes back with
``lost=True`` while the others go on (nvitop's ``Device`` shape, with gpustat's tested faults). A read that
fails for another reason (an NVML error other than "not supported", or any exception from a broken binding)
also reads as None, and ``GpuSample.unavailable`` says why; a GPU whose handle cannot be had at all is lost,
with the reason there too.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from gpufly.hw.nvml import LOST, ROUTINE_ERRORS, Nvml, decode

Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class NvmlRead:
    """How a field is read: the NVML function (the newer name first, older ones after), the names of the pynvml
    constants it takes after the handle, and how its answer becomes the field's value (None: unreadable)."""

    functions: tuple[str, ...]
    args: tuple[str, ...] = ()
    convert: Convert = lambda value: value


def read_from(*functions: str, args: tuple[str, ...] = (), convert: Convert | None = None) -> dict[str, NvmlRead]:
    """Field metadata that tells ``GpuReader`` how to read the field (numbers as float unless ``convert`` says)."""
    return {"nvml": NvmlRead(functions, args, convert or number)}


def nvml(*functions: str, args: tuple[str, ...] = (), convert: Convert | None = None) -> Any:
    """A dataclass field (default None) read from NVML by ``GpuReader``: ``nvml("nvmlDeviceGetFanSpeed")``."""
    return field(default=None, metadata=read_from(*functions, args=args, convert=convert))


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def text(value: Any) -> str | None:
    value = decode(value)
    return value if isinstance(value, str) else None


def scaled(factor: float) -> Convert:
    """NVML's unit to gpufly's: ``scaled(1e-3)`` turns milliwatts into watts."""
    return lambda value: None if number(value) is None else float(value) * factor


def part(name: str, convert: Convert = number) -> Convert:
    """One attribute of a struct NVML returns (``memory.used``), converted."""
    return lambda value: convert(getattr(value, name, None))


def enabled(value: Any) -> bool | None:
    """NVML_FEATURE_ENABLED / NVML_DEVICE_MIG_ENABLE (1) as True; a (current, pending) pair reads its current."""
    if isinstance(value, tuple | list):
        value = value[0] if value else None
    return None if value is None else value == 1


def capability(value: Any) -> str | None:
    """(8, 6) as "8.6", the form every stage uses."""
    return f"{value[0]}.{value[1]}" if isinstance(value, tuple | list) and len(value) == 2 else None


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

NOT_SLOWDOWNS = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting"})
"""Reasons that hold clocks down without costing speed the user asked for."""


def throttle_reason_names(mask: int) -> list[str]:
    """The names of the bits set in an NVML clock-event reason mask.

    >>> throttle_reason_names(0x4 | 0x40)
    ['sw_power_cap', 'hw_thermal_slowdown']
    """
    return [name for bit, name in THROTTLE_REASON_BITS.items() if mask & bit]


def reason_names(mask: Any) -> list[str] | None:
    return throttle_reason_names(int(mask)) if count(mask) is not None else None


LOST_NAME = "unknown (GPU lost or inaccessible)"

FELL_OFF_THE_BUS = f"fallen off the bus ({LOST})"
"""Why a GPU is lost when NVML says so; otherwise the reason is the error that kept its handle from us."""


@dataclass(frozen=True)
class GpuDevice:
    """Static facts of one GPU as NVML reports them; a field NVML cannot give is None."""

    index: int
    name: str
    uuid: str | None = nvml("nvmlDeviceGetUUID", convert=text)
    memory_total_bytes: int | None = nvml("nvmlDeviceGetMemoryInfo", convert=part("total", count))
    compute_capability: str | None = nvml("nvmlDeviceGetCudaComputeCapability", convert=capability)
    pci_bus_id: str | None = nvml("nvmlDeviceGetPciInfo", convert=part("busId", text))
    lost: bool = False
    minor_number: int | None = nvml("nvmlDeviceGetMinorNumber", convert=count)
    pcie_gen_current: int | None = nvml("nvmlDeviceGetCurrPcieLinkGeneration", convert=count)
    pcie_gen_max: int | None = nvml("nvmlDeviceGetMaxPcieLinkGeneration", convert=count)
    pcie_width_current: int | None = nvml("nvmlDeviceGetCurrPcieLinkWidth", convert=count)
    pcie_width_max: int | None = nvml("nvmlDeviceGetMaxPcieLinkWidth", convert=count)
    mig_mode: bool | None = nvml("nvmlDeviceGetMigMode", convert=enabled)
    ecc_mode: bool | None = nvml("nvmlDeviceGetEccMode", convert=enabled)
    persistence_mode: bool | None = nvml("nvmlDeviceGetPersistenceMode", convert=enabled)
    sm_clock_max_mhz: float | None = nvml("nvmlDeviceGetMaxClockInfo", args=("NVML_CLOCK_SM",))
    memory_clock_max_mhz: float | None = nvml("nvmlDeviceGetMaxClockInfo", args=("NVML_CLOCK_MEM",))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProcessSample:
    """A process holding GPU memory, joined with what the OS says about it (psutil, in the monitor)."""

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
    job: str | None = None
    """The key of the Slurm job or Kubernetes pod the process belongs to, with attribution asked for (the
    snapshot's ``jobs`` names it); None otherwise or when it is in none."""


@dataclass
class MigSample:
    """One MIG instance of a GPU in MIG mode."""

    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None
    uuid: str | None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None


JOULES_PER_KWH = 3.6e6
"""``energy_j`` (NVML's counter, in joules) over this is kilowatt-hours: what every price per kWh is given in."""

XID_KEEP_S = 600.0
"""How long a sample keeps an XID event after gpufly drained it: the window the health rule ``xid`` judges."""

XID_KEEP_EVENTS = 32
"""The most recent events a GPU's samples carry (a flood of one XID must not grow every sample without bound)."""

DRAIN_MAX = 256
"""Events read from one GPU's event set per sample at most; the rest wait for the next sample."""

EVENT_XID = 0x8
EVENT_DOUBLE_BIT_ECC = 0x2
"""``nvmlEventTypeXidCriticalError`` and ``nvmlEventTypeDoubleBitEccError`` (nvml.h). Single-bit (corrected) ECC
events are not asked for: a GPU can raise them by the thousand, and their count is a metric already."""

EVENT_KINDS = {EVENT_XID: "xid", EVENT_DOUBLE_BIT_ECC: "ecc_double_bit"}

NOT_WATCHED_HINT = "the driver delivers no events here, as on WSL, in vGPU guests, on some consumer cards"


@dataclass
class XidEvent:
    """One event NVML delivered for a GPU: an XID (``kind="xid"``, its code in ``xid``) or a double-bit ECC error.

    NVML's event carries no time stamp: ``time`` is when gpufly drained it (wall-clock seconds since the epoch, at
    most one sampling interval after the driver raised it). ``seq`` counts the GPU's events since the reader
    started, so a listener that sees the same event in many samples counts it once.
    """

    kind: str
    xid: int | None
    time: float
    seq: int


@dataclass
class GpuSample:
    """The state of one GPU at one moment; a lost GPU keeps its index and name, the rest is None."""

    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = None
    lost: bool = False
    unavailable: str | None = None
    """Why the GPU is lost, or why figures it supports could not be read, when something failed rather than
    the card lacking them: ``fallen off the bus (NVML_ERROR_GPU_IS_LOST)``, or ``power_w, energy_j:
    RuntimeError from the NVML binding: ...`` (the fields, then the reason; several such parts joined by "; ").
    None when everything the card reports was read."""
    utilization_gpu_percent: float | None = nvml("nvmlDeviceGetUtilizationRates", convert=part("gpu"))
    """NVML "GPU utilization": share of time some kernel ran, not how busy the SMs were."""
    utilization_memory_percent: float | None = nvml("nvmlDeviceGetUtilizationRates", convert=part("memory"))
    memory_used_bytes: int | None = nvml("nvmlDeviceGetMemoryInfo", convert=part("used", count))
    memory_total_bytes: int | None = nvml("nvmlDeviceGetMemoryInfo", convert=part("total", count))
    memory_free_bytes: int | None = nvml("nvmlDeviceGetMemoryInfo", convert=part("free", count))
    power_w: float | None = nvml("nvmlDeviceGetPowerUsage", convert=scaled(1e-3))
    power_limit_w: float | None = nvml("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit",
                                       convert=scaled(1e-3))
    energy_j: float | None = nvml("nvmlDeviceGetTotalEnergyConsumption", convert=scaled(1e-3))
    """Energy since the driver loaded (NVML's total energy counter), in joules."""
    temperature_c: float | None = nvml("nvmlDeviceGetTemperature", args=("NVML_TEMPERATURE_GPU",))
    fan_percent: float | None = nvml("nvmlDeviceGetFanSpeed")
    sm_clock_mhz: float | None = nvml("nvmlDeviceGetClockInfo", args=("NVML_CLOCK_SM",))
    sm_clock_max_mhz: float | None = None
    memory_clock_mhz: float | None = nvml("nvmlDeviceGetClockInfo", args=("NVML_CLOCK_MEM",))
    memory_clock_max_mhz: float | None = None
    pcie_tx_bytes_per_s: float | None = nvml("nvmlDeviceGetPcieThroughput", args=("NVML_PCIE_UTIL_TX_BYTES",),
                                             convert=scaled(1024))
    """KB/s over the last 20 ms in NVML (nvml.h), in bytes per second here."""
    pcie_rx_bytes_per_s: float | None = nvml("nvmlDeviceGetPcieThroughput", args=("NVML_PCIE_UTIL_RX_BYTES",),
                                             convert=scaled(1024))
    throttle_reasons: list[str] | None = field(default=None, metadata=read_from(
        "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons", convert=reason_names))
    """Active clock-event reasons by name (``sw_power_cap``, ``hw_thermal_slowdown``, ...); [] when none.
    The R535+ name is asked first, the older "throttle" name where the binding lacks it."""
    ecc_corrected_volatile: int | None = nvml(
        "nvmlDeviceGetTotalEccErrors", args=("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"), convert=count)
    ecc_uncorrected_volatile: int | None = nvml(
        "nvmlDeviceGetTotalEccErrors", args=("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"), convert=count)
    remapped_rows_pending: bool | None = nvml("nvmlDeviceGetRemappedRows", convert=lambda rows: bool(rows[2]))
    """A row remapping waits for the next GPU reset (Ampere and newer; NVML answers corrected, uncorrected,
    pending, failed)."""
    remapped_rows_failed: bool | None = nvml("nvmlDeviceGetRemappedRows", convert=lambda rows: bool(rows[3]))
    """A row remapping has failed at some point: NVIDIA's replacement criterion."""
    retired_pages_pending: bool | None = nvml("nvmlDeviceGetRetiredPagesPendingStatus", convert=enabled)
    """Pages wait to be retired at the next driver load (dynamic page retirement, cards before Ampere)."""
    pcie_gen_current: int | None = nvml("nvmlDeviceGetCurrPcieLinkGeneration", convert=count)
    """Read every sample: an idle GPU lowers its link generation and width to save power."""
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = nvml("nvmlDeviceGetCurrPcieLinkWidth", convert=count)
    pcie_width_max: int | None = None
    mig_enabled: bool | None = nvml("nvmlDeviceGetMigMode", convert=enabled)
    mig: list[MigSample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)
    xid_events: list[XidEvent] | None = None
    """XID (and double-bit ECC) events of the last ``XID_KEEP_S`` seconds, oldest first; [] when none came; None
    when the reader does not watch events on this GPU (``xid_unwatched`` says why, when the driver refused)."""
    xid_unwatched: str | None = None
    """Why XID events are not watched on this GPU: ``nvmlDeviceRegisterEvents: NVML_ERROR_NOT_SUPPORTED ...``."""

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
        return [r for r in self.throttle_reasons or [] if r not in NOT_SLOWDOWNS]


STATIC_IN_SAMPLE: tuple[str, ...] = ("name", "uuid", "pci_bus_id", "minor_number", "sm_clock_max_mhz",
                                     "memory_clock_max_mhz", "pcie_gen_max", "pcie_width_max")
"""The ``GpuDevice`` facts every sample carries (read once per GPU, not once per sample)."""


_DECLARED: dict[type, tuple[tuple[str, NvmlRead], ...]] = {}


def declared_reads(record: type) -> tuple[tuple[str, NvmlRead], ...]:
    """The fields of a dataclass declared with ``nvml(...)``, each with how it is read (looked up once per class)."""
    if record not in _DECLARED:
        _DECLARED[record] = tuple((item.name, item.metadata["nvml"]) for item in fields(record)
                                  if "nvml" in item.metadata)
    return _DECLARED[record]


class _Reader:
    """Reads one handle's fields, asking each distinct NVML call once, remembering whether the GPU is lost and
    why any figure could not be read."""

    def __init__(self, nvml: Nvml, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.lost = False
        self.failures: dict[str, list[str]] = {}
        """Reason -> what could not be read for it (field names, in order)."""
        self._answers: dict[tuple[str, tuple[str, ...]], tuple[Any, str | None]] = {}

    def ask(self, function: str, *args: Any, what: str | None = None) -> Any:
        """NVML's answer to one call on this handle; None (with the reason noted under ``what``) when none."""
        value, error = self._call(function, *args)
        if value is None:
            self.note(what or function, error)
        return value

    def _call(self, function: str, *args: Any) -> tuple[Any, str | None]:
        if self.lost:
            return None, LOST
        value, error = self.nvml.call(function, self.handle, *args)
        self.lost = error == LOST
        return value, error

    def note(self, what: str, error: str | None) -> None:
        """Remember why ``what`` reads None, unless the card just lacks it or the whole GPU is lost."""
        if error is not None and error not in ROUTINE_ERRORS and error != LOST:
            whats = self.failures.setdefault(error, [])
            if what not in whats:
                whats.append(what)

    def read(self, name: str, how: NvmlRead) -> Any:
        """A field's value: the first of its functions that answers, converted; None when none does."""
        value, error = None, None
        for function in how.functions:
            value, error = self._answer(function, how.args)
            if value is not None or self.lost:
                break
        if value is None:
            self.note(name, error)
            return None
        try:
            return how.convert(value)
        except (TypeError, ValueError, AttributeError, IndexError) as exc:  # a binding answering nonsense
            self.note(name, f"NVML answered what gpufly cannot read ({type(exc).__name__}: {exc})")
            return None

    def _answer(self, function: str, constants: tuple[str, ...]) -> tuple[Any, str | None]:
        """NVML's raw answer, asked once per sample: three fields share one ``nvmlDeviceGetMemoryInfo``."""
        key = (function, constants)
        if key not in self._answers:
            self._answers[key] = self._call(function, *(getattr(self.nvml.lib, name, None) for name in constants))
        return self._answers[key]

    def fill(self, target: Any) -> None:
        """Set every field of ``target`` declared with ``nvml(...)``."""
        for name, how in declared_reads(type(target)):
            object.__setattr__(target, name, self.read(name, how))

    def describe(self) -> str | None:
        """The failures in one line: ``field, field: reason; field: reason``; None when there were none."""
        return "; ".join(f"{', '.join(whats)}: {reason}" for reason, whats in self.failures.items()) or None


def _mig_profile(name: str | None) -> str | None:
    """'NVIDIA A100-SXM4-80GB MIG 1g.10gb' -> '1g.10gb' (DCGM's GPU_I_PROFILE label)."""
    if not name or " MIG " not in name:
        return None
    return name.rsplit(" MIG ", 1)[1].strip() or None


class GpuReader:
    """The one reader of GPU state over an open ``Nvml`` session: static facts cached per GPU, samples fresh.

    Safe to poll from one thread (the monitor's sampler, the profiler's watch); a GPU that falls off the bus
    reads ``lost=True`` and keeps the name it had.
    """

    def __init__(self, nvml: Nvml, watch_xids: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.nvml = nvml
        self._static: dict[int, GpuDevice] = {}
        self._util_seen: dict[int, int] = {}
        self._watch_xids = watch_xids
        self._clock = clock
        self._events: dict[int, _EventWatch] = {}

    def close(self) -> None:
        """Free the event sets this reader registered (before the NVML session closes)."""
        for watch in self._events.values():
            watch.free(self.nvml)
        self._events.clear()

    def count(self) -> int:
        return self.nvml.device_count()

    def devices(self) -> list[GpuDevice]:
        return [self.device(index) for index in range(self.count())]

    def device(self, index: int) -> GpuDevice:
        """Static facts of GPU ``index``, read once; a GPU lost or inaccessible comes back with lost=True."""
        if index in self._static:
            return self._static[index]
        handle, _ = self.nvml.call("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return GpuDevice(index, LOST_NAME, lost=True)
        reader = _Reader(self.nvml, handle)
        return self._read_device(index, reader) or GpuDevice(index, LOST_NAME, lost=True)

    def _read_device(self, index: int, reader: _Reader) -> GpuDevice | None:
        device = GpuDevice(index, text(reader.ask("nvmlDeviceGetName", what="name")) or "unknown")
        reader.fill(device)
        if reader.lost:
            return None
        if not reader.failures:  # a fact that failed to read (a driver being reloaded) is asked again next time
            self._static[index] = device
        return device

    def sample(self, index: int) -> GpuSample:
        """Static and moving state of GPU ``index`` now; lost=True (and why) when it cannot be read at all."""
        handle, error = self.nvml.call("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return self._lost(index, FELL_OFF_THE_BUS if error in (None, LOST) else error)
        reader = _Reader(self.nvml, handle)
        device = self._static.get(index) or self._read_device(index, reader)
        if device is None:
            return self._lost(index, FELL_OFF_THE_BUS)
        gpu = GpuSample(index=index, **{name: getattr(device, name) for name in STATIC_IN_SAMPLE})
        reader.fill(gpu)
        if gpu.mig_enabled and not reader.lost:
            gpu.mig = self._read_mig(reader)
        if not reader.lost:
            gpu.processes = self._read_processes(reader, index)
        if self._watch_xids and not reader.lost:
            watch = self._events.get(index) or self._register(index, reader)
            if watch is not None:
                gpu.xid_events, gpu.xid_unwatched = watch.drain(self.nvml, reader, self._clock())
        if reader.lost:
            return self._lost(index, FELL_OFF_THE_BUS)
        gpu.unavailable = reader.describe()
        return gpu

    def _register(self, index: int, reader: _Reader) -> _EventWatch | None:
        """Register GPU ``index`` for XID (and double-bit ECC) events, once; why not when the driver refuses.

        None (try again next sample) when the GPU was lost on the way; a refusal is kept, not asked every sample.
        """
        watch = _EventWatch.register(self.nvml, reader)
        if watch is not None:
            self._events[index] = watch
        return watch

    def _lost(self, index: int, reason: str) -> GpuSample:
        known = self._static.get(index)
        if known is None:
            return GpuSample(index=index, name="unknown GPU", lost=True, unavailable=reason)
        return GpuSample(index=index, name=known.name, uuid=known.uuid, pci_bus_id=known.pci_bus_id, lost=True,
                         unavailable=reason)

    def _read_mig(self, reader: _Reader) -> list[MigSample]:
        instances = []
        for slot in range(count(reader.ask("nvmlDeviceGetMaxMigDeviceCount", what="mig")) or 0):
            handle = self.nvml.query("nvmlDeviceGetMigDeviceHandleByIndex", reader.handle, slot)
            if handle is not None:
                instances.append(self._mig_instance(_Reader(self.nvml, handle)))
        return instances

    def _mig_instance(self, mig: _Reader) -> MigSample:
        memory = mig.ask("nvmlDeviceGetMemoryInfo")
        return MigSample(
            gpu_instance_id=count(mig.ask("nvmlDeviceGetGpuInstanceId")),
            compute_instance_id=count(mig.ask("nvmlDeviceGetComputeInstanceId")),
            profile=_mig_profile(text(mig.ask("nvmlDeviceGetName"))),
            uuid=text(mig.ask("nvmlDeviceGetUUID")),
            memory_used_bytes=count(getattr(memory, "used", None)),
            memory_total_bytes=count(getattr(memory, "total", None)),
        )

    def _process_utilization(self, reader: _Reader, index: int) -> dict[int, float]:
        """SM% per pid from NVML's samples newer than the last ones seen; empty where unsupported.

        NVML keeps a short buffer of per-process samples; asking from the last timestamp seen gives the
        ones since the previous sample, and a pid's latest sample is its figure for this interval.
        """
        samples = reader.ask("nvmlDeviceGetProcessUtilization", self._util_seen.get(index, 0), what="processes")
        latest: dict[int, tuple[int, float]] = {}
        for sample in _entries(samples):
            pid, stamp = count(getattr(sample, "pid", None)), count(getattr(sample, "timeStamp", 0))
            sm_percent = number(getattr(sample, "smUtil", None))
            if pid is None or stamp is None or sm_percent is None:
                continue
            if stamp >= latest.get(pid, (-1, 0.0))[0]:
                latest[pid] = (stamp, sm_percent)
        if latest:
            self._util_seen[index] = max(stamp for stamp, _ in latest.values())
        return {pid: value for pid, (_, value) in latest.items()}

    def _read_processes(self, reader: _Reader, index: int) -> list[ProcessSample]:
        """The processes NVML lists on the GPU (pid, kind, memory, SM share); the OS side is the caller's."""
        by_pid: dict[int, ProcessSample] = {}
        for kind, function in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                               ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            for entry in _entries(reader.ask(function, what="processes")):
                pid = count(getattr(entry, "pid", None))
                if pid is None:
                    continue
                known = by_pid.get(pid)
                if known is None:
                    memory = count(getattr(entry, "usedGpuMemory", None))
                    by_pid[pid] = ProcessSample(pid=pid, gpu_index=index, kind=kind, gpu_memory_bytes=memory)
                else:
                    known.kind = "compute+graphics"
        for pid, sm_percent in self._process_utilization(reader, index).items():
            if pid in by_pid:
                by_pid[pid].gpu_sm_percent = sm_percent
        return list(by_pid.values())


class _EventWatch:
    """One GPU's event set: registered once, drained with a zero timeout on each sample, its recent events kept."""

    WAIT_FUNCTIONS = ("nvmlEventSetWait_v2", "nvmlEventSetWait")
    """The newer entry point first; a binding or driver without it falls back to the older one, remembered."""

    def __init__(self, event_set: Any | None, why_not: str | None = None) -> None:
        self.event_set = event_set
        self.why_not = why_not
        self.recent: deque[XidEvent] = deque(maxlen=XID_KEEP_EVENTS)
        self.seq = 0
        self._wait = self.WAIT_FUNCTIONS[0]

    @classmethod
    def register(cls, nvml: Nvml, reader: _Reader) -> _EventWatch | None:
        supported, error = reader._call("nvmlDeviceGetSupportedEventTypes")
        if reader.lost:
            return None
        if count(supported) is None:
            return cls(None, f"nvmlDeviceGetSupportedEventTypes: {error} ({NOT_WATCHED_HINT})")
        wanted = supported & (EVENT_XID | EVENT_DOUBLE_BIT_ECC)
        if not wanted & EVENT_XID:
            return cls(None, "the driver offers no XID events on this GPU (nvmlDeviceGetSupportedEventTypes)")
        event_set, error = nvml.call("nvmlEventSetCreate")
        if event_set is None:
            return cls(None, f"nvmlEventSetCreate: {error}")
        _, error = reader._call("nvmlDeviceRegisterEvents", wanted, event_set)
        if error is None:
            return cls(event_set)
        nvml.call("nvmlEventSetFree", event_set)
        if reader.lost:
            return None
        return cls(None, f"nvmlDeviceRegisterEvents: {error} ({NOT_WATCHED_HINT})")

    def drain(self, nvml: Nvml, reader: _Reader, now: float) -> tuple[list[XidEvent] | None, str | None]:
        """Every event waiting in the set (a zero timeout: ``NVML_ERROR_TIMEOUT`` means none), then the events of
        the last ``XID_KEEP_S`` seconds; (None, why) on a GPU not watched."""
        if self.event_set is None:
            return None, self.why_not
        for _ in range(DRAIN_MAX):
            data, error = nvml.call(self._wait, self.event_set, 0)
            if error == "NVML_ERROR_FUNCTION_NOT_FOUND" and self._wait != self.WAIT_FUNCTIONS[-1]:
                self._wait = self.WAIT_FUNCTIONS[-1]
                continue
            if error is not None:
                if error != "NVML_ERROR_TIMEOUT":
                    reader.note("xid_events", error)
                break
            self._keep(data, now)
        while self.recent and now - self.recent[0].time > XID_KEEP_S:
            self.recent.popleft()
        return list(self.recent), None

    def _keep(self, data: Any, now: float) -> None:
        event_type = count(getattr(data, "eventType", None)) or 0
        for bit, kind in EVENT_KINDS.items():
            if event_type & bit:
                xid = count(getattr(data, "eventData", None)) if bit == EVENT_XID else None
                self.seq += 1
                self.recent.append(XidEvent(kind=kind, xid=xid, time=now, seq=self.seq))

    def free(self, nvml: Nvml) -> None:
        if self.event_set is not None:
            nvml.call("nvmlEventSetFree", self.event_set)
            self.event_set = None


def _entries(answer: Any) -> list[Any]:
    """NVML's list of per-process structs; none when it answered nothing or something that is not a list."""
    return list(answer) if isinstance(answer, list | tuple) else []
