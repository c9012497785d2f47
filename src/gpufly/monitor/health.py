"""A health verdict per GPU: HEALTHY, DEGRADED or FAILING, with the reasons named, from what NVML reports.

One place decides; `top`, `watch` records, the exporter's ``gpufly_gpu_health`` and the web page show the same
verdict. Most rules read one sample (``assess([sample])``); a rule that needs persistence reads the last
``SUSTAINED_SAMPLES`` samples of the GPU (``assess(window)``), which ``HealthWatch`` keeps as snapshots arrive.

The rules are ``RULES`` (code, level, the ``GpuSample`` fields each reads, the samples it needs), most severe
first after ``gpu_lost``; docs/monitor.md ("Health") lists them with NVIDIA's documents behind each, and a test
holds that table to ``RULES``.

The software power cap (``sw_power_cap``) is not a reason: NVIDIA documents it as the power-scaling algorithm
holding the board to its limit, which a fully loaded GPU does by design; only when it holds the clock under half
its maximum under load does ``clocks_stuck_low`` fire (naming it). A rule whose figures the card does not report
(ECC on a GeForce, utilization inside MIG) is listed in ``Health.unchecked`` instead of passing silently.

XID events (rule ``xid``) come as events, not values: the hardware layer keeps each GPU's XIDs of the last
``XID_KEEP_S`` seconds (10 minutes) in its samples, and the rule judges them by NVIDIA's XID catalog
(``gpufly.monitor.xids``): FAILING for an XID NVIDIA answers with a GPU reset or a reboot, DEGRADED for the rest.
Where the driver refuses to deliver them (GeForce, WSL), the rule is unchecked with the driver's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from gpufly.hw import XID_KEEP_S, GpuSample
from gpufly.monitor.format import REASON_WORDS, fmt_bytes
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.xids import describe

SUSTAINED_SAMPLES = 3
"""Samples a persistent condition must hold for (3 s at `top`'s and `serve`'s default 1 s interval)."""

BUSY_UTILIZATION_PERCENT = 50.0
"""NVML utilization (share of the sample period a kernel ran) from which a GPU counts as busy."""

LOW_CLOCK_FRACTION = 0.5
"""An SM clock under this share of its maximum is stuck low: NVIDIA's HW slowdowns cut clocks "by a factor of 2
or more", while power capping under load trims them by tens of percent."""

MEMORY_FULL_FRACTION = 0.95
"""Memory used above this share of the total is nearly full."""


class Level(IntEnum):
    """The verdict, ordered by severity; the exporter's ``gpufly_gpu_health`` value is the number."""

    HEALTHY = 0
    DEGRADED = 1
    FAILING = 2


@dataclass(frozen=True)
class Reason:
    """One rule that fired: its short ``code`` (the exporter's ``reason`` label), its level, and the figures."""

    code: str
    level: Level
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "level": self.level.name, "detail": self.detail}


@dataclass(frozen=True)
class Health:
    """A GPU's verdict: the worst level among its reasons (HEALTHY with none), and the rules it could not check."""

    reasons: tuple[Reason, ...] = ()
    """Most severe first (by level, then by the order of ``RULES``)."""
    unchecked: tuple[str, ...] = ()
    """``code: why`` for each rule the sample could not answer (a figure the card does not report)."""

    @property
    def level(self) -> Level:
        return max((reason.level for reason in self.reasons), default=Level.HEALTHY)

    @property
    def code(self) -> str:
        """The most severe reason's code, ``none`` when healthy: one bounded label value per GPU."""
        return self.reasons[0].code if self.reasons else "none"

    def text(self) -> str:
        """``DEGRADED: memory 97% full (77.6 GiB of 80.0 GiB)``; ``HEALTHY`` alone when nothing fired."""
        if not self.reasons:
            return self.level.name
        return f"{self.level.name}: {'; '.join(reason.detail for reason in self.reasons)}"

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level.name, "code": self.code, "reasons": [r.to_dict() for r in self.reasons],
                "unchecked": list(self.unchecked)}


Window = Sequence[GpuSample]
"""Recent samples of one GPU, oldest first; the last is the sample judged."""


@dataclass(frozen=True)
class Rule:
    """One check: the ``GpuSample`` fields it reads, how many samples it needs, and the words when it fires."""

    code: str
    level: Level
    reads: tuple[str, ...]
    fires: Callable[[Window], str | Reason | None]
    """The detail when the rule fires on the window (or the whole Reason, for a rule whose level depends on what it
    saw, below ``level``), None when it does not."""
    samples: int = 1
    unread: Callable[[GpuSample], str] | None = None
    """Why its figures are missing, in words better than "not reported" (the driver's answer)."""

    def check(self, window: Window) -> Reason | str | None:
        """A Reason when it fires, the why (a str) when it cannot be checked, None when it passes."""
        missing = [name for name in self.reads if getattr(window[-1], name) is None]
        if missing:
            why = self.unread(window[-1]) if self.unread else f"{', '.join(missing)} not reported"
            return f"{self.code}: {why}"
        if len(window) < self.samples:
            return f"{self.code}: needs {self.samples} samples, has {len(window)}"
        detail = self.fires(window[-self.samples:])
        if detail is None or isinstance(detail, Reason):
            return detail
        return Reason(self.code, self.level, detail)


