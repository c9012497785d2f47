"""Shared test helpers: the shipped catalog, a CLI runner, and the gpu marker's skip rule."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from gpufly.catalog import Catalog, default_catalog


def _has_nvidia_gpu() -> bool:
    from gpufly.monitor.backends.nvml import Nvml

    nvml = Nvml()
    if not nvml.open().available:
        return False
    with nvml:
        return nvml.device_count() > 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _has_nvidia_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return default_catalog()


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_gpufly(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CliResult:
    """Run `python -m gpufly ARGS` in a fresh process, as a user's shell would."""
    environment = {**os.environ, "COLUMNS": "160", **(env or {})}
    done = subprocess.run([sys.executable, "-m", "gpufly", *args], capture_output=True, text=True,
                          env=environment, timeout=timeout)
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli():
    return run_gpufly
