"""Every option that writes a file, given a path that is not a file gpufly may replace: refused in one `error:` line
with a `hint:`, before any work, and the path is left exactly as it was (pip's and git's rule: never clobber what
is not yours)."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile.conftest import refused
from tests.hostile.inputs import (
    KNOWN_FAILURES,
    SOCKETS,
    WRITERS,
    FifoWatchdog,
    Writer,
    facts_document,
    known_failures_marked,
)


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _full_device(path: Path) -> Path:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    path.symlink_to("/dev/full")
    return path


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    SOCKETS.append(server)
    return path


TARGETS: dict[str, Callable[[Path], Path]] = {
    "a folder": _folder, "a FIFO": _fifo, "a link to /dev/full": _full_device, "a UNIX socket": _socket}


def _state(path: Path) -> tuple[object, ...]:
    """What the path is, as a writer could change it: its kind, where a link points, what a folder holds."""
    if not os.path.lexists(path):
        return ("absent",)
    mode = os.lstat(path).st_mode
    link = os.readlink(path) if stat.S_ISLNK(mode) else None
    inside = sorted(os.listdir(path)) if stat.S_ISDIR(mode) else None
    return stat.S_IFMT(mode), link, inside


@pytest.mark.parametrize(("writer", "target"), known_failures_marked(WRITERS, TARGETS))
def test_a_path_that_is_not_a_file_is_refused_and_left_alone(run, tmp_path: Path, writer: Writer, target: str) -> None:
    known = (writer.name, target) in KNOWN_FAILURES
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(facts_document()))
    path = TARGETS[target](tmp_path / f"out{writer.suffix}")
    before = _state(path)
    argv = [str(path) if part == "{file}" else str(facts) if part == "{facts}" else part for part in writer.argv]
    with FifoWatchdog(path, after_s=2.0 if known else 20.0) as watchdog:
        result = run(*argv)
    assert not watchdog.fired, f"{writer.name} waited on a FIFO instead of refusing it"
    assert _state(path) == before, f"{writer.name} changed {target}"
    refused(result)


def test_a_failed_read_leaves_the_file_to_save_untouched(run, tmp_path: Path) -> None:
    """`doctor --facts BAD --save OLD`: the read fails, and OLD keeps what it held."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpus": "none"}')
    saved = tmp_path / "saved.json"
    saved.write_text("keep me")
    refused(run("doctor", "--facts", str(bad), "--save", str(saved)))
    assert saved.read_text() == "keep me"
