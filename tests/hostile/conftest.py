"""What every hostile case checks, and the fixtures that make its inputs."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import CliResult
from tests.hostile.inputs import NVML_ENV, SOCKETS


def refused(result: CliResult) -> None:
    """The command refused its input as a user's mistake: exit 2, exactly one `error:` line and one `hint:` line on
    stderr, and no traceback."""
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    hints = [line for line in lines if line.startswith("hint:")]
    assert "Traceback" not in result.stderr, result.stderr
    assert result.code == 2, f"exit {result.code}\n{result.stderr}{result.stdout[-2000:]}"
    assert len(errors) == 1 and len(hints) == 1, result.stderr
    assert errors[0].strip() != "error:", "an empty error line"


def answered_or_refused(result: CliResult) -> None:
    """A valid input is answered (0, or 1 for a failed check); an invalid one refused as `refused` says."""
    assert "Traceback" not in result.stderr, result.stderr
    if result.code == 2:
        refused(result)
    else:
        assert result.code in (0, 1), f"exit {result.code}\n{result.stderr}"


def skip_as_root() -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its permission bits say")


@pytest.fixture
def run(cli):  # type: ignore[no-untyped-def]
    """The CLI in this process, on the shipped fake NVML."""

    def run_command(*args: str) -> CliResult:
        return cli(*args, env=NVML_ENV)

    return run_command


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while SOCKETS:
        SOCKETS.pop().close()
