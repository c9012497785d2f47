"""Profile a user's own training or inference loop and say in plain words what holds it back.

``records`` (the measurements) and ``rules`` (the diagnosis) are pure; ``profiler`` measures a live
loop with torch, imported only when profiling starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufly.profile.profiler import Profiler

__all__ = ["Profiler"]


def __getattr__(name: str) -> Any:
    if name == "Profiler":
        from gpufly.profile.profiler import Profiler

        return Profiler
    raise AttributeError(name)
