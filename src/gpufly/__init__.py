"""gpufly: make GPUs fly for AI work.

Choose the hardware, set up the software, make it fast, watch it run. The package root stays
light: importing it pulls in neither torch nor the CLI.
"""

from gpufly.errors import GpuflyError

__version__ = "0.1.0"

__all__ = ["GpuflyError", "__version__"]
