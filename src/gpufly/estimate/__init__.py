"""Memory and speed estimates: pure functions of a ModelSpec, a Job and a GpuSpec.

The names below load on first use (PEP 562), so ``from gpufly.estimate.job import Job`` in the CLI does not pay
for the whole advisor at start-up.

>>> from gpufly.catalog import default_catalog
>>> from gpufly.models import load_model
>>> from gpufly.estimate import Job, fit
>>> fit(load_model("llama-3.1-8b"), default_catalog().get("rtx-4090"), Job(context=8192)).fits
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufly.estimate.advise import (
        Change,
        Fit,
        GpuChoice,
        Pick,
        Ranking,
        changes,
        fit,
        largest,
        parse_gpu,
        recommend,
    )
    from gpufly.estimate.checks import check_job, device_spec
    from gpufly.estimate.job import Job
    from gpufly.estimate.memory import MemoryBreakdown, MemoryItem, memory
    from gpufly.estimate.ranges import Basis, Estimate, estimate
    from gpufly.estimate.speed import Speed, speed

_HOME = {"Change": "advise", "Fit": "advise", "GpuChoice": "advise", "Pick": "advise", "Ranking": "advise",
         "changes": "advise", "fit": "advise", "largest": "advise", "parse_gpu": "advise", "recommend": "advise",
         "check_job": "checks", "device_spec": "checks", "Job": "job", "MemoryBreakdown": "memory",
         "MemoryItem": "memory", "memory": "memory", "Speed": "speed", "speed": "speed", "Basis": "ranges",
         "Estimate": "ranges", "estimate": "ranges"}

__all__ = ["Basis", "Change", "Estimate", "Fit", "GpuChoice", "Job", "MemoryBreakdown", "MemoryItem", "Pick", "Ranking",
           "Speed", "changes", "check_job", "device_spec", "estimate", "fit", "largest", "memory", "parse_gpu",
           "recommend", "speed"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'gpufly.estimate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gpufly.estimate.{_HOME[name]}"), name)
