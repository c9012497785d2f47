"""The live backend over a fake NVML: recorded values, unsupported fields, lost GPUs, vanishing processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pynvml
import pytest

from gpufly.hw import ProcessSample
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor.backends import live
from gpufly.monitor.backends.live import LiveBackend, ProcessJoiner, container_of
from gpufly.monitor.format import no_gpu_line
from tests.fakes.nvml import GONE_PID_BASE, fake_nvml, machine_pids


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


class CountingOs:
    """What the joiner asks of the OS, counted per pid: psutil processes opened, stat files and cgroups read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened: Counter[int] = Counter()
        self.stats_read: Counter[int] = Counter()
        self.cgroups_read: Counter[int] = Counter()
        monkeypatch.setattr(live, "read_proc_stat", self._counting(live.read_proc_stat, self.stats_read))
        monkeypatch.setattr(live, "container_of", self._counting(live.container_of, self.cgroups_read))

    @staticmethod
    def _counting(read: Callable[..., Any], counts: Counter[int]) -> Callable[..., Any]:
        def counted(pid: int, *args: Any) -> Any:
            counts[pid] += 1
            return read(pid, *args)

        return counted

    def open_process(self, pid: int) -> psutil.Process:
        self.opened[pid] += 1
        return psutil.Process(pid)


@pytest.mark.parametrize("procfs", [True, False], ids=["procfs", "psutil"])
def test_32_gpus_with_8_processes_each_read_each_pid_once_a_sample_and_its_identity_once(
        monkeypatch: pytest.MonkeyPatch, procfs: bool) -> None:
    pids = machine_pids(16, gone=4)
    real = [pid for pid in pids if pid < GONE_PID_BASE]
    os_side = CountingOs(monkeypatch)
    joiner = ProcessJoiner(open_process=os_side.open_process, procfs=procfs)
    backend = LiveBackend(FakePynvml.node(32, pids, processes_per_gpu=8), joiner=joiner)
    for _ in range(3):
        gpus = backend.snapshot().gpus
    assert len(gpus) == 32 and sum(len(gpu.processes) for gpu in gpus) == 16 * len(real), "gone pids left out"
    if procfs:
        assert os_side.stats_read == {pid: 3 for pid in pids}, "each pid once a sample, though listed on 16 GPUs"
        assert os_side.opened == {pid: 1 for pid in real}, "psutil only for who the process is"
    else:
        assert os_side.opened == {pid: 3 for pid in pids}, "each pid once a sample, though listed on 16 GPUs"
    assert os_side.cgroups_read == {pid: 1 for pid in real}, "user, command, container: once a process lifetime"
    me = next(p for p in gpus[0].processes if p.pid == os.getpid())
    assert me.user and me.name and me.cmdline and me.rss_bytes and me.cpu_percent is not None


class FakeProcess:
    """A process as psutil shows it, started at ``started``: enough for the joiner."""

    def __init__(self, pid: int, started: float, name: str) -> None:
        self.pid, self.started, self._name = pid, started, name

    def create_time(self) -> float:
        return self.started

    def name(self) -> str:
        return self._name

    def cmdline(self) -> list[str]:
        return [self._name, "--serve"]

    def username(self) -> str:
        return "alice"

    def oneshot(self) -> nullcontext[None]:
        return nullcontext()

    def cpu_percent(self) -> float:
        return 12.5

    def memory_info(self) -> SimpleNamespace:
        return SimpleNamespace(rss=2**20)


class FakeMachine:
    """A /proc tree and psutil's view of it, with processes a test starts, runs and replaces."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: dict[int, FakeProcess] = {}
        self.now = 1000.0

    def start(self, pid: int, name: str, started_ticks: int, cpu_ticks: int = 0) -> None:
        (self.root / str(pid)).mkdir(exist_ok=True)
        (self.root / str(pid) / "cgroup").write_text(f"0::/system.slice/docker-{pid:012x}{'0' * 52}.scope\n")
        self.run(pid, name, started_ticks, cpu_ticks)
        self.processes[pid] = FakeProcess(pid, started_ticks / 100, name)

    def run(self, pid: int, name: str, started_ticks: int, cpu_ticks: int) -> None:
        """Set the process's CPU time so far (user and system split evenly), as the kernel does."""
        user, system = cpu_ticks // 2, cpu_ticks - cpu_ticks // 2
        (self.root / str(pid) / "stat").write_text(
            f"{pid} ({name}) S 1 {pid} {pid} 0 -1 0 0 0 0 0 {user} {system} 0 0 20 0 1 0 {started_ticks} 0 256")

    def open_process(self, pid: int) -> FakeProcess:
        if pid not in self.processes:
            raise psutil.NoSuchProcess(pid)
        return self.processes[pid]

    def joiner(self, procfs: bool = True) -> ProcessJoiner:
        return ProcessJoiner(self.root, open_process=self.open_process, clock=lambda: self.now, procfs=procfs)


