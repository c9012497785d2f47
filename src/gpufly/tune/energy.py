"""Energy per trial: NVML's energy counter read around the measured steps, and what it costs.

A trial's joules are the difference of ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver
loaded) read when the warm-up ends and when the last measured step ends, never power sampled and integrated: the
counter sees every spike between samples. It is the whole GPU's energy, whoever used it, as the power meter of a
rented machine would bill it; under DDP the ranks' GPUs are summed, each GPU once. Over the units of the measured
steps it gives joules per sample (or token), which ``--price-per-kwh`` turns into money per million units, beside
``--price-per-hour``'s cost of the machine's time. Where there is no counter (a CPU run, a GPU before Volta, no
NVML) the figures are None with the reason, never a guess.

The counter is a probe (``GpuEnergy``, opened in the worker); the arithmetic and the summary line are pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.hw import JOULES_PER_KWH

NO_NVML = "no NVML"
"""Why a CPU trial has no energy figure: there is no GPU counter to read."""
MILLION = 1e6


class GpuEnergy:
    """The energy counter of the GPU with ``uuid`` (as NVML and ``nvidia-smi -L`` spell it), through a gpufly
    ``Nvml`` session; ``open`` says why not when it cannot be read."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml, self._handle = nvml, handle

    @classmethod
    def open(cls, nvml: Any, uuid: str | None) -> GpuEnergy | str:
        """The counter, or the reason there is none: NVML did not start, no GPU has that UUID, or the GPU has no
        counter (before Volta). ``nvml`` is a ``gpufly.hw.nvml.Nvml``; it is opened here."""
        status = nvml.open()
        if not status.available:
            return f"no NVML: {status.reason}"
        handle = _handle_of(nvml, uuid)
        if handle is None:
            return f"NVML lists no GPU with UUID {uuid}" if uuid else "torch gave no UUID for the trial's GPU"
        counter = cls(nvml, handle)
        if counter.read_mj() is None:
            return "this GPU has no energy counter (NVML answers it from Volta on)"
        return counter

    def read_mj(self) -> int | None:
        value = self._nvml.query("nvmlDeviceGetTotalEnergyConsumption", self._handle)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def _handle_of(nvml: Any, uuid: str | None) -> Any:
    """NVML's handle for the GPU with ``uuid``, found by listing them (``CUDA_VISIBLE_DEVICES`` renumbers torch's
    GPUs, never NVML's, so an index would name the wrong one)."""
    if not uuid:
        return None
    for index in range(nvml.device_count()):
        handle = nvml.query("nvmlDeviceGetHandleByIndex", index)
        if handle is not None and nvml.query("nvmlDeviceGetUUID", handle) == uuid:
            return handle
    return None


@dataclass
class EnergyWindow:
    """Joules between ``start`` and ``stop``, from a counter in millijoules; ``note`` says why not measured."""

    read_mj: Callable[[], int | None] | None
    note: str | None = None
    _started_mj: int | None = None
    joules: float | None = None

    def start(self) -> None:
        if self.read_mj is not None:
            self._started_mj = self.read_mj()

    def stop(self) -> None:
        if self.read_mj is None:
            return
        self.joules = joules_between(self._started_mj, self.read_mj())
        if self.joules is None:
            self.note = "the energy counter was not read at both ends, or went backwards (a driver reload)"


def joules_between(before_mj: int | None, after_mj: int | None) -> float | None:
    """Joules between two readings of the counter; None for a missing reading or one that went backwards.

    >>> joules_between(123_000, 168_500), joules_between(5, 4), joules_between(None, 4)
    (45.5, None, None)
    """
    if before_mj is None or after_mj is None or after_mj < before_mj:
        return None
    return (after_mj - before_mj) / 1000


def per_gpu_total(readings: Iterable[tuple[str | None, float | None]]) -> float | None:
    """Joules over the trial's GPUs, each counted once though several ranks share it; None when any went unread.

    >>> per_gpu_total([("GPU-a", 10.0), ("GPU-b", 12.0), ("GPU-a", 10.0)]), per_gpu_total([("GPU-a", None)])
    (22.0, None)
    """
    by_gpu: dict[str | None, float | None] = dict(readings)
    if not by_gpu or any(value is None for value in by_gpu.values()):
        return None
    return sum(value for value in by_gpu.values() if value is not None)


