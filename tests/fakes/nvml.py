"""Recorded machines for the tests: gpufly's shipped fake NVML (``gpufly.hw.fake_nvml``) over tests/fixtures,
and machines of any size built in code, with processes that are real pids of this machine or gone ones."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from gpufly.hw import FIXTURE_ENV
from gpufly.hw.fake_nvml import FakePynvml

FIXTURES = Path(__file__).parent.parent / "fixtures"

GONE_PID_BASE = 2**22 + 1
"""Above Linux's largest pid_max (2**22): pids from here on never name a process, as on a node where GPU
processes come and go between NVML listing them and psutil reading them."""


def fake_nvml(name: str, **kwargs: Any) -> FakePynvml:
    """The fake NVML replaying tests/fixtures/NAME (``lost=(1,)``, ``init_error=...`` add faults)."""
    return FakePynvml.from_file(FIXTURES / name, **kwargs)


def nvml_env(name: str) -> dict[str, str]:
    """The environment that makes every NVML reader in a CLI run replay tests/fixtures/NAME."""
    return {FIXTURE_ENV: str(FIXTURES / name)}


def machine_pids(count: int, gone: int = 0) -> list[int]:
    """``count`` pids: this process and its ancestors (real processes, with users and commands), then as many
    gone pids as asked and as make up the count."""
    real = [os.getpid(), *(parent.pid for parent in psutil.Process().parents())]
    real = real[:max(0, count - gone)]
    return real + [GONE_PID_BASE + n for n in range(count - len(real))]
