"""Replay: snapshots recorded by `gpufly watch --output FILE.jsonl` (or .csv), played back in order.

Used for tests and demos (every view runs without a GPU) and for looking back at a recorded run.
A line that is cut short (the recorder was killed mid-write) or is not a snapshot is skipped and
counted, so a damaged recording still plays.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.monitor.sample import SCHEMA_VERSION, Snapshot


def read_recording(path: Path) -> tuple[list[Snapshot], int]:
    """All snapshots in a JSONL recording, and how many lines were skipped as damaged."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        raise GpuflyError(f"no recording at {path}", "record one with `gpufly watch --output FILE.jsonl`") from None
    except (IsADirectoryError, PermissionError) as exc:
        hint = "give a JSONL file written by `gpufly watch`"
        raise GpuflyError(f"cannot read {path}: {exc.strerror}", hint) from None
    if path.suffix.lower() == ".csv":
        from gpufly.monitor.logger import snapshots_from_csv

        snapshots = snapshots_from_csv("\n".join(lines))
        if not snapshots:
            raise GpuflyError(f"{path} holds no samples", "record one with `gpufly watch --output FILE.csv`")
        return snapshots, 0
    snapshots: list[Snapshot] = []
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        _check_version(data, path)
        try:
            snapshots.append(Snapshot.from_dict(data, where=str(path)))
        except GpuflyError:
            skipped += 1
    if not snapshots:
        raise GpuflyError(f"{path} holds no snapshots ({skipped} unreadable lines)",
                          "record one with `gpufly watch --output FILE.jsonl`")
    return snapshots, skipped


def _check_version(data: Any, path: Path) -> None:
    """A line from a newer gpufly whose schema this one does not know is refused, not read as its own version."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise GpuflyError(f"{path} was written by a newer gpufly (schema_version {version}); this one reads "
                          f"{SCHEMA_VERSION}", "upgrade gpufly to replay it")


class ReplayBackend:
    """Hands out recorded snapshots one per call; at the end it loops (``loop=True``) or holds the last."""

    def __init__(self, path: Path, loop: bool = True) -> None:
        self.path = path
        self.snapshots, self.skipped = read_recording(path)
        self._loop = loop
        self._position = 0

    @property
    def gpu_status(self) -> str | None:
        return self.snapshots[0].gpu_status

    @property
    def interval_s(self) -> float | None:
        """The median spacing of the recording, so replay plays at the pace it was recorded."""
        gaps = sorted(b.time - a.time for a, b in zip(self.snapshots, self.snapshots[1:], strict=False))
        positive = [g for g in gaps if g > 0]
        return positive[len(positive) // 2] if positive else None

    def snapshot(self) -> Snapshot:
        snapshot = self.snapshots[self._position]
        if self._position + 1 < len(self.snapshots):
            self._position += 1
        elif self._loop:
            self._position = 0
        return snapshot

    def __iter__(self) -> Iterator[Snapshot]:
        return iter(self.snapshots)

    def close(self) -> None:
        """Nothing to release; here so every backend closes the same way."""
