"""The catalog and advisor commands start without torch or transformers (measured by -X importtime)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "matplotlib")


@pytest.mark.parametrize("args", [("--help",), ("gpus",), ("gpus", "show", "4090"), ("report",),
                                  ("fit", "llama-3.1-8b", "--gpu", "4090"), ("recommend", "llama-3.1-8b")])
def test_no_heavy_import(args: tuple[str, ...]) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpufly", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY), f"heavy modules imported: {imported & set(HEAVY)}"
