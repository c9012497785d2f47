"""Layers are checked, not hoped for (import-linter's contracts, as AST walks over src/gpufly).

1. Stages import each other only along DEPENDS_ON: the hardware layer and the catalog at the bottom, the report
   (which gathers every stage) and the CLI at the top. A new edge is a design decision: add it here, with why.
2. Logic modules import no UI library (typer, rich, textual) nor the CLI at module level; only the CLI and the
   terminal UI do.
3. Nothing imports torch, transformers, matplotlib, TensorFlow or JAX at module level (start-up stays light), and
   nothing imports the torch workloads at module level.
4. No module imports another module's private name (``from gpufly.x import _helper``).
5. Each subpackage re-exports its public API (``__all__``) and importing it pulls in no heavy or optional library.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "gpufly"
UI = ("typer", "rich", "textual", "gpufly.cli")
HEAVY = ("torch", "transformers", "matplotlib", "tensorflow", "jax")
OPTIONAL = ("textual", "prometheus_client", "matplotlib", "gguf", "torch", "transformers", "ray")
BASE = frozenset({"errors", "records", "jsonfile", "loading", "extras", "palette", "i18n"})
"""Root modules every layer may use: the error type, the record loader, file writing, the function loader, the
chart colours, the message catalog."""
ENTRY = frozenset({"__init__", "__main__", "keras"})
"""The package root (``gpufly.Profiler`` and ``gpufly.apply``, loaded on first use), ``gpufly.keras`` (the Keras
callback, a user-facing entry like ``gpufly.Profiler``) and ``python -m gpufly``:
above every stage, and importable by all (``from gpufly import __version__``)."""

DEPENDS_ON: dict[str, frozenset[str]] = {
    "hw": frozenset(),
    "catalog": frozenset(),
    "models": frozenset(),
    "estimate": frozenset({"catalog", "models", "bench"}),  # bench: `fit --calibrate` reads a saved bench run
    "bench": frozenset({"hw", "catalog"}),  # the device's catalog peaks, NVML clocks around a run
    "doctor": frozenset({"hw", "catalog"}),  # the GPUs through NVML, their catalog entries
    "monitor": frozenset({"hw"}),
    "profile": frozenset({"hw"}),  # GPU utilization while a loop runs
    "tune": frozenset({"hw", "catalog"}),  # NVML's energy counter around a trial; the recsys study's catalog price
    "fleet": frozenset({"hw", "catalog", "doctor", "bench", "monitor"}),
    "report": frozenset({"hw", "catalog", "models", "estimate", "doctor", "bench", "profile", "tune", "monitor",
                         "fleet"}),
    "cli": frozenset({"hw", "catalog", "models", "estimate", "doctor", "bench", "profile", "tune", "monitor",
                      "report", "fleet"}),
}
"""Which stage may import which (at module level or inside a function); the base modules are open to all."""

UI_MODULES = ("cli/", "monitor/tui.py", "__main__.py")
"""The only places a UI library may be imported at module level."""
TORCH_MODULES = ("tune/workloads/",)
"""Built-in workloads define nn.Module classes, so they import torch at the top; nothing imports them at load."""


@dataclass(frozen=True)
class Import:
    module: str
    names: tuple[str, ...]
    top_level: bool
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, (), id(node) in top, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield Import(module, tuple(a.name for a in node.names), id(node) in top, node.lineno)


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _rel(path: Path) -> str:
    return str(path.relative_to(SRC))


def _stage(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _stage_of_module(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "gpufly" and len(parts) > 1 else None


@pytest.mark.parametrize("path", _sources(), ids=_rel)
def test_stages_import_each_other_only_along_the_declared_layers(path: Path) -> None:
    stage = _stage(path)
    if stage in ENTRY:
        return
    if stage in BASE:
        allowed: frozenset[str] = frozenset()
    else:
        assert stage in DEPENDS_ON, f"{stage}/ is a new stage: declare what it may import in DEPENDS_ON"
        allowed = DEPENDS_ON[stage]
    bad = []
    for found in _imports(path):
        target = _stage_of_module(found.module)
        if target is None and found.module == "gpufly":
            continue  # `from gpufly import __version__`
        if target is None or target == stage or target in BASE | ENTRY or target in allowed:
            continue
        bad.append(f"line {found.line}: {found.module}")
    assert bad == [], f"{_rel(path)} ({stage}) imports a stage it may not: {bad}"


@pytest.mark.parametrize("path", [p for p in _sources() if not _rel(p).startswith(UI_MODULES)], ids=_rel)
def test_logic_does_not_import_the_ui(path: Path) -> None:
    bad = [f"line {i.line}: {i.module}" for i in _imports(path) if i.top_level
           and (i.module.split(".")[0] in UI or i.module.startswith(UI))]
    assert bad == []


@pytest.mark.parametrize("path", [p for p in _sources() if not _rel(p).startswith(TORCH_MODULES)], ids=_rel)
def test_no_heavy_import_at_module_level(path: Path) -> None:
    bad = [i.module for i in _imports(path) if i.top_level and i.module.split(".")[0] in HEAVY]
    assert bad == []


@pytest.mark.parametrize("path", [p for p in _sources() if not _rel(p).startswith(TORCH_MODULES)], ids=_rel)
def test_nothing_imports_the_torch_workloads_at_module_level(path: Path) -> None:
    assert [i.module for i in _imports(path) if i.top_level and i.module.startswith("gpufly.tune.workloads")] == []


@pytest.mark.parametrize("path", _sources(), ids=_rel)
def test_no_module_imports_another_modules_private_names(path: Path) -> None:
    own = _module_name(path)
    bad = [f"line {i.line}: {i.module}.{name}" for i in _imports(path) if i.module.startswith("gpufly")
           and i.module != own for name in i.names if name.startswith("_") and not name.startswith("__")]
    bad += [f"line {i.line}: {i.module}" for i in _imports(path)
            if any(part.startswith("_") and not part.startswith("__") for part in i.module.split(".")[1:])
            and i.module.startswith("gpufly")]
    assert bad == []


def _subpackages() -> list[str]:
    return sorted(p.parent.name for p in SRC.glob("*/__init__.py") if p.parent.name != "cli")


@pytest.mark.parametrize("package", _subpackages())
def test_each_subpackage_declares_its_public_api(package: str) -> None:
    tree = ast.parse((SRC / package / "__init__.py").read_text())
    declared = [node for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
    assert declared, f"gpufly/{package}/__init__.py has no __all__"


def test_importing_a_subpackage_and_its_api_pulls_in_no_optional_library() -> None:
    """In a fresh interpreter: every subpackage's __all__ resolves, and no heavy or optional library is loaded."""
    script = (
        "import importlib, json, sys\n"
        f"packages = {_subpackages()!r}\n"
        "missing = [f'{p}.{n}' for p in packages for n in importlib.import_module('gpufly.' + p).__all__\n"
        "           if not hasattr(importlib.import_module('gpufly.' + p), n)]\n"
        f"loaded = sorted(m for m in {OPTIONAL!r} if m in sys.modules)\n"
        "print(json.dumps({'missing': missing, 'loaded': loaded}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(done.stdout) == {"missing": [], "loaded": []}
