"""THE table of per-GPU metrics: one row says how a ``GpuSample`` field is exported and shown.

``gpufly serve`` builds its Prometheus gauges from these rows, ``gpufly top`` lists every row its fixed
layout does not draw on a final "more:" line (panel and ``--once``), and ``gpufly watch`` writes every
``GpuSample`` field to JSONL/CSV already. So a new GPU metric is three edits: its field and NVML read in
``gpufly/hw/gpu.py``, its row here, and its line in docs/monitor.md (a test checks every served metric is
documented).

Where DCGM-exporter has a field, the row carries DCGM's name, unit and help text, so existing Grafana
dashboards and alerts keep working; everything else is ``gpufly_*`` in Prometheus base units. Pure data:
nothing here imports prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufly.hw import GpuSample
from gpufly.monitor.format import fmt_bytes, fmt_number, fmt_rate

MIB = 1024**2


def number(unit: str = "", digits: int = 0) -> Callable[[float | None], str]:
    return lambda value: fmt_number(value, unit, digits)


@dataclass(frozen=True)
class GpuMetric:
    """One exported per-GPU gauge and how `top` words it."""

    field: str
    """The ``GpuSample`` attribute, in gpufly's unit (bytes, watts, MHz, ...)."""
    exporter: str
    """The Prometheus name: DCGM-exporter's where it has one (``DCGM_FI_DEV_POWER_USAGE``), else ``gpufly_gpu_*``."""
    help: str
    label: str
    """How `top` names it on its "more:" line."""
    show: Callable[[float | None], str] = fmt_number
    """The figure in words, from the field's value ("698 W", "57.0 GiB", "N/A")."""
    scale: float = 1.0
    """Exported value = field value x scale (bytes to MiB for DCGM, MHz to hertz for gpufly_*)."""
    more: bool = True
    """Listed on top's "more:" line; False for a row top's fixed layout already draws, or leaves to the exporter
    (a second unit of a figure already shown, a counter no one reads off a screen)."""

    def value(self, gpu: GpuSample) -> float | None:
        """The exported value, or None (not emitted: a 0 would draw a real-looking line and fire no alert)."""
        raw = getattr(gpu, self.field)
        return None if raw is None else float(raw) * self.scale

    def text(self, gpu: GpuSample) -> str:
        return f"{self.label} {self.show(getattr(gpu, self.field))}"


DCGM_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("utilization_gpu_percent", "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util",
              number("%"), more=False),
    GpuMetric("utilization_memory_percent", "DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "mem util",
              number("%"), more=False),
    GpuMetric("memory_used_bytes", "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "memory",
              fmt_bytes, scale=1 / MIB, more=False),
    GpuMetric("memory_free_bytes", "DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "free",
              fmt_bytes, scale=1 / MIB, more=False),
    GpuMetric("power_w", "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power", number(" W"), more=False),
    GpuMetric("temperature_c", "DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp", number(" C"), more=False),
    GpuMetric("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "SM clock",
              number(" MHz"), more=False),
    GpuMetric("memory_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem clock",
              number(" MHz"), more=False),
    GpuMetric("energy_j", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).",
              "energy", number(" J"), scale=1000.0, more=False),
    GpuMetric("fan_percent", "DCGM_FI_DEV_FAN_SPEED", "Fan speed (in %).", "fan", number("%"), more=False),
    GpuMetric("ecc_corrected_volatile", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
              "Total number of single-bit volatile ECC errors.", "ECC corrected", more=False),
    GpuMetric("ecc_uncorrected_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
              "Total number of double-bit volatile ECC errors.", "ECC uncorrected", more=False),
)
"""DCGM's own names and units. All are gauges, as DCGM-exporter's text shows them under these exact names:
a Prometheus counter would have to be renamed ``..._total`` and would no longer match existing queries."""

GPUFLY_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("power_limit_w", "gpufly_gpu_power_limit_watts", "Enforced power limit, in watts.", "power limit",
              number(" W"), more=False),
    GpuMetric("memory_total_bytes", "gpufly_gpu_memory_total_bytes", "GPU memory total, in bytes.", "memory total",
              fmt_bytes, more=False),
    GpuMetric("memory_used_bytes", "gpufly_gpu_memory_used_bytes", "GPU memory used, in bytes.", "memory",
              fmt_bytes, more=False),
    GpuMetric("sm_clock_mhz", "gpufly_gpu_sm_clock_hertz", "SM clock, in hertz.", "SM clock", number(" MHz"),
              scale=1e6, more=False),
    GpuMetric("sm_clock_max_mhz", "gpufly_gpu_sm_clock_max_hertz", "Maximum SM clock, in hertz.", "SM clock max",
              number(" MHz"), scale=1e6, more=False),
    GpuMetric("memory_clock_max_mhz", "gpufly_gpu_memory_clock_max_hertz", "Maximum memory clock, in hertz.",
              "mem clock max", number(" MHz"), scale=1e6, more=False),
    GpuMetric("pcie_tx_bytes_per_s", "gpufly_gpu_pcie_tx_bytes_per_second",
              "PCIe transmit throughput (NVML, sampled), in bytes per second.", "PCIe tx", fmt_rate, more=False),
    GpuMetric("pcie_rx_bytes_per_s", "gpufly_gpu_pcie_rx_bytes_per_second",
              "PCIe receive throughput (NVML, sampled), in bytes per second.", "PCIe rx", fmt_rate, more=False),
)
"""What DCGM-exporter has no field for (or none in these units), in Prometheus base units."""

GPU_METRICS: tuple[GpuMetric, ...] = DCGM_METRICS + GPUFLY_METRICS
"""Every per-GPU gauge `gpufly serve` exports, in the order it writes them."""


def more_text(gpu: GpuSample, metrics: tuple[GpuMetric, ...] = GPU_METRICS) -> str | None:
    """The figures top's fixed layout does not draw, "label value" each; None when there are none."""
    shown = [metric.text(gpu) for metric in metrics if metric.more]
    return ", ".join(shown) if shown else None
