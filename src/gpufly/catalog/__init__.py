"""The GPU catalog: vendor specs with their sources, tensor rates derived where unpublished, lookup that never
returns another product, ranking and the ladder chart."""

from __future__ import annotations

from functools import cache

from gpufly.catalog.derive import ArchitectureRate, default_architectures
from gpufly.catalog.load import load_specs
from gpufly.catalog.lookup import Catalog, Resolution, normalize
from gpufly.catalog.spec import GpuSpec


@cache
def default_catalog() -> Catalog:
    """The catalog shipped with gpufly, loaded once per process."""
    return Catalog(load_specs())


__all__ = ["ArchitectureRate", "Catalog", "GpuSpec", "Resolution", "default_architectures", "default_catalog",
           "load_specs", "normalize"]
