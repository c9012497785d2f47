"""What else the machine was doing: load average, the CPU clock, and the other processes busy during a figure."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpufly.bench.conditions import HostWatch, busiest


def test_only_other_processes_above_the_threshold_are_named_busiest_first() -> None:
    found = busiest([(1, "idle", 0.5), (2, "python", 95.0), (3, "gpufly", 190.0), (4, "make", 30.0),
                     (5, "cc1", 10.0)], own_pid=3)
    assert [(p.pid, p.name, p.cpu_percent) for p in found] == [(2, "python", 95.0), (4, "make", 30.0)]
    assert len(busiest([(pid, "x", 50.0) for pid in range(10, 30)], own_pid=1)) == 5


def test_the_watch_reads_load_cores_and_busy_processes() -> None:
    waited = []
    watch = HostWatch(load_average=lambda: 1.9, sleep=waited.append)
    start = watch.start()
    assert start["load_average_1m"] == 1.9 and start["cpu_cores"] == os.cpu_count()
    assert waited == [0.2] and isinstance(start["busy_processes"], list)
    end = watch.end()
    assert end["load_average_1m"] == 1.9 and isinstance(end["busy_processes"], list)
    assert all(p["pid"] != os.getpid() for p in end["busy_processes"])


@pytest.mark.slow
def test_a_process_spinning_beside_the_measurement_is_named() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        watch = HostWatch()
        watch.start()
        named = []
        deadline = time.monotonic() + 60
        while not named and time.monotonic() < deadline:
            time.sleep(0.5)
            named = [p for p in watch.end()["busy_processes"] if p["pid"] == spinner.pid]
        assert named and named[0]["cpu_percent"] > 10
    finally:
        spinner.kill()
        spinner.wait()
