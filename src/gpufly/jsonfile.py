"""Reading and writing gpufly's files: every way a read can fail is one GpuflyError line, and every write is
atomic (a whole new file or the old one, never half of either) or, for a log, one flushed line at a time.

A path that exists and is not a regular file (a device such as /dev/full, a FIFO, a folder) is refused before
anything is written: replacing it would turn a device node into a file, and writing into it can "succeed"
without storing anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError

WRITE_HINT = "give a path to a file in a folder you can write"
DOCUMENT_LIMIT_BYTES = 64 * 2**20
"""The largest JSON document gpufly reads (facts, bench runs, profiles, config.json): far above any it writes."""
LOG_LIMIT_BYTES = 2**30
"""The largest line-per-record file it reads whole (a `watch` recording, tuner results)."""


def read_text(path: Path, missing: str, hint: str, limit: int = DOCUMENT_LIMIT_BYTES, kind: str = "file") -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes; a missing file, a folder, a device, pipe or
    socket (`/dev/zero` would be read until memory runs out), an oversized or binary file is one GpuflyError."""
    try:
        mode = os.stat(path).st_mode  # before opening: opening a FIFO would wait for a writer
        if stat.S_ISDIR(mode):
            raise GpuflyError(f"{path} is a folder, not a {kind}", hint=hint)
        if not stat.S_ISREG(mode):
            raise GpuflyError(f"{path} is not a regular file (a device, pipe or socket)", hint=hint)
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError as exc:
        raise GpuflyError(missing, hint=hint) from exc
    except OSError as exc:
        raise GpuflyError(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from exc
    if len(data) > limit:
        raise GpuflyError(f"{path} is larger than the {limit // 2**20} MiB gpufly reads", hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GpuflyError(f"{path} is not a text file (byte {exc.start} is not UTF-8)", hint=hint) from exc


def parse_json(text: str, where: str, hint: str) -> Any:
    """``text`` parsed as JSON; invalid or absurdly nested JSON is one GpuflyError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpuflyError(f"{where} is not valid JSON (line {exc.lineno}: {exc.msg})", hint=hint) from exc
    except RecursionError:
        raise GpuflyError(f"{where} is nested too deeply to be a gpufly file", hint=hint) from None


def read_json(path: Path, missing: str, hint: str) -> Any:
    """The parsed document at ``path``. ``missing`` is the message for a file that is not there;
    ``hint`` says how to get a good file, for a missing or unparsable one."""
    return parse_json(read_text(path, missing, hint, kind="JSON file"), str(path), hint)


def check_regular(path: Path, hint: str = WRITE_HINT) -> None:
    """Refuse a path that exists and is not a regular file (a device, a FIFO, a socket, a folder)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GpuflyError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from None
    if stat.S_ISDIR(mode):
        raise GpuflyError(f"cannot write {path}: it is a folder", hint=hint)
    if not stat.S_ISREG(mode):
        raise GpuflyError(f"cannot write {path}: it is not a regular file (a device, pipe or socket)", hint=hint)


def write_text_atomic(path: Path, text: str, hint: str = WRITE_HINT, parents: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder, synced, then renamed.
    ``parents`` creates missing folders on the way; without it a missing folder is an error (a typo, usually)."""
    write_bytes_atomic(path, text.encode("utf-8"), hint, parents)


def write_bytes_atomic(path: Path, data: bytes, hint: str = WRITE_HINT, parents: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, synced, then renamed over it."""
    path = Path(path)
    check_regular(path, hint)
    temporary: str | None = None
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
        temporary = None
    except OSError as exc:
        raise GpuflyError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):  # the write already failed; that error is the one to report
                os.unlink(temporary)


def write_json_atomic(path: Path, data: Any, hint: str = WRITE_HINT, parents: bool = False) -> None:
    """``data`` as indented JSON, written atomically."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n", hint, parents)


def append_line(path: Path, line: str, hint: str = WRITE_HINT, parents: bool = False) -> None:
    """Append one line (a newline is added) and sync it, so a kill afterwards loses nothing written."""
    path = Path(path)
    check_regular(path, hint)
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise GpuflyError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from None


def check_writable(option: str, path: Path, example: str) -> None:
    """Fail before the run, not after it: a whole training run or tuning search lost to a typo in an output path
    is the worst case. ``example`` is a file name for the hint when ``path`` is a folder.

    Opening the file is the only honest test (permission bits lie to root, /proc refuses new files); a file
    made only for the test is removed again, and an existing one is opened for appending, so left as it was.
    """
    if path.is_dir():
        raise GpuflyError(f"{option} {path} is a folder", f"give a file name, for example {option} {path / example}")
    if not path.parent.is_dir():
        raise GpuflyError(f"cannot write {option} {path}: {path.parent} is not a folder",
                          f"give {option} a path in an existing folder")
    check_regular(path, hint=f"give {option} a regular file, for example {option} {example}")
    existed = path.exists()
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise GpuflyError(f"cannot write {option} {path}: {exc.strerror}",
                          "choose a file in a folder that exists and that you can write to") from None
    if not existed:
        os.unlink(path)
