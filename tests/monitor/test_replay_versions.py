"""A recording from a newer gpufly is refused with the version, not read as if it were this version's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.monitor.backends.replay import read_recording


def _recording(tmp_path: Path, version: int) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"schema_version": version, "time": 1.0, "hostname": "node"}) + "\n")
    return path


def test_a_newer_schema_is_refused_with_its_version(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match=r"written by a newer gpufly \(schema_version 99\); this one reads 1"):
        read_recording(_recording(tmp_path, 99))


def test_this_version_plays(tmp_path: Path) -> None:
    snapshots, skipped = read_recording(_recording(tmp_path, 1))
    assert [s.hostname for s in snapshots] == ["node"] and skipped == 0


def test_top_says_so_in_one_line(cli, tmp_path: Path) -> None:
    result = cli("top", "--once", "--replay", str(_recording(tmp_path, 99)))
    assert result.code == 2 and result.stderr.startswith("error:") and "schema_version 99" in result.stderr


SAMPLE = {"schema_version": 1, "time": 1796000000.0, "hostname": "node",
          "gpus": [{"index": 0, "name": "H100", "power_w": 100.0, "memory_used_bytes": 1024}]}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("power_w", "fast", 'line 1: gpus[0].power_w must be a number, got "fast"'),
    ("memory_used_bytes", "1024", "gpus[0].memory_used_bytes must be a whole number"),
    ("index", None, "gpus[0].index must be a whole number, got null"),
])
def test_a_recording_with_text_where_numbers_belong_says_which_field(tmp_path: Path, field: str, value: object,
                                                                     message: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({**SAMPLE, "gpus": [{**SAMPLE["gpus"][0], field: value}]}) + "\n")
    with pytest.raises(GpuflyError, match="holds no snapshots") as caught:
        read_recording(path)
    assert message in caught.value.message


@pytest.mark.parametrize("time", [float("nan"), 1e30, -5.0])
def test_a_time_no_clock_reads_is_not_a_sample(tmp_path: Path, time: float) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({**SAMPLE, "time": time}) + "\n" + json.dumps(SAMPLE) + "\n")
    snapshots, skipped = read_recording(path)
    assert len(snapshots) == 1 and skipped == 1


def test_a_csv_recording_with_text_in_a_number_column_names_it(cli, tmp_path: Path) -> None:
    from gpufly.monitor.logger import csv_rows, csv_text
    from gpufly.monitor.sample import Snapshot

    rows = csv_rows(Snapshot.from_dict(SAMPLE))
    rows[0]["gpu_power_w"] = "fast"
    path = tmp_path / "run.csv"
    path.write_text(csv_text(rows, header=True))
    result = cli("top", "--once", "--replay", str(path))
    lines = result.stderr.strip().splitlines()
    assert result.code == 2 and "Traceback" not in result.stderr
    assert lines[0].startswith("error: ") and 'gpus[0].power_w must be a number, got "fast"' in lines[0]
    assert lines[1].startswith("hint: ")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(GpuflyError, match="not a regular file"):
        read_recording(fifo)
