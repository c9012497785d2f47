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
    "ray": "ray",
}
"""Each optional library and the extra that installs it (pyproject.toml's optional-dependencies)."""
IN_ALL = ("monitor", "charts", "gguf")
"""The extras ``gpufly[all]`` brings (torch is left to its own extra: pip would pick a multi-GB CUDA build)."""


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
        raise GpuflyError(f"{feature} needs {top}, which is not installed", hint=install_hint(top)) from None


def install_hint(library: str) -> str:
    """What to install for ``library``: its extra, and ``gpufly[all]`` where that brings it too.

    >>> install_hint("textual")
    "pip install 'gpufly[monitor]' (or 'gpufly[all]' for every optional part but torch)"
    >>> install_hint("torch")
    "pip install 'gpufly[torch]'"
    """
    extra = EXTRAS.get(library)
    if extra is None:
        return f"pip install {library}"
    also = " (or 'gpufly[all]' for every optional part but torch)" if extra in IN_ALL else ""
    return f"pip install 'gpufly[{extra}]'{also}"
