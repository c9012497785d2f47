"""`gpufly watch`'s writers: JSONL (the replay format) and CSV, one line per sample, rotated by size.

Each GPU's line carries its health verdict (``gpufly.monitor.health``) on the samples written so far: a
``health`` object in JSONL (replay ignores it and judges the samples afresh), ``gpu_health`` and
``gpu_health_reasons`` columns in CSV. A GPU's recent XID events are a ``gpu_xid_events`` cell in CSV
(``79@1733350000.000#3``: code, or ``ecc_double_bit``, at time, sequence number; ``;`` between events; ``none`` for
no event, empty when not watched), and ``gpu_jobs`` the jobs of its processes (``--attribute``).

Every line goes to the file in one ``os.write`` on a descriptor opened with O_APPEND, so a line is
either all there or not there: Ctrl-C, a kill or a crash loses nothing already written, and the
file never ends in half a line that replay would have to guess at. Rotation renames run.jsonl to run.1.jsonl
(run.1 to run.2, and so on, up to ``keep``) before a line would take the file past its limit.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections import defaultdict
from dataclasses import fields
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.hw import GpuSample, HostSample, XidEvent
from gpufly.jsonfile import check_regular
from gpufly.monitor.health import Health, HealthWatch, assess
from gpufly.monitor.sample import Snapshot

GPU_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(GpuSample) if f.name not in ("mig", "processes", "throttle_reasons", "xid_events")
)
HOST_COLUMNS: tuple[str, ...] = ("cpu_percent", "memory_used_bytes", "memory_total_bytes", "swap_used_bytes")
CSV_COLUMNS: tuple[str, ...] = (
    "time", "hostname", *(f"gpu_{c}" for c in GPU_COLUMNS), "gpu_throttle_reasons", "gpu_process_count",
    "gpu_health", "gpu_health_reasons", "gpu_xid_events", "gpu_jobs", *(f"host_{c}" for c in HOST_COLUMNS),
)
"""One CSV row per GPU per sample (one row with empty GPU columns on a machine without GPUs)."""

Verdicts = dict[int, Health]
"""Health by GPU index, as ``HealthWatch.update`` returns it."""


def _judged(snapshot: Snapshot, verdicts: Verdicts | None) -> Verdicts:
    """The verdicts given, or each GPU judged on this sample alone (no window: persistent rules unchecked)."""
    return verdicts if verdicts is not None else {gpu.index: assess([gpu]) for gpu in snapshot.gpus}


def jsonl_lines(snapshot: Snapshot, verdicts: Verdicts | None = None) -> list[str]:
    """The snapshot as one JSONL line, each GPU with its ``health`` (``HealthWatch``'s verdicts, or this sample's)."""
    data = snapshot.to_dict()
    judged = _judged(snapshot, verdicts)
    for gpu in data["gpus"]:
        gpu["health"] = judged[gpu["index"]].to_dict()
    return [json.dumps(data, separators=(",", ":")) + "\n"]


def _cell(value: Any) -> Any:
    return "" if value is None else value


def csv_rows(snapshot: Snapshot, verdicts: Verdicts | None = None) -> list[dict[str, Any]]:
    host = {f"host_{c}": _cell(getattr(snapshot.host, c)) for c in HOST_COLUMNS}
    base = {"time": snapshot.time, "hostname": snapshot.hostname}
    if not snapshot.gpus:
        return [{**base, **host}]
    judged = _judged(snapshot, verdicts)
    rows = []
    for gpu in snapshot.gpus:
        row = {**base, **{f"gpu_{c}": _cell(getattr(gpu, c)) for c in GPU_COLUMNS}, **host}
        row["gpu_throttle_reasons"] = _reasons_cell(gpu.throttle_reasons)
        row["gpu_process_count"] = len(gpu.processes)
        row["gpu_health"] = judged[gpu.index].level.name
        row["gpu_health_reasons"] = ";".join(reason.code for reason in judged[gpu.index].reasons)
        row["gpu_xid_events"] = _xids_cell(gpu.xid_events)
        row["gpu_jobs"] = ";".join(sorted({p.job for p in gpu.processes if p.job}))
        rows.append(row)
    return rows


def _reasons_cell(reasons: list[str] | None) -> str:
    """Empty for "NVML will not say", ``none`` for "no reason active", else the names joined by ';'."""
    if reasons is None:
        return ""
    return ";".join(reasons) if reasons else "none"


def _xids_cell(events: list[XidEvent] | None) -> str:
    if events is None:
        return ""
    return ";".join(f"{event.xid if event.kind == 'xid' else event.kind}@{event.time:.3f}#{event.seq}"
                    for event in events) or "none"


def _xids_from_cell(cell: str | None) -> list[XidEvent] | None:
    """The cell ``_xids_cell`` wrote, back as events; None for an empty cell (or an older file without it)."""
    if not cell:
        return None
    events = []
    for entry in [] if cell == "none" else cell.split(";"):
        what, _, rest = entry.partition("@")
        stamp, _, seq = rest.partition("#")
        xid = int(what) if what.isdigit() else None
        events.append(XidEvent(kind="xid" if xid is not None else what, xid=xid, time=float(stamp), seq=int(seq)))
    return events


def csv_text(rows: list[dict[str, Any]], header: bool) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    raise GpuflyError(f"cannot tell the format of {path.name!r} from its extension",
                      "name the output FILE.jsonl (replayable, with processes) or FILE.csv (for spreadsheets)")


class SampleLog:
    """Appends snapshots to a JSONL or CSV file, rotating it past ``rotate_bytes`` (None: never)."""

    def __init__(self, path: Path, rotate_bytes: int | None = None, keep: int = 5) -> None:
        if rotate_bytes is not None and rotate_bytes <= 0:
            raise GpuflyError("--rotate must be a positive size in MB", "for example --rotate 100")
        self.path = path
        self.format = format_of(path)
        self.rotate_bytes = rotate_bytes
        self.keep = keep
        self.lines_written = 0
        self.torn_bytes_dropped = 0  # an unfinished last line cut when the file was opened
        self.health = HealthWatch()
        self._fd = self._open()

    def _open(self) -> int:
        """Open for appending; a last line cut short (a kill or a full disk mid-write) is cut off first, so the
        next sample starts on a line of its own instead of being glued onto half a sample."""
        check_regular(self.path, hint="give --output a regular file, for example --output gpus.jsonl")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise GpuflyError(f"cannot write {self.path}: {exc.strerror}", "choose a folder you can write to") from None
        try:
            self.torn_bytes_dropped += drop_torn_tail(fd)
        except OSError as exc:
            os.close(fd)
            raise self._failed(exc) from None
        return fd

    def _size(self) -> int:
        return os.fstat(self._fd).st_size

    def write(self, snapshot: Snapshot) -> None:
        """Append one sample; a full disk or a vanished folder is the user's to fix, so a GpuflyError."""
        verdicts = self.health.update(snapshot)
        try:
            text = self._render(snapshot, verdicts, header=self._size() == 0)
            data = text.encode()
            if self.rotate_bytes is not None and self._size() > 0 and self._size() + len(data) > self.rotate_bytes:
                self._rotate()
                data = self._render(snapshot, verdicts, header=True).encode()
            written = os.write(self._fd, data)
        except OSError as exc:
            raise self._failed(exc) from None
        if written != len(data):
            raise GpuflyError(f"cannot write {self.path}: only {written} of {len(data)} bytes went to the file",
                              "free some space on that disk, or write to another one with -o")
        self.lines_written += 1

    __call__ = write

    def _render(self, snapshot: Snapshot, verdicts: Verdicts, header: bool) -> str:
        if self.format == "jsonl":
            return "".join(jsonl_lines(snapshot, verdicts))
        return csv_text(csv_rows(snapshot, verdicts), header=header)

    def _failed(self, exc: OSError) -> GpuflyError:
        return GpuflyError(f"cannot write {self.path}: {exc.strerror or exc}",
                           "free some space on that disk, or write to another file or folder with -o")

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1  # closed: a failed rename below must not leave close() a descriptor to close twice
        self.rotated(self.keep).unlink(missing_ok=True)
        for n in range(self.keep - 1, 0, -1):
            if self.rotated(n).exists():
                self.rotated(n).rename(self.rotated(n + 1))
        self.path.rename(self.rotated(1))
        self._fd = self._open()

    def rotated(self, n: int) -> Path:
        """The n-th older file: run.jsonl -> run.1.jsonl, so it keeps the extension replay reads by."""
        return self.path.with_name(f"{self.path.stem}.{n}{self.path.suffix}")

    def close(self) -> None:
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            os.close(fd)
        except OSError as exc:
            raise self._failed(exc) from None


