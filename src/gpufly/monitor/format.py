"""Words and numbers for the monitor's views: one place that turns None into "N/A".

The terminal UI, ``top --once``, ``watch`` and the web page all show the same figures; formatting
them here keeps "N/A", units and the "why is it slow" wording identical everywhere.
"""

from __future__ import annotations

from gpufly.hw import GpuSample
from gpufly.monitor.sample import Snapshot

NA = "N/A"

REASON_WORDS: dict[str, str] = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "application clocks",
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "thermal (SW)",
    "hw_thermal_slowdown": "thermal (HW)",
    "hw_power_brake_slowdown": "power brake",
    "display_clock_setting": "display clocks",
}


def fmt_bytes(value: float | None) -> str:
    """Binary units, three significant figures.

    >>> fmt_bytes(61203283968), fmt_bytes(512 * 1024**2), fmt_bytes(None)
    ('57.0 GiB', '512 MiB', 'N/A')
    """
    if value is None:
        return NA
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(value) >= size:
            scaled = value / size
            return f"{scaled:.1f} {unit}" if scaled < 100 else f"{scaled:.0f} {unit}"
    return f"{value:.0f} B"


def fmt_number(value: float | None, unit: str = "", digits: int = 0) -> str:
    """
    >>> fmt_number(97.0, "%"), fmt_number(698.5, " W"), fmt_number(None, " W")
    ('97%', '698 W', 'N/A')
    """
    if value is None:
        return NA
    return f"{value:.{digits}f}{unit}"


def fmt_rate(value: float | None) -> str:
    """Bytes per second, as ``fmt_bytes`` with ``/s``."""
    return NA if value is None else f"{fmt_bytes(value)}/s"


def slowdown_text(gpu: GpuSample) -> str:
    """Why this GPU runs below its clocks, in words: 'power cap' or 'none'; N/A where NVML will not say."""
    if gpu.throttle_reasons is None:
        return NA
    reasons = gpu.slowdown_reasons
    return ", ".join(REASON_WORDS.get(r, r) for r in reasons) if reasons else "none"


def no_gpu_line(snapshot: Snapshot) -> str | None:
    """The one line every monitor command prints on a machine without GPUs; None when there are GPUs."""
    if snapshot.gpus:
        return None
    reason = snapshot.gpu_status or "no NVIDIA GPU found"
    return f"no NVIDIA GPU to monitor on {snapshot.hostname}: {reason}; showing the host only"
