"""Filter and rank catalog entries by any numeric field or derived ratio."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import get_args, get_type_hints

from gpufly.catalog.spec import PRECISION_FIELDS, TENSOR_FIELDS, GpuSpec
from gpufly.errors import GpuflyError, unknown_choice


@dataclass(frozen=True)
class Metric:
    """A number a GPU can be ranked by, with what a chart or table should call it.

    Calling a metric gives the figure in ``unit``, the unit every table and chart shows: a ratio to the price
    is per $1,000 (0.47 TFLOPS per $1k, not 0.00047 per USD), while ``GpuSpec.derived`` and ``--json`` keep it
    per USD.
    """

    key: str
    label: str
    unit: str
    read: Callable[[GpuSpec], float | None]
    higher_is_better: bool = True

    def __call__(self, spec: GpuSpec) -> float | None:
        return self.read(spec)


def _field(name: str) -> Callable[[GpuSpec], float | None]:
    return lambda spec: getattr(spec, name)


def _derived(name: str) -> Callable[[GpuSpec], float | None]:
    return lambda spec: spec.derived[name]


def _per_thousand_usd(name: str) -> Callable[[GpuSpec], float | None]:
    def read(spec: GpuSpec) -> float | None:
        per_usd = spec.derived[name]
        return None if per_usd is None else per_usd * 1000

    return read


def _compute_capability(spec: GpuSpec) -> float | None:
    cc = spec.compute_capability_tuple
    return None if cc is None else cc[0] + cc[1] / 10


_DERIVED = (
    Metric("peak_tflops", "Peak dense FP16/BF16 (or FP32) rate", "TFLOPS", _derived("peak_tflops")),
    Metric("tflops_per_usd", "Peak TFLOPS per $1k of launch price", "TFLOPS/$1k",
           _per_thousand_usd("tflops_per_usd")),
    Metric("tflops_per_watt", "Peak TFLOPS per watt of board power", "TFLOPS/W", _derived("tflops_per_watt")),
    Metric("gbps_per_usd", "Memory bandwidth per $1k of launch price", "GB/s per $1k",
           _per_thousand_usd("gbps_per_usd")),
    Metric("vram_gib_per_usd", "Memory per $1k of launch price", "GiB per $1k", _per_thousand_usd("vram_gib_per_usd")),
)

FIELD_LABELS: dict[str, tuple[str, str]] = {
    "vram_gib": ("Memory", "GiB"),
    "memory_bandwidth_gbps": ("Memory bandwidth", "GB/s"),
    "memory_bus_bits": ("Memory bus width", "bit"),
    "sm_count": ("SMs (CUs, Xe-cores, GPU cores)", ""),
    "boost_clock_mhz": ("Boost clock", "MHz"),
    "interconnect_gbps": ("GPU-to-GPU bandwidth per GPU", "GB/s"),
    "dies": ("Devices per card", ""),
    "fp32_tflops": ("FP32 (non-tensor)", "TFLOPS"),
    "fp16_tflops": ("FP16 (non-tensor)", "TFLOPS"),
    "tf32_tensor_tflops": ("TF32 tensor, dense", "TFLOPS"),
    "fp16_tensor_tflops": ("FP16 tensor, dense", "TFLOPS"),
    "bf16_tensor_tflops": ("BF16 tensor, dense", "TFLOPS"),
    "fp8_tensor_tflops": ("FP8 tensor, dense", "TFLOPS"),
    "fp4_tensor_tflops": ("FP4 tensor, dense", "TFLOPS"),
    "int8_tensor_tops": ("INT8 tensor, dense", "TOPS"),
    "tdp_w": ("Board power", "W"),
    "launch_price_usd": ("Launch price", "USD"),
    "launch_year": ("Launch year", ""),
    "pcie_gen": ("PCIe generation", ""),
    "pcie_lanes": ("PCIe lanes", ""),
}
"""How tables and charts name each numeric field; one without an entry is named after the field."""
LOWER_IS_BETTER = frozenset({"tdp_w", "launch_price_usd"})


def _numeric_fields() -> list[str]:
    """Every int or float field of GpuSpec, read from its annotations, so a new figure is sortable at once."""
    hints = get_type_hints(GpuSpec)

    def numeric(hint: object) -> bool:
        kinds = {arg for arg in get_args(hint) if arg is not type(None)} or {hint}
        return kinds <= {int, float}

    return [f.name for f in fields(GpuSpec) if numeric(hints[f.name])]


def _field_metric(name: str) -> Metric:
    label, unit = FIELD_LABELS.get(name, (name.replace("_", " ").capitalize(), ""))
    return Metric(name, label, unit, _field(name), higher_is_better=name not in LOWER_IS_BETTER)


METRICS: dict[str, Metric] = {
    metric.key: metric
    for metric in (
        *_DERIVED,
        *(_field_metric(name) for name in _numeric_fields()),
        Metric("compute_capability", "CUDA compute capability", "", _compute_capability),
    )
}
"""Every metric a GPU can be ranked by: the derived ratios, each numeric field, the compute capability."""

METRIC_ALIASES: dict[str, str] = {
    "tflops": "peak_tflops",
    "peak": "peak_tflops",
    "vram": "vram_gib",
    "memory": "vram_gib",
    "bandwidth": "memory_bandwidth_gbps",
    "bw": "memory_bandwidth_gbps",
    **PRECISION_FIELDS,
    "tdp": "tdp_w",
    "power": "tdp_w",
    "price": "launch_price_usd",
    "year": "launch_year",
    "cc": "compute_capability",
}

PRECISIONS: dict[str, str] = {name: field for name, field in PRECISION_FIELDS.items() if field in TENSOR_FIELDS}
"""`--has` names: a GPU has a precision when it has a tensor rate for it, published or derived from its
architecture's per-SM rate."""


