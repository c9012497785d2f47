"""A recording whose last line a kill or a full disk cut short is mended when `watch` opens it again: the torn
tail is cut, so the next sample starts on its own line and the replay reads every whole sample."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.monitor.backends.replay import read_recording
from gpufly.monitor.logger import SampleLog, snapshots_from_csv
from gpufly.monitor.sample import Snapshot

WHOLE = '{"schema_version": 1, "time": 1.0, "hostname": "node"}\n'


def test_a_torn_jsonl_tail_is_cut_and_the_next_sample_starts_a_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(WHOLE + '{"schema_version": 1, "time": 2.0, "host')
    log = SampleLog(path)
    log.write(Snapshot(time=3.0, hostname="node"))
    log.close()
    assert log.torn_bytes_dropped == len('{"schema_version": 1, "time": 2.0, "host')
    snapshots, damaged = read_recording(path)
    assert [snapshot.time for snapshot in snapshots] == [1.0, 3.0] and damaged == 0


def test_a_torn_csv_tail_is_cut_and_the_header_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    log = SampleLog(path)
    log.write(Snapshot(time=1.0, hostname="node"))
    log.close()
    whole = path.read_text()
    path.write_text(whole + "2.0,no")
    log = SampleLog(path)
    log.write(Snapshot(time=3.0, hostname="node"))
    log.close()
    assert log.torn_bytes_dropped == len("2.0,no")
    assert [snapshot.time for snapshot in snapshots_from_csv(path.read_text())] == [1.0, 3.0]


@pytest.mark.parametrize("content", ["", WHOLE])
def test_a_whole_file_is_left_as_it_is(tmp_path: Path, content: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(content)
    SampleLog(path).close()
    assert path.read_text() == content


def test_a_file_that_is_all_torn_line_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text('{"schema_version": 1, "ti')
    log = SampleLog(path)
    log.close()
    assert path.read_text() == "" and log.torn_bytes_dropped == 25
