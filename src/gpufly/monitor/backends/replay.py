"""Replay: snapshots recorded by `gpufly watch --output FILE.jsonl` (or .csv), played back in order.

Used for tests and demos (every view runs without a GPU) and for looking back at a recorded run.
A line that is cut short (the recorder was killed mid-write) or is not a snapshot is skipped and
counted, so a damaged recording still plays.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpufly import jsonfile
from gpufly.errors import GpuflyError
from gpufly.monitor.sample import SCHEMA_VERSION, Snapshot
from gpufly.records import shown

RECORD_HINT = "record one with `gpufly watch --output FILE.jsonl` (or .csv)"


def read_recording(path: Path) -> tuple[list[Snapshot], int]:
    """All snapshots in a JSONL (or `watch`'s CSV) recording, and how many lines were skipped as damaged.

    The file is read through ``gpufly.jsonfile`` (a regular file under the log size cap: a FIFO, a socket or
    /dev/zero is refused, not waited on or read until memory runs out)."""
    text = jsonfile.read_text(path, f"no recording at {path}", RECORD_HINT, limit=jsonfile.LOG_LIMIT_BYTES,
                              kind="recording")
    if path.suffix.lower() == ".csv":
        return _csv_snapshots(text, path), 0
    snapshots: list[Snapshot] = []
    first_problem = ""
    skipped = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            snapshots.append(_snapshot(line, path, f"{path} line {number}"))
        except NewerRecording:
            raise
        except GpuflyError as exc:
            skipped += 1
            first_problem = first_problem or exc.message
    if not snapshots:
        why = f"; {first_problem}" if first_problem else ""
        raise GpuflyError(f"{path} holds no snapshots ({skipped} unreadable lines{why})", RECORD_HINT)
    return snapshots, skipped


def _snapshot(line: str, path: Path, where: str) -> Snapshot:
    """One JSONL line as a snapshot; a torn, over-nested or mistyped line is a GpuflyError (the caller skips it),
    a line from a newer gpufly a GpuflyError that stops the replay (see ``_check_version``)."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        raise GpuflyError(f"{where} is not a JSON snapshot", RECORD_HINT) from None
    _check_version(data, path)
    snapshot = Snapshot.from_dict(data, where=where)
    _check_time(snapshot, where)
    return snapshot


LAST_TIME = 253402300799.0
"""The last second of the year 9999 (UTC): a time past it is no clock reading, and the views cannot print it."""


def _check_time(snapshot: Snapshot, where: str) -> None:
    """Replay orders, paces and prints by the time: NaN, infinity or a second no calendar holds would break all
    three."""
    if not (math.isfinite(snapshot.time) and 0 <= snapshot.time <= LAST_TIME):
        raise GpuflyError(f"{where}: time must be seconds since 1970 (0 to {LAST_TIME:.0f}), "
                          f"got {shown(snapshot.time)}", RECORD_HINT)


def _csv_snapshots(text: str, path: Path) -> list[Snapshot]:
    """The snapshots of a CSV recording, each held to the same strict types as a JSONL line (a CSV cell is
    text, so "abc" in a number column gets through the CSV reader and is caught here, naming the column)."""
    from gpufly.monitor.logger import snapshots_from_csv

    try:
        parsed = snapshots_from_csv(text)
    except (ValueError, TypeError, csv.Error) as exc:
        raise GpuflyError(f"{path} is not a CSV recording of `gpufly watch` ({exc})", RECORD_HINT) from None
    snapshots = []
    for snapshot in parsed:
        where = f"{path} (the sample at time {snapshot.time})"
        _check_time(snapshot, where)
        try:
            snapshots.append(Snapshot.from_dict(snapshot.to_dict(), where=where))
        except GpuflyError as exc:
            raise GpuflyError(exc.message, exc.hint or RECORD_HINT) from None
    if not snapshots:
        raise GpuflyError(f"{path} holds no samples", RECORD_HINT)
    return snapshots


class NewerRecording(GpuflyError):
    """A line from a newer gpufly: the whole replay stops, where a damaged line is only skipped."""


def _check_version(data: Any, path: Path) -> None:
    """A line from a newer gpufly whose schema this one does not know is refused, not read as its own version."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerRecording(f"{path} was written by a newer gpufly (schema_version {version}); this one reads "
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
