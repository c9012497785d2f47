"""Layers are checked, not hoped for: logic never imports the CLI or UI libraries, nor torch at load."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "gpufly"
UI = ("typer", "rich", "textual", "gpufly.cli")
HEAVY = ("torch", "transformers", "matplotlib", "tensorflow", "jax")
LOGIC_PACKAGES = ("catalog", "report", "monitor/backends", "errors.py", "__init__.py")


def _module_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def _sources(*parts: str) -> list[Path]:
    paths: list[Path] = []
    for part in parts:
        target = SRC / part
        paths += [target] if target.is_file() else sorted(target.rglob("*.py"))
    return paths


@pytest.mark.parametrize("path", _sources(*LOGIC_PACKAGES), ids=lambda p: str(p.relative_to(SRC)))
def test_logic_does_not_import_the_ui(path: Path) -> None:
    bad = [name for name in _module_level_imports(path) if name.split(".")[0] in UI or name.startswith(UI)]
    assert bad == []


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_heavy_import_at_module_level(path: Path) -> None:
    bad = [name for name in _module_level_imports(path) if name.split(".")[0] in HEAVY]
    assert bad == []
