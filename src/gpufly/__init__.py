"""gpufly: make GPUs fly for AI work.

Choose the hardware, set up the software, make it fast, watch it run. The package root stays
light: importing it pulls in neither torch nor the CLI.
"""

from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.profile.profiler import Profiler

__version__ = "0.1.0"

__all__ = ["GpuflyError", "Profiler", "__version__"]


def __getattr__(name: str) -> Any:
    """``gpufly.Profiler`` loads the profiler (and torch) only when it is asked for."""
    if name == "Profiler":
        from gpufly.profile.profiler import Profiler

        return Profiler
    raise AttributeError(f"module 'gpufly' has no attribute {name!r}")
