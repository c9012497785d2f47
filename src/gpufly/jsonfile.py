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


def read_json(path: Path, missing: str, hint: str) -> Any:
    """The parsed document at ``path``. ``missing`` is the message for a file that is not there;
    ``hint`` says how to get a good file, for a missing or unparsable one."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise GpuflyError(missing, hint=hint) from exc
    except IsADirectoryError as exc:
        raise GpuflyError(f"{path} is a folder, not a JSON file", hint=hint) from exc
    except UnicodeDecodeError as exc:
        raise GpuflyError(f"{path} is not a text file (byte {exc.start} is not UTF-8)", hint=hint) from exc
    except OSError as exc:
        raise GpuflyError(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from exc
    except json.JSONDecodeError as exc:
        raise GpuflyError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})", hint=hint) from exc


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