def listed(*pids: int) -> list[ProcessSample]:
    return [ProcessSample(pid=pid, gpu_index=0, kind="compute") for pid in pids]


@pytest.mark.parametrize("procfs", [True, False], ids=["procfs", "psutil"])
def test_a_reused_pid_is_read_afresh_and_never_shows_the_old_process(tmp_path: Path, procfs: bool) -> None:
    machine = FakeMachine(tmp_path)
    machine.start(7, "python", started_ticks=10_000)
    joiner = machine.joiner(procfs)
    first = joiner.join(listed(7, 8))
    assert [(p.pid, p.name, p.cmdline, p.user, p.container) for p in first] == [
        (7, "python", "python --serve", "alice", "000000000007")], "pid 8 is gone: left out"
    machine.processes[7] = FakeProcess(7, started=200.0, name="nginx")
    machine.run(7, "nginx", started_ticks=20_000, cpu_ticks=0)
    assert joiner.join(listed(7))[0].name == "nginx"


def test_cpu_percent_is_the_ticks_used_between_samples_over_the_time_between(tmp_path: Path) -> None:
    machine = FakeMachine(tmp_path)
    machine.start(7, "python", started_ticks=10_000, cpu_ticks=500)
    joiner = machine.joiner()
    assert joiner.join(listed(7))[0].cpu_percent == 0.0, "first sight: 0%, as in top"
    machine.now += 2.0
    machine.run(7, "python", started_ticks=10_000, cpu_ticks=500 + 300)  # 3 s of CPU in 2 s: 1.5 cores
    process = joiner.join(listed(7))[0]
    assert process.cpu_percent == 150.0 and process.rss_bytes == 256 * os.sysconf("SC_PAGE_SIZE")
    machine.now += 1.0
    machine.processes[7] = FakeProcess(7, started=300.0, name="nginx")
    machine.run(7, "nginx", started_ticks=30_000, cpu_ticks=9_000)
    assert joiner.join(listed(7))[0].cpu_percent == 0.0, "a new process behind the pid starts from 0%"


@pytest.mark.parametrize(("call", "failure"), [
    ("nvmlDeviceGetPowerUsage", RuntimeError("driver is being reloaded")),
    ("nvmlDeviceGetHandleByIndex", TypeError("bad argument type")),
    ("nvmlDeviceGetCount", OSError(5, "Input/output error")),
])
def test_an_exception_from_the_binding_shows_in_the_sample_and_sampling_goes_on(
        fake: FakePynvml, call: str, failure: Exception) -> None:
    backend = LiveBackend(fake)
    assert backend.snapshot().gpus[0].power_w is not None
    fake.fail(call, failure)
    broken = backend.snapshot()
    reason = f"{type(failure).__name__} from the NVML binding: {failure}"
    if call == "nvmlDeviceGetCount":
        assert broken.gpus == [] and broken.gpu_status == f"NVML could not list the GPUs ({reason})"
    elif call == "nvmlDeviceGetHandleByIndex":
        assert all(g.lost and g.unavailable == reason for g in broken.gpus)
    else:
        assert broken.gpus[0].power_w is None and broken.gpus[0].unavailable == f"power_w: {reason}"
    fake.fail(call, None)
    healed = backend.snapshot()
    assert healed.gpus[0].power_w is not None and healed.gpu_status is None


def test_an_exception_from_nvml_init_leaves_the_host_and_the_reason(fake: FakePynvml) -> None:
    fake.fail("nvmlInit", AttributeError("module 'pynvml' has no attribute 'nvmlInit_v2'"))
    snapshot = LiveBackend(fake).snapshot()
    assert snapshot.gpus == [] and snapshot.host.memory_total_bytes
    assert snapshot.gpu_status == (
        "NVML failed to start (AttributeError from the NVML binding: module 'pynvml' has no attribute 'nvmlInit_v2')")


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
