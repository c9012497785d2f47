"""Optional parts behind extras: a missing one is a one-line error naming the extra to install.

The core install stays small (typer, rich, psutil, nvidia-ml-py, msgspec); the terminal UI, the exporter,
charts and GGUF reading need their own libraries, as httpx keeps its command line behind ``httpx[cli]``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gpufly.errors import GpuflyError

EXTRAS = {
    "textual": "monitor",
    "prometheus_client": "monitor",
    "matplotlib": "charts",
    "gguf": "gguf",
    "torch": "torch",
}
"""Each optional library and the extra that installs it (pyproject.toml's optional-dependencies)."""


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature`` ("gpufly top"), or say which extra brings it.

    >>> require("json", "reading JSON").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the library is there but one of its own imports failed: not a missing extra
        extra = EXTRAS.get(top, "all")
        raise GpuflyError(f"{feature} needs {top}, which is not installed",
                          hint=f"pip install 'gpufly[{extra}]' (or 'gpufly[all]' for every optional part)") from None