def metric(name: str) -> Metric:
    """The metric a user means by ``name`` (hyphens or underscores, short aliases allowed)."""
    key = name.strip().lower().replace("-", "_")
    key = METRIC_ALIASES.get(key, key)
    if key in METRICS:
        return METRICS[key]
    raise unknown_choice("metric", name, [*METRICS, *METRIC_ALIASES], hint="metrics: " + ", ".join(METRICS))


@dataclass(frozen=True)
class Filters:
    """What a user narrows the catalog to; None or empty means no limit."""

    vendor: str | None = None
    arch: str | None = None
    segment: str | None = None
    min_vram_gib: float | None = None
    has: tuple[str, ...] = ()


def _check(filters: Filters, specs: list[GpuSpec]) -> None:
    if filters.min_vram_gib is not None and not 0 <= filters.min_vram_gib < float("inf"):
        raise GpuflyError(f"--min-vram must be a number of GiB, zero or more, got {filters.min_vram_gib:g}",
                          hint="give the memory in GiB, e.g. --min-vram 24")
    vendors = {spec.vendor for spec in specs}
    if filters.vendor is not None and filters.vendor.lower() not in vendors:
        raise unknown_choice("vendor", filters.vendor, vendors, hint="vendors: " + ", ".join(sorted(vendors)))
    segments = {spec.segment for spec in specs}
    if filters.segment is not None and filters.segment.lower() not in segments:
        raise unknown_choice("segment", filters.segment, segments, hint="segments: " + ", ".join(sorted(segments)))
    archs = {spec.architecture for spec in specs}
    if filters.arch is not None and not any(filters.arch.lower() in arch.lower() for arch in archs):
        raise unknown_choice("architecture", filters.arch, archs, hint="architectures: " + ", ".join(sorted(archs)))
    for precision in filters.has:
        if precision.lower() not in PRECISIONS:
            raise unknown_choice("precision", precision, PRECISIONS, hint="precisions: " + ", ".join(PRECISIONS))


def select(specs: Iterable[GpuSpec], filters: Filters) -> list[GpuSpec]:
    """The entries that pass every filter, in their original order."""
    pool = list(specs)
    _check(filters, pool)

    def keep(spec: GpuSpec) -> bool:
        if filters.vendor and spec.vendor != filters.vendor.lower():
            return False
        if filters.segment and spec.segment != filters.segment.lower():
            return False
        if filters.arch and filters.arch.lower() not in spec.architecture.lower():
            return False
        if filters.min_vram_gib is not None and spec.vram_gib < filters.min_vram_gib:
            return False
        return all(getattr(spec, PRECISIONS[p.lower()]) is not None for p in filters.has)

    return [spec for spec in pool if keep(spec)]


def rank(specs: Iterable[GpuSpec], by: Metric, reverse: bool = False) -> list[GpuSpec]:
    """Sorted best first by ``by`` (largest, or smallest for price and power); GPUs without the
    figure go last. ``reverse`` puts the worst first."""
    pool = list(specs)
    known = [spec for spec in pool if by(spec) is not None]
    unknown = [spec for spec in pool if by(spec) is None]
    descending = by.higher_is_better != reverse
    known.sort(key=lambda spec: by(spec) or 0.0, reverse=descending)
    return known + unknown


GENERATION_ORDER = ("architecture, newest first (by the year it first shipped), then dense FP16/BF16 rate, "
                    "fastest first")
"""The default order of `gpufly gpus`, in the words its caption uses."""


def by_generation(specs: Iterable[GpuSpec], catalog: Iterable[GpuSpec] = ()) -> list[GpuSpec]:
    """Newest architecture first, each architecture's GPUs together, fastest first by dense 16-bit rate.

    An architecture's generation is the year its first GPU shipped, read from ``catalog`` (the whole catalog,
    so that a filter does not move an architecture) and from ``specs``. Architectures that first shipped the
    same year (Hopper and Ada Lovelace, 2022) go by their fastest GPU; a GPU without a 16-bit rate comes last
    in its architecture; the name settles the rest, so the order never depends on the file order.
    """
    pool = list(specs)
    peak = METRICS["peak_tflops"]
    debut: dict[str, int] = {}
    fastest: dict[str, float] = {}
    for spec in (*catalog, *pool):
        arch = spec.architecture
        debut[arch] = min(debut.get(arch, spec.launch_year), spec.launch_year)
        fastest[arch] = max(fastest.get(arch, 0.0), peak(spec) or 0.0)

    def key(spec: GpuSpec) -> tuple[int, float, str, bool, float, str]:
        rate = peak(spec)
        arch = spec.architecture
        return -debut[arch], -fastest[arch], arch, rate is None, -(rate or 0.0), spec.name

    return sorted(pool, key=key)
