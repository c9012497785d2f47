"""Write snapshots as `gpufly watch --log` does, in both of its formats, for the tests that read the records back."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufly.monitor.logger import SampleLog


def write_jsonl_and_csv(snapshots: Iterable[Any], folder: Path, stem: str = "run") -> None:
    """``folder/stem.jsonl`` and ``folder/stem.csv``, each holding every snapshot."""
    snapshots = list(snapshots)
    for suffix in (".jsonl", ".csv"):
        log = SampleLog(folder / f"{stem}{suffix}")
        for snapshot in snapshots:
            log.write(snapshot)
        log.close()
