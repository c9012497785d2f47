"""gpufly: make GPUs fly for AI work.

Choose the hardware, set up the software, make it fast, watch it run. The package root stays
light: importing it pulls in neither torch nor the CLI.
"""

from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.profile.profiler import Profiler
    from gpufly.tune.apply import apply

__version__ = "0.1.0"

__all__ = ["GpuflyError", "Profiler", "__version__", "apply"]


def __getattr__(name: str) -> Any:
    """``gpufly.Profiler`` and ``gpufly.apply`` load the profiler or the tuner (and torch) only when asked for."""
    if name == "Profiler":
        from gpufly.profile.profiler import Profiler

        return Profiler
    if name == "apply":
        from gpufly.tune.apply import apply

        return apply
    raise AttributeError(f"module 'gpufly' has no attribute {name!r}")