def _clock_event(reason: str, words: str) -> Callable[[Window], str | None]:
    """Fires when NVML names ``reason`` in every sample of the window the rule is given."""
    return lambda window: words if all(reason in (gpu.throttle_reasons or ()) for gpu in window) else None


def _ecc_uncorrected(window: Window) -> str | None:
    errors = window[-1].ecc_uncorrected_volatile
    return f"{errors} uncorrected ECC errors since the driver loaded" if errors else None


def _busy_and_slow(gpu: GpuSample) -> bool:
    if gpu.lost or gpu.utilization_gpu_percent is None or gpu.sm_clock_fraction is None:
        return False
    return gpu.utilization_gpu_percent >= BUSY_UTILIZATION_PERCENT and gpu.sm_clock_fraction < LOW_CLOCK_FRACTION


def _clocks_stuck_low(window: Window) -> str | None:
    if not all(_busy_and_slow(gpu) for gpu in window):
        return None
    gpu = window[-1]
    why = ", ".join(REASON_WORDS.get(r, r) for r in gpu.throttle_reasons or ()) or "no reason given by NVML"
    return (f"SM clock {gpu.sm_clock_mhz:.0f} of {gpu.sm_clock_max_mhz:.0f} MHz "
            f"({gpu.sm_clock_fraction:.0%}) at {gpu.utilization_gpu_percent:.0f}% utilization for {len(window)} "
            f"samples (active: {why})")


def _flag(name: str, words: str) -> Callable[[Window], str | None]:
    return lambda window: words if getattr(window[-1], name) else None


def _link_below_max(gpu: GpuSample) -> bool:
    if gpu.lost or gpu.utilization_gpu_percent is None or gpu.utilization_gpu_percent < BUSY_UTILIZATION_PERCENT:
        return False
    return (gpu.pcie_gen_current or 0) < (gpu.pcie_gen_max or 0) or \
        (gpu.pcie_width_current or 0) < (gpu.pcie_width_max or 0)


def _pcie_link_degraded(window: Window) -> str | None:
    if not all(_link_below_max(gpu) for gpu in window):
        return None
    gpu = window[-1]
    return (f"PCIe link Gen{gpu.pcie_gen_current} x{gpu.pcie_width_current} of Gen{gpu.pcie_gen_max} "
            f"x{gpu.pcie_width_max} while busy for {len(window)} samples")


def _memory_nearly_full(window: Window) -> str | None:
    gpu = window[-1]
    fraction = gpu.memory_used_fraction
    if fraction is None or fraction <= MEMORY_FULL_FRACTION:
        return None
    return f"memory {fraction:.0%} full ({fmt_bytes(gpu.memory_used_bytes)} of {fmt_bytes(gpu.memory_total_bytes)})"


def _xids(window: Window) -> Reason | None:
    """One reason for a GPU's recent XIDs: the worst level among them, each distinct code named once, worst first."""
    seen: dict[tuple[str, int | None], int] = {}
    for event in window[-1].xid_events or ():
        if event.kind in ("xid", "ecc_double_bit"):
            key = (event.kind, event.xid)
            seen[key] = seen.get(key, 0) + 1
    if not seen:
        return None
    parts: list[tuple[Level, str]] = []
    for (kind, code), times in seen.items():
        if kind == "ecc_double_bit":
            level, words = Level.FAILING, "double-bit ECC error event (uncorrectable)"
        else:
            row = describe(code)
            level, words = Level(row.level), row.words() if code is not None else "an XID with no code"
        parts.append((level, (f"{times}x " if times > 1 else "") + words))
    parts.sort(key=lambda part: -part[0])
    minutes = f"{XID_KEEP_S / 60:g} minutes"
    return Reason("xid", parts[0][0], f"{'; '.join(words for _, words in parts)} in the last {minutes}")


CLOCK_EVENTS = ("throttle_reasons",)

