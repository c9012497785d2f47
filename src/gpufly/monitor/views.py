"""What `gpufly top` shows, as pure functions of a snapshot: process order and filter, bars, the one-shot text.

The Textual screen and ``top --once`` both build on these, so the order of rows and the words on a
line are tested without a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufly.hw import GpuSample, ProcessSample
from gpufly.monitor.format import NA, fmt_bytes, fmt_number, no_gpu_line, slowdown_text
from gpufly.monitor.health import Health, Level, assess
from gpufly.monitor.metrics import GPU_METRICS, GpuMetric, more_text
from gpufly.monitor.sample import Snapshot


def _utilization_key(p: ProcessSample) -> tuple[float, float, int]:
    # GPU SM share first; where NVML does not report it (MIG, some cards), CPU% orders the rest.
    known = p.gpu_sm_percent is not None
    return (-(p.gpu_sm_percent or 0.0) if known else 1.0, -(p.cpu_percent or 0.0), p.pid)


SORTS: dict[str, Callable[[ProcessSample], Any]] = {
    "memory": lambda p: (-(p.gpu_memory_bytes or 0), p.pid),
    "utilization": _utilization_key,
    "pid": lambda p: p.pid,
}
"""Process orders: memory and utilization largest first, pid ascending."""


@dataclass(frozen=True)
class ProcessView:
    """How the process table is ordered and filtered."""

    sort: str = "memory"
    filter: str = ""
    """Case-insensitive text matched against the user and the process name."""

    def rows(self, snapshot: Snapshot) -> list[ProcessSample]:
        processes = [p for gpu in snapshot.gpus for p in gpu.processes]
        if self.filter:
            wanted = self.filter.casefold()
            processes = [p for p in processes if wanted in (p.user or "").casefold()
                         or wanted in (p.name or "").casefold()]
        return sorted(processes, key=SORTS[self.sort])


PROCESS_COLUMNS: tuple[str, ...] = ("GPU", "PID", "USER", "NAME", "KIND", "GPU MEM", "GPU SM", "CPU", "RSS",
                                    "CONTAINER", "COMMAND")


def process_cells(p: ProcessSample) -> tuple[str, ...]:
    return (str(p.gpu_index), str(p.pid), p.user or NA, p.name or NA, p.kind, fmt_bytes(p.gpu_memory_bytes),
            fmt_number(p.gpu_sm_percent, "%"), fmt_number(p.cpu_percent, "%"), fmt_bytes(p.rss_bytes),
            p.container or "", p.cmdline or "")


def bar(fraction: float | None, width: int = 20) -> str:
    """A text bar in eighths of a cell; an unknown fraction is a dotted bar.

    >>> bar(0.5, 8), bar(0.0, 4), bar(1.2, 4), bar(None, 4)
    ('████░░░░', '░░░░', '████', '····')
    """
    if fraction is None:
        return "·" * width
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part else ""
    return ("█" * full + partial.strip() + "░" * width)[:width]


SPARK_LEVELS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], top: float | None, width: int = 40) -> str:
    """The last ``width`` samples, one cell each, scaled from 0 to ``top`` (a limit or total, when known).

    Scaling from zero, not from the series' own minimum, keeps a steady 95 % looking steady.

    >>> sparkline([0, 50, 100], 100, 5)
    '  ▁▅█'
    >>> sparkline([], 100, 3)
    '   '
    """
    shown = values[-width:]
    scale = top if top else max(shown, default=0.0) or 1.0
    cells = [SPARK_LEVELS[min(7, max(0, round(v / scale * 7)))] for v in shown]
    return "".join(cells).rjust(width)


def ratio(value: float | None, limit: float | None) -> float | None:
    """``value / limit``, or None when either is unknown or the limit is 0."""
    if value is None or not limit:
        return None
    return value / limit


def gpu_lines(gpu: GpuSample, width: int = 20, metrics: tuple[GpuMetric, ...] = GPU_METRICS,
              health: Health | None = None) -> list[str]:
    """The figure lines of one GPU panel (the sparklines are drawn by the screen), then a "more:" line with
    every metric-table row the fixed lines do not draw, and a "health:" line naming the reasons when not healthy.

    ``health`` is the verdict a ``HealthWatch`` keeps over the last samples; without one, this sample alone is
    judged (the rules that need persistence are then left unchecked)."""
    if gpu.lost:
        return [f"GPU {gpu.index}  {gpu.name}  LOST: {gpu.unavailable or 'fallen off the bus'}; the others go on"]
    util = gpu.utilization_gpu_percent
    memory = ratio(gpu.memory_used_bytes, gpu.memory_total_bytes)
    power = ratio(gpu.power_w, gpu.power_limit_w)
    clock = ratio(gpu.sm_clock_mhz, gpu.sm_clock_max_mhz)
    mig = f"  MIG: {len(gpu.mig)} instances" if gpu.mig_enabled else ""
    more = more_text(gpu, metrics)
    verdict = health if health is not None else assess([gpu])
    return [
        f"GPU {gpu.index}  {gpu.name}{mig}  {verdict.level.name}  slowdown: {slowdown_text(gpu)}",
        f"util  {bar(None if util is None else util / 100, width)} {fmt_number(util, '%'):>5}   "
        f"memory {bar(memory, width)} {fmt_bytes(gpu.memory_used_bytes)} / {fmt_bytes(gpu.memory_total_bytes)}",
        f"power {bar(power, width)} {fmt_number(gpu.power_w, ' W')} / {fmt_number(gpu.power_limit_w, ' W')}   "
        f"SM clock {bar(clock, width)} {fmt_number(gpu.sm_clock_mhz, ' MHz')} / "
        f"{fmt_number(gpu.sm_clock_max_mhz, ' MHz')}",
        f"temp {fmt_number(gpu.temperature_c, ' C')}  fan {fmt_number(gpu.fan_percent, '%')}  "
        f"mem util {fmt_number(gpu.utilization_memory_percent, '%')}  "
        f"PCIe rx {fmt_bytes(gpu.pcie_rx_bytes_per_s)}/s tx {fmt_bytes(gpu.pcie_tx_bytes_per_s)}/s  "
        f"ECC {fmt_number(gpu.ecc_uncorrected_volatile)} uncorrected",
        *([f"more: {more}"] if more else []),
        *([f"health: {verdict.text()}"] if verdict.level is not Level.HEALTHY else []),
        *([f"unavailable: {gpu.unavailable}"] if gpu.unavailable else []),
    ]


def host_lines(snapshot: Snapshot, width: int = 20) -> list[str]:
    host = snapshot.host
    memory = ratio(host.memory_used_bytes, host.memory_total_bytes)
    swap = ratio(host.swap_used_bytes, host.swap_total_bytes)
    cpu = host.cpu_percent
    load = " ".join(f"{v:.2f}" for v in host.load_average) if host.load_average else NA
    cores = "".join(bar(c / 100, 1) for c in host.cpu_percent_per_core or [])
    return [
        f"host {snapshot.hostname}  CPU {bar(None if cpu is None else cpu / 100, width)} {fmt_number(cpu, '%'):>5}"
        f"  cores {cores or NA}  load {load}",
        f"RAM {bar(memory, width)} {fmt_bytes(host.memory_used_bytes)} / {fmt_bytes(host.memory_total_bytes)}   "
        f"swap {bar(swap, width)} {fmt_bytes(host.swap_used_bytes)} / {fmt_bytes(host.swap_total_bytes)}",
    ]


def _process_brief(p: ProcessSample) -> str:
    return f"{p.user or '?'}/{p.pid}({fmt_bytes(p.gpu_memory_bytes)})"


def once_lines(snapshot: Snapshot, metrics: tuple[GpuMetric, ...] = GPU_METRICS) -> list[str]:
    """`gpufly top --once`: a line per GPU, gpustat-style (ending with the metric table's "more:" figures, when
    it has rows the fixed line does not draw), then the host line."""
    import time

    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snapshot.time))
    head = (f"{snapshot.hostname}  {stamp}  driver {snapshot.driver_version or NA}  "
            f"CUDA {snapshot.cuda_driver_version or NA}")
    lines = [head]
    for gpu in snapshot.gpus:
        if gpu.lost:
            lines.append(f"[{gpu.index}] {gpu.name} | LOST ({gpu.unavailable or 'fallen off the bus'})")
            continue
        processes = " ".join(_process_brief(p) for p in sorted(gpu.processes, key=SORTS["memory"]))
        more = more_text(gpu, metrics)
        lines.append(
            f"[{gpu.index}] {gpu.name} | {fmt_number(gpu.temperature_c, 'C')}, "
            f"{fmt_number(gpu.utilization_gpu_percent, '%')}"
            f" | {fmt_bytes(gpu.memory_used_bytes)} / {fmt_bytes(gpu.memory_total_bytes)}"
            f" | {fmt_number(gpu.power_w, ' W')} / {fmt_number(gpu.power_limit_w, ' W')}"
            f" | slowdown: {slowdown_text(gpu)} | {processes or 'no processes'}"
            + (f" | more: {more}" if more else "")
            + f" | health: {assess([gpu]).text()}"
            + (f" | unavailable: {gpu.unavailable}" if gpu.unavailable else "")
        )
    host = snapshot.host
    load = " ".join(f"{v:.2f}" for v in host.load_average) if host.load_average else NA
    lines.append(f"host  CPU {fmt_number(host.cpu_percent, '%')}  RAM {fmt_bytes(host.memory_used_bytes)} / "
                 f"{fmt_bytes(host.memory_total_bytes)}  load {load}")
    return lines


def once_json(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot as recorded (the JSONL form), with each GPU's slowdown in words, its health verdict on this
    one sample, and the no-GPU line."""
    data = snapshot.to_dict()
    for gpu_data, gpu in zip(data["gpus"], snapshot.gpus, strict=True):
        gpu_data["slowdown"] = None if gpu.lost else slowdown_text(gpu)
        gpu_data["health"] = assess([gpu]).to_dict()
    data["no_gpu_line"] = no_gpu_line(snapshot)
    return data
