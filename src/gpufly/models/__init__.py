"""Model specs from presets, Hugging Face config.json files, GGUF files and PyTorch factories.

The names below load on first use (PEP 562), so importing ``gpufly.models.spec`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufly.models.presets import presets
    from gpufly.models.resolve import load_model
    from gpufly.models.spec import Attention, ModelSpec, MoE, RopeScaling

_HOME = {"Attention": "spec", "ModelSpec": "spec", "MoE": "spec", "RopeScaling": "spec", "load_model": "resolve",
         "presets": "presets"}

__all__ = ["Attention", "MoE", "ModelSpec", "RopeScaling", "load_model", "presets"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'gpufly.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gpufly.models.{_HOME[name]}"), name)
