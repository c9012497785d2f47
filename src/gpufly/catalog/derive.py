"""Tensor rates a vendor does not publish, derived from the architecture's per-SM rate (``architectures.toml``).

Many cards (most GeForce SKUs below the flagship) have tensor cores but no published dense tensor rate: the
vendor gives a sparse "AI TOPS" figure only. Their rate is still fixed by the silicon: dense operations per
clock per SM (from the architecture whitepaper) x SMs x boost clock, which reproduces every rate the
whitepapers do list. Where the vendor gives no clock but does publish one of the row's rates for the card (an
FP4 figure, typically), the others follow from that figure by the row's ratio of per-SM rates: both run on the
same tensor cores at the same clock, so the clock the vendor assumed cancels out. A derived figure is recorded
in ``GpuSpec.derivations`` with its formula and inputs, so every view can show it as derived; a published figure
is never replaced.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpufly.catalog.spec import TENSOR_FIELDS, GpuSpec
from gpufly.errors import GpuflyError
from gpufly.records import checked, from_dict

ARCHITECTURES_PATH = Path(__file__).with_name("architectures.toml")
AGREEMENT = 0.03
CLOCK_LEEWAY = 0.10
"""How far the clock a vendor's published rate implies may stray from the stored boost clock and still be read as
the same silicon at another clock (Intel's Arc B580 TOPS assume 2.85 GHz against its 2.67 GHz graphics clock, 7%
off); further off, the card is a cut-down part (the H20: a quarter of the H100's per-SM rate) and gets nothing."""
"""How close a row must reproduce each rate the vendor publishes for a card before it may fill in the others:
the whitepapers round to a few digits and quote clocks to 5 MHz, which stays well inside 3%."""


def _tensor_rates(rates: dict[str, int]) -> None:
    unknown = sorted(set(rates) - set(TENSOR_FIELDS))
    if unknown:
        raise GpuflyError(f"ops_per_clock_per_sm has unknown field(s) {', '.join(unknown)}",
                          hint="tensor fields: " + ", ".join(TENSOR_FIELDS))
    if any(ops <= 0 for ops in rates.values()):
        raise GpuflyError("ops_per_clock_per_sm values must be positive")


@dataclass(frozen=True)
class ArchitectureRate:
    """One row of ``architectures.toml``: the dense tensor ops per clock per SM of an architecture's product line."""

    name: str
    line: str
    vendor: str
    architecture: str
    segments: tuple[str, ...]
    sources: tuple[str, ...]
    ops_per_clock_per_sm: dict[str, int] = field(metadata=checked(_tensor_rates))
    chips: tuple[str, ...] = ()
    notes: str | None = None

    def covers(self, spec: GpuSpec) -> bool:
        """Whether this row describes ``spec``'s silicon and product line."""
        if (spec.vendor, spec.architecture) != (self.vendor, self.architecture) or spec.segment not in self.segments:
            return False
        return not self.chips or (spec.chip is not None and spec.chip.startswith(self.chips))

    def rate(self, name: str, spec: GpuSpec) -> float | None:
        """The dense rate of tensor field ``name`` on ``spec`` in TFLOPS (TOPS), or None without the inputs."""
        ops = self.ops_per_clock_per_sm.get(name)
        if ops is None or spec.sm_count is None or spec.boost_clock_mhz is None:
            return None
        return ops * spec.sm_count * spec.boost_clock_mhz / 1e6

    def formula(self, name: str, spec: GpuSpec, value: float) -> str:
        ops = "ops" if name.endswith("_tops") else "FLOP"
        return (f"{self.ops_per_clock_per_sm[name]} dense {ops}/clock/SM ({self.name}; {self.sources[0]}) "
                f"x {spec.sm_count} SMs x {spec.boost_clock_mhz:g} MHz = {value:.1f} {_unit(name)}")

    def ratio_formula(self, name: str, anchor: str, spec: GpuSpec, value: float) -> str:
        """How ``name`` follows from the published ``anchor`` rate when the clock is not published."""
        return (f"{getattr(spec, anchor):g} {_unit(anchor)} {_label(anchor)} (published) x "
                f"{self.ops_per_clock_per_sm[name]}/{self.ops_per_clock_per_sm[anchor]} (dense per-SM rates of "
                f"{self.name}; {self.sources[0]}) = {value:.1f} {_unit(name)}")


def _unit(name: str) -> str:
    return "TOPS" if name.endswith("_tops") else "TFLOPS"


def _label(name: str) -> str:
    """``fp4_tensor_tflops`` -> ``FP4``: the format a tensor field measures."""
    return name.split("_")[0].upper()


def read_architectures(path: Path = ARCHITECTURES_PATH) -> tuple[ArchitectureRate, ...]:
    """The rows of the architecture table, strictly read (an unknown or mistyped field names its row)."""
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GpuflyError(f"cannot read {path.name}: {exc}") from exc
    hint = f"each [[architecture]] table in {path.name} has name, line, vendor, architecture, segments, sources, " \
           "ops_per_clock_per_sm and optionally chips and notes"
    return tuple(from_dict(ArchitectureRate, row, f"{path.name}: {row.get('name', '?')}", hint=hint)
                 for row in document.get("architecture", []))


@cache
def default_architectures() -> tuple[ArchitectureRate, ...]:
    """The architecture table shipped with gpufly, read once per process."""
    return read_architectures()


def row_for(spec: GpuSpec, rows: Sequence[ArchitectureRate]) -> ArchitectureRate | None:
    """The one row that describes ``spec``, or None; two rows for one card is an error in the table."""
    found = [row for row in rows if row.covers(spec)]
    if len(found) > 1:
        raise GpuflyError(f"{spec.id} matches several architecture rows: {', '.join(row.name for row in found)}",
                          hint="give the rows in architectures.toml distinct chips or segments")
    return found[0] if found else None


def disagreements(spec: GpuSpec, row: ArchitectureRate) -> dict[str, tuple[float, float]]:
    """Published rates that ``row`` does not reproduce within 3%: {field: (published, derived)}."""
    off: dict[str, tuple[float, float]] = {}
    for name in row.ops_per_clock_per_sm:
        published, derived = getattr(spec, name), row.rate(name, spec)
        if published is not None and derived is not None and abs(derived - published) > AGREEMENT * published:
            off[name] = (published, derived)
    return off


def published_anchors(spec: GpuSpec, row: ArchitectureRate) -> list[str]:
    """The row's tensor fields that ``spec``'s vendor publishes, if their ratios are the row's (within 3%);
    an empty list when they are not, since then the card is not built as the row says (a cut-down part)."""
    anchors = [name for name in row.ops_per_clock_per_sm
               if getattr(spec, name) is not None and name not in spec.derivations]
    if not anchors:
        return []
    first = anchors[0]
    for name in anchors[1:]:
        expected = getattr(spec, first) * row.ops_per_clock_per_sm[name] / row.ops_per_clock_per_sm[first]
        if abs(getattr(spec, name) - expected) > AGREEMENT * getattr(spec, name):
            return []
    return anchors


def with_derived_rates(spec: GpuSpec, rows: Sequence[ArchitectureRate]) -> GpuSpec:
    """``spec`` with each tensor rate it lacks derived from its architecture row; otherwise ``spec`` unchanged.

    With SM count and boost clock, every missing rate is ops per clock per SM x SMs x clock, provided the row
    reproduces every rate the vendor does publish. Without a clock, or when the vendor's figures assume a clock
    up to 10% away from the one stored, a missing rate is a published rate of the same card scaled by the row's
    per-SM ratio, provided the published rates keep the row's ratios to each other. A card whose published rates
    are further from the row is a cut-down part: nothing is derived for it."""
    row = row_for(spec, rows)
    if row is None:
        return spec
    values: dict[str, Any] = {}
    derivations = dict(spec.derivations)
    missing = [name for name in row.ops_per_clock_per_sm if getattr(spec, name) is None]
    off = disagreements(spec, row)
    if any(abs(published / derived - 1) > CLOCK_LEEWAY for published, derived in off.values()):
        return spec
    if spec.sm_count is not None and spec.boost_clock_mhz is not None and not off:
        for name in missing:
            rate = row.rate(name, spec)
            if rate is not None:
                values[name] = round(rate, 1)
                derivations[name] = row.formula(name, spec, rate)
    elif anchors := published_anchors(spec, row):
        anchor = anchors[0]
        for name in missing:
            rate = getattr(spec, anchor) * row.ops_per_clock_per_sm[name] / row.ops_per_clock_per_sm[anchor]
            values[name] = round(rate, 1)
            derivations[name] = row.ratio_formula(name, anchor, spec, rate)
    if not values:
        return spec
    return dataclasses.replace(spec, **values, derivations=derivations)


def derive_all(specs: Iterable[GpuSpec], rows: Sequence[ArchitectureRate] | None = None) -> list[GpuSpec]:
    """Every spec with its unpublished tensor rates derived (``rows`` defaults to the shipped table)."""
    table = default_architectures() if rows is None else rows
    return [with_derived_rates(spec, table) for spec in specs]
