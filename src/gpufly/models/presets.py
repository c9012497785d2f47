"""Preset models: published hyperparameters shipped as JSON, one file per model, with sources."""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError

PRESET_DIR = Path(__file__).with_name("presets")


def _key(name: str) -> str:
    """Fold a model name: lower case, no punctuation, 'meta-' and '-instruct' style words dropped."""
    folded = name.lower().split("/")[-1]
    folded = re.sub(r"\b(meta|instruct|chat|hf|it)\b", " ", folded)
    return re.sub(r"[^a-z0-9]+", "", folded)


@cache
def presets() -> dict[str, dict[str, Any]]:
    """Every preset by id, read once per process."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(PRESET_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        found[data["id"]] = data
    return found


@cache
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for preset_id, data in presets().items():
        for name in (preset_id, data["name"], data.get("hf_repo", ""), *data.get("aliases", [])):
            if name:
                index.setdefault(_key(name), preset_id)
    return index


def find_preset(name: str) -> dict[str, Any] | None:
    """The preset ``name`` means, or None."""
    return presets().get(_index().get(_key(name), ""))


def suggest_presets(name: str, limit: int = 3) -> list[str]:
    close = difflib.get_close_matches(_key(name), _index(), n=limit * 3, cutoff=0.6)
    ids: list[str] = []
    for key in close:
        if _index()[key] not in ids:
            ids.append(_index()[key])
    return ids[:limit]


def get_preset(name: str) -> dict[str, Any]:
    found = find_preset(name)
    if found is None:
        suggestions = suggest_presets(name)
        did_you_mean = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise GpuflyError(f"unknown model '{name}'{did_you_mean}",
                          hint="`gpufly models` lists the presets; a config.json, a .gguf file or "
                          "module:function works too")
    return found
