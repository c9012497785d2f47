"""The live backend over a fake NVML: recorded values, unsupported fields, lost GPUs, vanishing processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pynvml
import pytest

from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor.backends.live import LiveBackend, container_of
from gpufly.monitor.format import no_gpu_line
from tests.fakes.nvml import fake_nvml


@pytest.fixture
def fake() -> FakePynvml:
    return fake_nvml("monitor/nvml_live.json")


def test_recorded_fields_come_back_in_base_units(fake: FakePynvml) -> None:
    h100, a100 = LiveBackend(fake, hostname="node").snapshot().gpus
    assert h100.utilization_gpu_percent == 97 and h100.utilization_memory_percent == 62
    assert h100.memory_used_bytes == 61203283968 and h100.memory_free_bytes == 85520809984 - 61203283968
    assert h100.power_w == pytest.approx(698.5) and h100.power_limit_w == pytest.approx(700.0)
    assert h100.energy_j == pytest.approx(912345.678)
    assert h100.sm_clock_mhz == 1755 and h100.sm_clock_max_mhz == 1980
    assert h100.pcie_rx_bytes_per_s == 204800 * 1024
    assert h100.throttle_reasons == ["sw_power_cap"] and h100.slowdown_reasons == ["sw_power_cap"]
    assert a100.throttle_reasons == ["gpu_idle"] and a100.slowdown_reasons == []
    assert a100.ecc_corrected_volatile == 3


def test_unsupported_fields_read_none_not_an_error(fake: FakePynvml) -> None:
    h100, a100 = LiveBackend(fake).snapshot().gpus
    assert h100.fan_percent is None, "listed as not supported for the H100"
    assert a100.utilization_gpu_percent is None, "no utilization key: NVML answers NotSupported in MIG mode"
    assert a100.fan_percent is None


def test_mig_instances_are_listed_with_their_profiles(fake: FakePynvml) -> None:
    a100 = LiveBackend(fake).snapshot().gpus[1]
    assert a100.mig_enabled is True
    assert [(m.gpu_instance_id, m.profile) for m in a100.mig] == [(1, "3g.40gb"), (2, "3g.40gb")]
    assert a100.mig[0].memory_used_bytes == 10 * 1024**3


def test_a_gpu_lost_mid_run_is_marked_while_the_other_goes_on(fake: FakePynvml) -> None:
    backend = LiveBackend(fake)
    assert not any(g.lost for g in backend.snapshot().gpus)
    fake.lose(0)
    lost, alive = backend.snapshot().gpus
    assert lost.lost and lost.name == "NVIDIA H100 80GB HBM3", "the name seen before the loss is kept"
    assert lost.power_w is None and lost.processes == []
    assert not alive.lost and alive.power_w == pytest.approx(92.0)


def test_processes_join_psutil_and_one_that_exited_is_skipped(fake: FakePynvml) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        fake.set_processes(0, [{"pid": os.getpid(), "used_memory": 1024}, {"pid": child.pid, "used_memory": 2048}],
                           graphics=[{"pid": os.getpid(), "used_memory": 1024}])
        backend = LiveBackend(fake)
        first = {p.pid: p for p in backend.snapshot().gpus[0].processes}
        assert set(first) == {os.getpid(), child.pid}
        me = first[os.getpid()]
        assert me.kind == "compute+graphics" and me.gpu_memory_bytes == 1024
        assert me.rss_bytes and me.rss_bytes > 0 and me.name and me.user
        child.kill()
        child.wait()
        second = backend.snapshot().gpus[0].processes
        assert [p.pid for p in second] == [os.getpid()], "NVML still lists the dead pid; psutil cannot see it"
    finally:
        child.kill()


def test_per_process_sm_share_takes_the_newest_sample_and_only_new_ones(fake: FakePynvml) -> None:
    me = os.getpid()
    fake.set_processes(0, [{"pid": me, "used_memory": 1024}])
    device = fake.device_data(0)
    device["process_utilization"] = [{"pid": me, "sm": 40, "time": 100}, {"pid": me, "sm": 55, "time": 200},
                                     {"pid": 99999999, "sm": 70, "time": 150}]  # not in the process list
    backend = LiveBackend(fake)
    assert backend.snapshot().gpus[0].processes[0].gpu_sm_percent == 55.0
    assert backend.snapshot().gpus[0].processes[0].gpu_sm_percent is None, "no sample since the last one"
    device["process_utilization"].append({"pid": me, "sm": 12, "time": 300})
    assert backend.snapshot().gpus[0].processes[0].gpu_sm_percent == 12.0
    del device["process_utilization"]  # NotSupported, as in MIG mode
    assert backend.snapshot().gpus[0].processes[0].gpu_sm_percent is None


def test_no_driver_gives_the_host_and_one_line() -> None:
    snapshot = LiveBackend(FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), hostname="box").snapshot()
    assert snapshot.gpus == []
    assert snapshot.host.memory_total_bytes and snapshot.host.memory_total_bytes > 0
    assert len(snapshot.host.cpu_percent_per_core) == psutil.cpu_count()
    assert no_gpu_line(snapshot) == (
        "no NVIDIA GPU to monitor on box: NVML library not found (no NVIDIA driver installed); showing the host only")


@pytest.mark.parametrize(("cgroup", "expected"), [
    ("0::/system.slice/docker-0123456789abcdef0123.scope", "0123456789ab"),
    ("12:memory:/kubepods/burstable/pod1/" + "a" * 64, "a" * 12),
    ("0::/user.slice/user-1000.slice/session-2.scope", None),
])
def test_container_id_from_cgroup(tmp_path: Path, cgroup: str, expected: str | None) -> None:
    (tmp_path / "99").mkdir()
    (tmp_path / "99" / "cgroup").write_text(cgroup + "\n")
    assert container_of(99, tmp_path) == expected
    assert container_of(12345, tmp_path) is None, "unreadable: None, not an error"


@pytest.mark.gpu
def test_real_nvml_reads_every_gpu_here() -> None:
    backend = LiveBackend()
    try:
        backend.snapshot()
        snapshot = backend.snapshot()
    finally:
        backend.close()
    assert snapshot.gpus and snapshot.driver_version
    for gpu in snapshot.gpus:
        assert not gpu.lost and gpu.name and gpu.uuid and gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.memory_total_bytes and gpu.memory_total_bytes > 2**30
        assert gpu.memory_used_bytes is not None and 0 <= gpu.memory_used_bytes <= gpu.memory_total_bytes
        assert gpu.temperature_c is None or 0 < gpu.temperature_c < 110
        assert gpu.power_w is None or 0 < gpu.power_w <= (gpu.power_limit_w or 2000) * 1.2
