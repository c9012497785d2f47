"""Loading a script of ``benchmarks/`` as a module, for the tests of its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).parent.parent.parent / "benchmarks"


def load_benchmark(stem: str) -> ModuleType:
    """``benchmarks/<stem>.py`` as a module, with ``benchmarks/`` on the path while it loads (its scripts import one
    another)."""
    path = BENCHMARKS / f"{stem}.py"
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"{stem}_under_test", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # a dataclass looks its module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))
