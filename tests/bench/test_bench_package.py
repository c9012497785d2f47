"""The bench package's docstring examples run, and its modules keep torch and the UI out of module level."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

from tests.test_layering import SRC, UI, _module_level_imports

MODULES = ["timing", "work", "peaks", "kernels", "cpu", "run"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(f"gpufly.bench.{name}"))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("path", sorted((SRC / "bench").glob("*.py")), ids=lambda p: p.name)
def test_the_bench_logic_does_not_import_the_ui(path: Path) -> None:
    assert [name for name in _module_level_imports(path) if name.split(".")[0] in UI or name.startswith(UI)] == []
