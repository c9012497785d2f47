"""Start `gpufly serve` as a real process on a free loopback port, for the HTTP, browser and Prometheus tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

RECORDING = Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl"
STOP_PATIENCE_S = 60.0
"""SIGTERM is a normal stop: a server still running this long after it is a failed test, not a slow one."""


@dataclass
class Served:
    url: str
    info: dict[str, Any]
    process: subprocess.Popen[str]

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str, str]:
        with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=timeout) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read().decode()

    def json(self, path: str) -> Any:
        return json.loads(self.get(path)[2])


@contextmanager
def serving(*args: str, replay: Path | None = RECORDING, interval: float = 0.1,
            env: dict[str, str] | None = None) -> Iterator[Served]:
    """`gpufly serve --port 0 --json` (plus ``args``, with ``env`` over this environment); yields once the first
    line says where it listens."""
    command = [sys.executable, "-m", "gpufly", "serve", "--port", "0", "--json", "--interval", str(interval), *args]
    if replay is not None:
        command += ["--replay", str(replay)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    try:
        line = process.stdout.readline() if process.stdout else ""
        if not line:
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"gpufly serve did not start: {err}")
        info = json.loads(line)
        yield Served(info["url"], info, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_PATIENCE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError("gpufly serve did not stop on SIGTERM") from None


def require_program(name: str) -> str:
    """The program's path; without it, skip here but fail in CI (where .ci/run installs it)."""
    path = shutil.which(name)
    if path:
        return path
    reason = f"needs Debian's `{name}` package (apt-get install {name})"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must install it (.ci/run does)")
    pytest.skip(reason)
