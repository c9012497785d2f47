"""gpufly's file writing: atomic replacement, flushed lines, and no harm to what is not a regular file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.jsonfile import append_line, read_json, write_bytes_atomic, write_json_atomic, write_text_atomic


def test_an_atomic_write_replaces_the_whole_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    target.write_text("old contents that are longer than the new ones")
    write_json_atomic(target, {"a": 1})
    assert read_json(target, missing="?", hint="?") == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_a_missing_folder_is_an_error_unless_parents_are_asked_for(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="No such file or directory"):
        write_text_atomic(tmp_path / "typo" / "out.txt", "x")
    write_text_atomic(tmp_path / "made" / "out.txt", "x", parents=True)
    assert (tmp_path / "made" / "out.txt").read_text() == "x"


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_a_device_is_refused_not_replaced_or_written_into(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this system")
    for write in (lambda: write_bytes_atomic(Path(device), b"x"), lambda: append_line(Path(device), "x")):
        with pytest.raises(GpuflyError, match="not a regular file"):
            write()
    assert not Path(device).is_file()


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="it is a folder"):
        write_text_atomic(tmp_path, "x")


def test_lines_are_appended_whole(tmp_path: Path) -> None:
    log = tmp_path / "trials.jsonl"
    append_line(log, '{"a": 1}')
    append_line(log, '{"a": 2}')
    assert log.read_text().splitlines() == ['{"a": 1}', '{"a": 2}']


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "keep.json"
    target.write_text("precious")

    def refuse(source: str, destination: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(GpuflyError, match=r"cannot write .*keep\.json: No space left on device"):
        write_text_atomic(target, "new")
    assert target.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.json"]


def test_a_device_pipe_or_socket_is_refused_as_input(tmp_path: Path) -> None:
    import socket

    from gpufly.jsonfile import read_text

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.json"))
    try:
        for special in (Path("/dev/zero"), fifo, tmp_path / "sock.json"):
            with pytest.raises(GpuflyError, match="not a regular file"):
                read_text(special, missing="?", hint="give a file")
    finally:
        server.close()


def test_an_oversized_input_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    from gpufly.jsonfile import read_text

    big = tmp_path / "big.json"
    big.write_text("[" + "0," * 600 + "0]")
    with pytest.raises(GpuflyError, match="larger than"):
        read_text(big, missing="?", hint="?", limit=1024)


def test_absurdly_nested_json_is_one_error(tmp_path: Path) -> None:
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GpuflyError, match="nested too deeply"):
        read_json(nested, missing="?", hint="?")
