"""Shared test helpers: the shipped catalog, CLI runners (in-process and as a real process), and the gpu marker."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gpufly.catalog import Catalog, default_catalog

CLI_COLUMNS = "160"
"""The terminal width CLI tests render at, unless a test gives its own COLUMNS."""
logging.raiseExceptions = False
"""Libraries (transformers) make their log handler once per process, on the sys.stderr of that moment; in a test
process that is one test's capture stream, closed when the test ends, and a later test's log line would print
"--- Logging error ---" with a traceback into the stderr it checks. A real `gpufly` process has one stderr, so
this only quiets an artifact of running many commands in one process (logging's own production setting)."""
PROCESS_TIMEOUT_S = 600.0
"""Generous on purpose: a real process on a busy 2-core CI machine can take many times its idle time, and a test
must fail on a wrong answer, never on a slow machine."""


def _has_nvidia_gpu() -> bool:
    from gpufly.hw import Nvml

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


@pytest.fixture(autouse=True)
def _english_output(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests read English text whatever the machine's locale (a zh_CN machine would otherwise switch report,
    doctor and install to Chinese); the language is process-wide, so it is put back to English after each test."""
    monkeypatch.setenv("GPUFLY_LANG", "en")
    yield
    from gpufly import i18n

    i18n.use_language("en")


@pytest.fixture(autouse=True)
def _fresh_sync_arm_budget() -> None:
    """The sync counter may change a tensor class only so many times in a process (``ARMS_PER_PROCESS``); a test
    worker runs many profilers, so each test starts with the whole budget, as a fresh process would."""
    syncs = sys.modules.get("gpufly.profile.syncs")
    if syncs is not None:
        syncs._arms_left.clear()


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return default_catalog()


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(overlay: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(overlay)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_gpufly(*args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> CliResult:
    """Run the CLI in this process (``gpufly.cli.main.main``), capturing what it prints and its exit code.

    The same entry point a shell reaches, without a fresh interpreter per call (seconds each on a busy machine).
    ``env`` is laid over os.environ for the call, so child processes the command starts see it too.
    ``timeout`` is accepted for the process runner's sake and unused here.
    """
    from gpufly.cli.main import main

    del timeout
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with _environment({"COLUMNS": CLI_COLUMNS, **(env or {})}), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # an uncaught error: what a real process would print, and its exit code
            traceback.print_exc(file=err)
            code = 1
    return CliResult(code, out.getvalue(), err.getvalue())


def run_gpufly_process(*args: str, env: dict[str, str] | None = None,
                       timeout: float = PROCESS_TIMEOUT_S) -> CliResult:
    """Run `python -m gpufly ARGS` in a fresh process, as a user's shell would: for what only a real process
    shows (start-up imports, signals, the interpreter's exit)."""
    environment = {**os.environ, "COLUMNS": CLI_COLUMNS, **(env or {})}
    done = subprocess.run([sys.executable, "-m", "gpufly", *args], capture_output=True, text=True,
                          env=environment, timeout=timeout)
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli():
    """The CLI, in this process."""
    return run_gpufly


@pytest.fixture
def cli_process():
    """The CLI as a separate `python -m gpufly` process."""
    return run_gpufly_process
