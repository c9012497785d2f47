"""Datasheet peaks for each benchmark, from the GPU catalog, and the percent-of-peak arithmetic.

Peaks are kept in the benchmarks' own units (FLOP/s, OP/s, B/s). CPUs have no catalog entry, so
every CPU figure has no peak: None, never a guess.
"""

from __future__ import annotations

from gpufly.catalog import GpuSpec
from gpufly.catalog.spec import PRECISION_FIELDS

PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
"""Usable GB/s per lane, each direction, after line encoding (PCI-SIG base specifications: 2.5/5 GT/s
with 8b/10b, 8/16/32 GT/s with 128b/130b, 64 GT/s PAM4 with 242/256 FLIT). Packet headers cost a
further 10-20%, so no real transfer reaches it."""


def rate_peak(spec: GpuSpec | None, dtype: str) -> float | None:
    """Peak matmul rate of ``dtype`` in FLOP/s (OP/s for int8), or None where the catalog gives none."""
    field = PRECISION_FIELDS.get(dtype)
    tera = getattr(spec, field, None) if spec is not None and field else None
    return tera * 1e12 if tera else None


def memory_peak(spec: GpuSpec | None) -> float | None:
    """Peak device-memory bandwidth in B/s."""
    return spec.memory_bandwidth_gbps * 1e9 if spec is not None and spec.memory_bandwidth_gbps else None


def pcie_peak(spec: GpuSpec | None) -> float | None:
    """One direction of the card's PCIe link in B/s, from its generation and lane count.

    >>> from dataclasses import replace
    >>> from gpufly.catalog import default_catalog
    >>> card = replace(next(iter(default_catalog())), pcie_gen=4, pcie_lanes=16)
    >>> round(pcie_peak(card) / 1e9, 1)
    31.5
    """
    if spec is None or spec.pcie_gen not in PCIE_LANE_GBPS or not spec.pcie_lanes:
        return None
    return PCIE_LANE_GBPS[spec.pcie_gen] * spec.pcie_lanes * 1e9


def percent_of_peak(value: float | None, peak: float | None) -> float | None:
    """100 * value / peak, or None where either is unknown.

    >>> percent_of_peak(495e12, 989e12)
    50.05055611729019
    >>> percent_of_peak(1.0, None) is None
    True
    """
    if value is None or not peak:
        return None
    return 100.0 * value / peak


def peak_for(spec: GpuSpec | None, key: str | None) -> tuple[float | None, str | None]:
    """The peak named by a benchmark's ``peak`` key ("bf16", "memory", "pcie"...) and where it came from."""
    if spec is None or key is None:
        return None, None
    if key == "memory":
        return memory_peak(spec), f"{spec.id}: memory_bandwidth_gbps"
    if key == "pcie":
        peak = pcie_peak(spec)
        return peak, (f"{spec.id}: PCIe {spec.pcie_gen}.0 x{spec.pcie_lanes}" if peak else None)
    peak = rate_peak(spec, key)
    if not peak:
        return None, None
    field = PRECISION_FIELDS[key]
    return peak, f"{spec.id}: {field}" + (" (derived: SMs x clock x the architecture's rate)" if spec.is_derived(field)
                                           else "")
