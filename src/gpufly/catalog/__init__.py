"""The GPU catalog: vendor specs with their sources, loose lookup, ranking and the ladder chart."""

from __future__ import annotations

from functools import cache

from gpufly.catalog.load import load_specs
from gpufly.catalog.lookup import Catalog, normalize
from gpufly.catalog.spec import GpuSpec


@cache
def default_catalog() -> Catalog:
    """The catalog shipped with gpufly, loaded once per process."""
    return Catalog(load_specs())


__all__ = ["Catalog", "GpuSpec", "default_catalog", "load_specs", "normalize"]
