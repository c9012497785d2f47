"""The examples in docstrings run: every module of gpufly that has one is found and its examples executed."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "gpufly"
SKIP = ("tune/workloads/",)
"""Modules that import torch at the top (built-in workloads): they have no examples, and importing them is slow."""


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if str(rel).startswith(SKIP) or ">>> " not in path.read_text():
            continue
        parts = ("gpufly", *rel.with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_search_finds_the_known_examples() -> None:
    assert {"gpufly.errors", "gpufly.records", "gpufly.catalog.lookup"} <= set(_modules_with_examples())


@pytest.mark.parametrize("name", _modules_with_examples())
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