TAIL_CHUNK = 4096


def drop_torn_tail(fd: int) -> int:
    """Cut a regular file back to its last newline when it does not end with one; the bytes cut (0 when whole).

    >>> import tempfile
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(b'{"a": 1}\\n{"a": 2')
    ...     f.flush()
    ...     drop_torn_tail(f.fileno()), os.pread(f.fileno(), 100, 0)
    (7, b'{"a": 1}\\n')
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    end = size
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    else:
        keep = 0
    os.ftruncate(fd, keep)
    return size - keep


def _number(text: str) -> Any:
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def snapshots_from_csv(text: str) -> list[Snapshot]:
    """Rebuild snapshots from `watch`'s CSV (GPU and host figures; the CSV carries no process list)."""
    by_time: dict[float, Snapshot] = {}
    gpus: dict[float, list[GpuSample]] = defaultdict(list)
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("time") in (None, "time"):
            continue
        t = float(row["time"])
        host = HostSample(**{c: _number(row.get(f"host_{c}", "")) for c in HOST_COLUMNS})
        by_time.setdefault(t, Snapshot(time=t, hostname=row.get("hostname") or "unknown", host=host))
        if row.get("gpu_index", "") != "":
            values = {c: _number(row.get(f"gpu_{c}", "")) for c in GPU_COLUMNS}
            values["name"] = row.get("gpu_name") or "unknown GPU"
            for key in ("uuid", "pci_bus_id"):
                values[key] = row.get(f"gpu_{key}") or None
            reasons = row.get("gpu_throttle_reasons")
            gpu = GpuSample(**values)
            gpu.throttle_reasons = None if not reasons else ([] if reasons == "none" else reasons.split(";"))
            gpu.xid_events = _xids_from_cell(row.get("gpu_xid_events"))
            gpus[t].append(gpu)
    for t, snapshot in by_time.items():
        snapshot.gpus = gpus.get(t, [])
    return [by_time[t] for t in sorted(by_time)]
