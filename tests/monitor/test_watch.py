"""`gpufly watch`: lines complete after a kill, SIGTERM, rotation, errors, and replay reading what watch wrote.

Only the kill and the signal need a real process; the rest runs the CLI in this process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.monitor.backends.replay import ReplayBackend, read_recording
from gpufly.monitor.logger import CSV_COLUMNS, SampleLog
from tests.fakes.nvml import nvml_env

RECORDING = Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl"


def _watch(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpufly", "watch", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_lines(path: Path, n: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {n} lines")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_killed_watch_leaves_only_complete_lines_that_replay_reads(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"run{suffix}"
    proc = _watch("--replay", str(RECORDING), "--interval", "0.02", "--output", str(out))
    try:
        _wait_for_lines(out, 25)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    text = out.read_text()
    assert text.endswith("\n"), "the file ends at a line boundary"
    snapshots, skipped = read_recording(out)
    assert skipped == 0
    rows_per_sample = 2 if suffix == ".csv" else 1  # one CSV row per GPU
    assert len(snapshots) >= 24 // rows_per_sample
    recorded = [s.gpus[0].power_w for s in ReplayBackend(RECORDING)][: len(snapshots)]
    assert [s.gpus[0].power_w for s in snapshots] == recorded, "replay gives back what watch wrote, in order"
    if suffix == ".jsonl":
        assert snapshots[0].gpus[0].processes[0].user == "alice"
        assert all(json.loads(line)["schema_version"] == 1 for line in text.splitlines())
    else:
        assert text.splitlines()[0].split(",") == list(CSV_COLUMNS)


def test_sigterm_ends_cleanly_and_says_what_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    proc = _watch("--replay", str(RECORDING), "--interval", "0.05", "--output", str(out))
    _wait_for_lines(out, 3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    written = len(out.read_text().splitlines())
    assert f"wrote {written} samples to {out}" in err


def test_rotation_keeps_each_file_under_the_limit_and_every_sample(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    log = SampleLog(out, rotate_bytes=4000, keep=50)
    replay = ReplayBackend(RECORDING, loop=False)
    for _ in range(40):
        log.write(replay.snapshot())
    log.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 3
    assert all(f.stat().st_size <= 4000 for f in files)
    assert all(f.read_text().startswith("time,hostname,") for f in files), "each rotated CSV has its header"
    rows = sum(len(read_recording(f)[0]) for f in files)
    assert rows == 40


def test_rotation_drops_the_oldest_beyond_keep(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    log = SampleLog(out, rotate_bytes=3500, keep=2)
    replay = ReplayBackend(RECORDING, loop=False)
    for _ in range(12):
        log.write(replay.snapshot())
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.1.jsonl", "run.2.jsonl", "run.jsonl"]
    newest = read_recording(out)[0][-1]
    assert newest.time == read_recording(RECORDING)[0][11].time


def test_without_a_gpu_watch_says_so_once_and_logs_the_host(cli) -> None:
    done = cli("watch", "--count", "2", "--interval", "0.01", "--json", env=nvml_env("hw/no_driver.json"))
    assert done.code == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 2 and all(line["host"]["memory_total_bytes"] > 0 and line["gpus"] == [] for line in lines)
    assert done.stderr.count("no NVIDIA GPU to monitor on") == 1


def test_watch_prints_a_line_per_sample_from_a_recorded_machine(cli) -> None:
    done = cli("watch", "--count", "3", "--interval", "0.01", env=nvml_env("monitor/nvml_live.json"))
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and done.stderr == ""
    assert "[0] 97% 57.0 GiB/79.6 GiB 698 W 71 C slowdown power cap" in lines[0]
    assert "[1] N/A 10.0 GiB/80.0 GiB 92 W 38 C slowdown none" in lines[0]


def test_count_writes_that_many_samples_and_says_so(cli, tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    done = cli("watch", "--count", "3", "--interval", "0.01", "--replay", str(RECORDING), "-o", str(out))
    assert done.code == 0, done.stderr
    assert f"wrote 3 samples to {out}" in done.stderr
    snapshots, _ = read_recording(out)
    assert [s.time for s in snapshots] == [s.time for s in read_recording(RECORDING)[0][:3]]


def test_bad_options_are_one_line_errors(cli, tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="cannot tell the format"):
        SampleLog(tmp_path / "x.txt")
    with pytest.raises(GpuflyError, match="--rotate"):
        SampleLog(tmp_path / "x.csv", rotate_bytes=0)
    done = cli("watch", "--count", "-3")
    assert done.code == 2 and done.stderr.startswith("error: --count must be positive")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--interval", "inf"], "--interval must be positive and at most 3600 seconds"),
    (["--interval", "nan"], "--interval must be positive and at most 3600 seconds"),
    (["--interval", "3601"], "--interval must be positive and at most 3600 seconds"),
    (["--interval", "-1"], "--interval must be positive"),
    (["--rotate", "inf", "-o", "x.jsonl"], "--rotate must be a positive size in MB"),
    (["--rotate", "nan", "-o", "x.jsonl"], "--rotate must be a positive size in MB"),
])
def test_bad_numbers_are_one_line_errors(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
                                         message: str) -> None:
    monkeypatch.chdir(tmp_path)
    done = cli("watch", "--count", "2", *args)
    assert done.code == 2 and done.stderr.startswith(f"error: {message}"), done.stderr
    assert "hint:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.jsonl").exists(), "rejected before any file is opened"


def _disk_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of the logger fails as on a full disk (a device such as /dev/full is refused as an output)."""
    import errno

    from gpufly.monitor import logger

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(logger.os, "write", full)


def test_a_device_is_refused_as_the_output(cli, tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    device = tmp_path / "full.jsonl"
    device.symlink_to("/dev/full")
    done = cli("watch", "--count", "2", "--interval", "0.01", "--replay", str(RECORDING), "-o", str(device))
    assert done.code == 2 and "Traceback" not in done.stderr, done.stderr
    assert "not a regular file" in done.stderr and "hint:" in done.stderr


def test_a_full_disk_is_one_line_and_still_says_what_it_wrote(cli, tmp_path: Path, monkeypatch) -> None:
    full = tmp_path / "full.jsonl"
    _disk_full(monkeypatch)
    log = SampleLog(full)
    with pytest.raises(GpuflyError, match=r"cannot write .*full\.jsonl"):
        log.write(ReplayBackend(RECORDING, loop=False).snapshot())
    log.close()
    done = cli("watch", "--count", "2", "--interval", "0.01", "--replay", str(RECORDING), "-o", str(full))
    assert done.code == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"wrote 0 samples to {full}" in done.stderr
    assert f"error: cannot write {full}" in done.stderr and "hint:" in done.stderr


def test_a_stop_signal_during_a_write_waits_until_the_sample_is_counted() -> None:
    from gpufly.cli.monitoring import Stop, StopSignals

    with StopSignals() as signals:
        signals.begin_write()
        signals._handle(signal.SIGTERM, None)  # arrives mid-write: held, not raised
        assert signals.pending
        with pytest.raises(Stop):
            signals.end_write()
        signals.writing = False
        with pytest.raises(Stop):
            signals._handle(signal.SIGINT, None)  # between samples: stops at once
