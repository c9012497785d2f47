"""The monitor as a library: its public API, no UI library pulled in by importing it, and the extras it needs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gpufly.hw
import gpufly.monitor


@pytest.mark.parametrize("package", [gpufly.monitor, gpufly.hw])
def test_the_public_api_is_re_exported(package: object) -> None:
    names = package.__all__  # type: ignore[attr-defined]
    assert names and all(hasattr(package, name) for name in names)


def test_importing_the_monitor_pulls_in_no_ui_library() -> None:
    code = ("import sys, gpufly.monitor, gpufly.hw; "
            "print(sorted(m for m in ('textual', 'prometheus_client', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_serve_without_prometheus_client_names_the_extra(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    done = cli("serve", "--port", "0")
    assert done.code == 2
    error, hint = done.stderr.splitlines()
    assert error == "error: gpufly serve needs prometheus_client, which is not installed"
    assert hint.startswith("hint: pip install 'gpufly[monitor]'")