def per_unit(joules: float | None, units: int) -> float | None:
    """Joules per unit (sample, token) of the measured steps.

    >>> per_unit(45.5, 910), per_unit(None, 10), per_unit(1.0, 0)
    (0.05, None, None)
    """
    if joules is None or units <= 0:
        return None
    return joules / units


def energy_cost_per_million(joules_per_unit: float | None, price_per_kwh: float | None) -> float | None:
    """What the energy of a million units costs at ``price_per_kwh``.

    >>> round(energy_cost_per_million(0.36, 0.25), 6)  # 360 kJ is 0.1 kWh
    0.025
    """
    if joules_per_unit is None or price_per_kwh is None:
        return None
    return joules_per_unit * MILLION / JOULES_PER_KWH * price_per_kwh


def time_cost_per_million(throughput: float | None, price_per_hour: float | None) -> float | None:
    """What the machine's time for a million units costs at ``price_per_hour`` and ``throughput`` units/s.

    >>> time_cost_per_million(1000.0, 3.6)  # 1,000 s at $0.001/s
    1.0
    """
    if not throughput or throughput <= 0 or price_per_hour is None:
        return None
    return MILLION / throughput / 3600 * price_per_hour


def check_price(option: str, value: float | None, example: str, *, free: bool = False) -> None:
    """A price must be a finite number above 0 (nan and inf refused); with ``free``, 0 too. Energy may be free (as
    ``watch`` and ``serve`` take it: own solar, power in the rent) and then costs 0; machine time at 0 would make
    samples per dollar infinite, so it is refused."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not free):
        least = "0 or more" if free else "a positive number"
        raise GpuflyError(f"{option} must be {least} of USD, not {value}", f"for example {option} {example}")


def summary(rows: list[dict[str, Any]], price_per_kwh: float | None, price_per_hour: float | None,
            best: str | None) -> dict[str, Any]:
    """The run's energy, as ``--json`` gives it and the receipts say it: the baseline's and the best trial's
    joules per unit and their cost, or why nothing was measured (the first trial's reason)."""
    measured = [r for r in rows if r.get("joules_per_unit") is not None]
    note = next((r.get("energy_note") for r in rows if r.get("energy_note")), None)

    def figures(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None or row.get("joules_per_unit") is None:
            return None
        return {"configuration": row["configuration"], "unit": row["unit"], "energy_j": row.get("energy_j"),
                "joules_per_unit": row["joules_per_unit"],
                "energy_cost_per_million": energy_cost_per_million(row["joules_per_unit"], price_per_kwh),
                "time_cost_per_million": time_cost_per_million(row.get("throughput"), price_per_hour)}

    baseline = next((r for r in rows if r.get("role") == "baseline"), None)
    chosen = next((r for r in rows if r["configuration"] == best), None) if best is not None else None
    return {"measured": bool(measured), "source": "nvmlDeviceGetTotalEnergyConsumption" if measured else None,
            "note": None if measured else (note or NO_NVML), "price_per_kwh": price_per_kwh,
            "price_per_hour": price_per_hour, "baseline": figures(baseline), "best": figures(chosen)}


def energy_line(energy: dict[str, Any] | None) -> str:
    """One line for people: the figures and their cost, or "not measured" with the reason.

    >>> energy_line({"measured": False, "note": "no NVML"})
    'energy: not measured (no NVML)'
    """
    if not energy or not energy.get("measured"):
        return f"energy: not measured ({(energy or {}).get('note') or NO_NVML})"
    parts = [_figures_text(name, energy[name], energy) for name in ("baseline", "best")
             if energy.get(name) is not None and (name == "baseline" or energy["best"] != energy["baseline"])]
    source = "NVML energy counter over the measured steps, the whole GPU's"
    return f"energy ({source}): {'; '.join(parts) or 'no baseline measured'}"


def _figures_text(name: str, figures: dict[str, Any], energy: dict[str, Any]) -> str:
    unit = str(figures["unit"]).removesuffix("s") or "unit"
    label = name if figures["configuration"] == name else f"{name} ({figures['configuration']})"
    text = f"{label}: {figures['joules_per_unit']:.4g} J/{unit}"
    costs = []
    if figures.get("energy_cost_per_million") is not None:
        costs.append(f"${figures['energy_cost_per_million']:.4g} of energy at ${energy['price_per_kwh']:g}/kWh")
    if figures.get("time_cost_per_million") is not None:
        costs.append(f"${figures['time_cost_per_million']:.4g} of machine time at ${energy['price_per_hour']:g}/h")
    if costs:
        text += f" (per million {figures['unit']}: {', '.join(costs)})"
    return text
