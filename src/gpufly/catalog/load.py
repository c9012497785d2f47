"""Load the catalog from the TOML files shipped in ``gpufly/catalog/data``."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufly.catalog.derive import derive_all
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.records import from_dict

DATA_DIR = Path(__file__).with_name("data")
SCHEMA_PATH = Path(__file__).with_name("gpus.schema.json")
CATALOG_HINT = "each [[gpu]] table follows src/gpufly/catalog/gpus.schema.json"
COMPUTED_FIELDS = ("derived", "derivations")
"""GpuSpec fields gpufly computes (ratios, derived tensor rates); a catalog file never sets them."""


def read_entries(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The raw ``[[gpu]]`` tables of the given files, in file order, each tagged with its file."""
    entries: list[dict[str, Any]] = []
    for path in paths:
        try:
            with path.open("rb") as handle:
                document = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise GpuflyError(f"cannot read catalog file {path}: {exc}") from exc
        for table in document.get("gpu", []):
            entries.append({**table, "_file": path.name})
    return entries


def spec_from_entry(entry: dict[str, Any]) -> GpuSpec:
    """Build a GpuSpec from one table, strictly (``gpufly.records.from_dict``): an unknown field, a missing one or
    a value of the wrong type is an error naming the entry and the field."""
    where = f"catalog entry {entry.get('_file', '?')}: {entry.get('id', '?')}"
    computed = sorted(set(entry) & set(COMPUTED_FIELDS))
    if computed:
        raise GpuflyError(f"{where} sets {', '.join(computed)}, which gpufly computes",
                          hint="give the published figures, or sm_count and boost_clock_mhz to derive tensor rates")
    values = {key: value for key, value in entry.items() if key != "_file"}
    return from_dict(GpuSpec, values, where, hint=CATALOG_HINT, unknown="error")


def load_specs(paths: Iterable[Path] | None = None) -> list[GpuSpec]:
    """All catalog entries, with the tensor rates their vendors do not publish derived from the architecture
    table (``catalog/derive.py``); by default the entries shipped with gpufly."""
    files = sorted(DATA_DIR.glob("*.toml")) if paths is None else list(paths)
    specs = derive_all(spec_from_entry(entry) for entry in read_entries(files))
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise GpuflyError(f"catalog id {spec.id!r} appears twice")
        seen.add(spec.id)
    return specs
