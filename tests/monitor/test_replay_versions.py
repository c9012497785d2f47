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
