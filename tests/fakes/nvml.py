"""Recorded machines for the tests: gpufly's shipped fake NVML (``gpufly.hw.fake_nvml``) over tests/fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufly.hw import FIXTURE_ENV
from gpufly.hw.fake_nvml import FakePynvml

FIXTURES = Path(__file__).parent.parent / "fixtures"


def fake_nvml(name: str, **kwargs: Any) -> FakePynvml:
    """The fake NVML replaying tests/fixtures/NAME (``lost=(1,)``, ``init_error=...`` add faults)."""
    return FakePynvml.from_file(FIXTURES / name, **kwargs)


def nvml_env(name: str) -> dict[str, str]:
    """The environment that makes every NVML reader in a CLI run replay tests/fixtures/NAME."""
    return {FIXTURE_ENV: str(FIXTURES / name)}