RULES: tuple[Rule, ...] = (
    Rule("xid", Level.FAILING, ("xid_events",), _xids,
         unread=lambda gpu: gpu.xid_unwatched or "XID events not watched by this reader"),
    Rule("ecc_uncorrected", Level.FAILING, ("ecc_uncorrected_volatile",), _ecc_uncorrected),
    Rule("row_remap_failed", Level.FAILING, ("remapped_rows_failed",),
         _flag("remapped_rows_failed", "a memory row remapping has failed (NVIDIA's replacement criterion)")),
    Rule("row_remap_pending", Level.DEGRADED, ("remapped_rows_pending",),
         _flag("remapped_rows_pending", "memory rows wait to be remapped at the next GPU reset")),
    Rule("retired_pages_pending", Level.DEGRADED, ("retired_pages_pending",),
         _flag("retired_pages_pending", "memory pages wait to be retired at the next driver load")),
    Rule("hw_slowdown", Level.DEGRADED, CLOCK_EVENTS,
         _clock_event("hw_slowdown", f"HW slowdown for {SUSTAINED_SAMPLES} samples (clocks cut by half or more)"),
         samples=SUSTAINED_SAMPLES),
    Rule("hw_power_brake", Level.DEGRADED, CLOCK_EVENTS,
         _clock_event("hw_power_brake_slowdown", "HW power brake active (asserted by the system's power supply)")),
    Rule("hw_thermal_slowdown", Level.DEGRADED, CLOCK_EVENTS,
         _clock_event("hw_thermal_slowdown", "HW thermal slowdown active (the GPU is too hot)")),
    Rule("sw_thermal_slowdown", Level.DEGRADED, CLOCK_EVENTS,
         _clock_event("sw_thermal_slowdown", "SW thermal slowdown active (above its maximum operating temperature)")),
    Rule("clocks_stuck_low", Level.DEGRADED, ("utilization_gpu_percent", "sm_clock_mhz", "sm_clock_max_mhz"),
         _clocks_stuck_low, samples=SUSTAINED_SAMPLES),
    Rule("pcie_link_degraded", Level.DEGRADED, ("utilization_gpu_percent", "pcie_gen_current", "pcie_gen_max",
                                                "pcie_width_current", "pcie_width_max"),
         _pcie_link_degraded, samples=SUSTAINED_SAMPLES),
    Rule("memory_nearly_full", Level.DEGRADED, ("memory_used_bytes", "memory_total_bytes"), _memory_nearly_full),
)
"""Every rule but ``gpu_lost`` (which ends the judging: a lost GPU reports nothing else), in order of severity."""

CODES: tuple[str, ...] = ("none", "gpu_lost", *(rule.code for rule in RULES))
"""Every value the exporter's ``reason`` label can take."""


def assess(window: Window) -> Health:
    """The verdict on the last sample of ``window`` (one GPU's recent samples, oldest first).

    >>> assess([GpuSample(index=0, name="H100", memory_used_bytes=79, memory_total_bytes=80)]).text()
    'DEGRADED: memory 99% full (79 B of 80 B)'
    """
    if not window:
        raise ValueError("assess needs at least one sample")
    gpu = window[-1]
    if gpu.lost:
        return Health((Reason("gpu_lost", Level.FAILING, f"GPU lost: {gpu.unavailable or 'fallen off the bus'}"),))
    reasons: list[Reason] = []
    unchecked: list[str] = []
    for rule in RULES:
        outcome = rule.check(window)
        if isinstance(outcome, Reason):
            reasons.append(outcome)
        elif outcome is not None:
            unchecked.append(outcome)
    reasons.sort(key=lambda reason: -reason.level)  # stable: rule order within a level
    return Health(tuple(reasons), tuple(unchecked))


class HealthWatch:
    """Keeps the last ``SUSTAINED_SAMPLES`` samples of each GPU and the verdict on the newest: a sampler listener.

    One per process, fed every snapshot (``update``), so every view of that process reads the same verdict; a
    GPU whose UUID changes under its index (a swapped card, a reordered bus) starts a fresh window. Views may
    read from other threads (``serve``'s requests): each GPU's window and verdict are replaced together, in one
    assignment.
    """

    def __init__(self, samples: int = SUSTAINED_SAMPLES) -> None:
        self.samples = samples
        self._seen: dict[int, tuple[tuple[GpuSample, ...], Health]] = {}
        """GPU index -> (its window, oldest first, and the verdict on the window's last sample)."""

    def update(self, snapshot: Snapshot) -> dict[int, Health]:
        """Judge each GPU of ``snapshot`` over its window; the verdicts by GPU index."""
        verdicts = {}
        for gpu in snapshot.gpus:
            window = self._window_with(gpu)
            verdicts[gpu.index] = assess(window)
            self._seen[gpu.index] = (window, verdicts[gpu.index])
        return verdicts

    __call__ = update

    def verdict(self, gpu: GpuSample) -> Health:
        """The verdict on ``gpu``: the one ``update`` gave when it was the last sample seen; else ``gpu`` judged
        after the samples seen before it (a view that reads a snapshot before this listener has had it)."""
        window, verdict = self._seen.get(gpu.index, ((), Health()))
        if window and window[-1] is gpu:
            return verdict
        return assess(self._window_with(gpu))

    def _window_with(self, gpu: GpuSample) -> tuple[GpuSample, ...]:
        window = self._seen[gpu.index][0] if gpu.index in self._seen else ()
        if window and gpu.uuid and window[-1].uuid and window[-1].uuid != gpu.uuid:
            window = ()
        return (*window, gpu)[-self.samples:]
