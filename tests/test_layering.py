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


TORCH_MODULES = ("tune/workloads",)
"""Built-in workloads define nn.Module classes, so they import torch at the top; nothing imports them at load."""


def _light(path: Path) -> bool:
    return not any(str(path.relative_to(SRC)).startswith(part) for part in TORCH_MODULES)


@pytest.mark.parametrize("path", [p for p in sorted(SRC.rglob("*.py")) if _light(p)],
                         ids=lambda p: str(p.relative_to(SRC)))
def test_no_heavy_import_at_module_level(path: Path) -> None:
    bad = [name for name in _module_level_imports(path) if name.split(".")[0] in HEAVY]
    assert bad == []


@pytest.mark.parametrize("path", [p for p in sorted(SRC.rglob("*.py")) if _light(p)],
                         ids=lambda p: str(p.relative_to(SRC)))
def test_nothing_imports_the_torch_workloads_at_module_level(path: Path) -> None:
    assert [name for name in _module_level_imports(path) if name.startswith("gpufly.tune.workloads")] == []
