"""The live backend: one ``Snapshot`` per call, from the hardware layer (``gpufly.hw``) and psutil.

The GPU figures come from ``GpuReader``, the one NVML reader every stage shares: a field the card does
not support reads as None and a GPU that falls off the bus is marked lost while the others go on. What
the monitor adds is the OS side of each GPU process (user, command, CPU%, RSS, container), joined here
through /proc and psutil; a process that exits between NVML listing it and the join reading it is skipped.
Asked to (``attribute``), the join also reads which Slurm job or Kubernetes pod each process belongs to
(``gpufly.monitor.attribution``), once per process lifetime: each process carries its job's key and the
snapshot lists those jobs. The reader watches each GPU's XID events (registered once, drained every sample).
Its cost grows with the distinct processes, not GPUs x processes (``ProcessJoiner``). Nothing NVML or its binding
raises stops a sample: a field reads None, a GPU is lost, or the snapshot has no GPUs, each with the reason.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from gpufly.hw import GpuReader, GpuSample, Nvml, ProcessSample, read_host
from gpufly.monitor.attribution import Attributor, JobRef
from gpufly.monitor.sample import JobSample, Snapshot

FIRST_CPU_INTERVAL_S = 0.1
"""The shortest interval the first snapshot's CPU figures are measured over (psutil needs two readings)."""

_CONTAINER_PATTERNS = (
    re.compile(r"docker[-/]([0-9a-f]{12,64})"),
    re.compile(r"cri-containerd[-:]([0-9a-f]{12,64})"),
    re.compile(r"libpod-([0-9a-f]{12,64})"),
    re.compile(r"crio-([0-9a-f]{12,64})"),
    re.compile(r"kubepods.*?([0-9a-f]{64})"),
)


def container_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The short (12 hex digit) id of the container a process runs in, from /proc/PID/cgroup.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "7").mkdir()
    >>> _ = (root / "7" / "cgroup").write_text("0::/system.slice/docker-4f1c2a3e8d55b1e9f0a2b7c41d0e91112345.scope\\n")
    >>> container_of(7, root)
    '4f1c2a3e8d55'
    """
    try:
        text = (proc_root / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return None
    for pattern in _CONTAINER_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1)[:12]
    return None


@dataclass(frozen=True)
class ProcStat:
    """The moving figures of one process from one read of /proc/PID/stat (what psutil reads three files for)."""

    started_ticks: int
    """Clock ticks after boot the process started: with the pid, it names one process for its whole life."""
    cpu_ticks: int
    """User plus system CPU time so far, in clock ticks."""
    rss_pages: int


def read_proc_stat(pid: int, proc_root: Path = Path("/proc")) -> ProcStat | None:
    """/proc/PID/stat parsed (proc(5)); None when there is no such process. PermissionError where hidden.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp()); (root / "7").mkdir()
    >>> _ = (root / "7" / "stat").write_text("7 (a (b) c) S 1 7 7 0 -1 0 0 0 0 0 120 30 0 0 20 0 4 0 5000 0 2048")
    >>> read_proc_stat(7, root)
    ProcStat(started_ticks=5000, cpu_ticks=150, rss_pages=2048)
    """
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as stat:  # a str path: pathlib's joins cost more than the read
            data = stat.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the command, in parentheses, may hold spaces and ")"
    if len(fields) < 22:
        return None
    return ProcStat(started_ticks=int(fields[19]), cpu_ticks=int(fields[11]) + int(fields[12]),
                    rss_pages=int(fields[21]))


@dataclass(frozen=True)
class ProcessIdentity:
    """What the OS says about a process that does not change while it lives: read once per (pid, start time),
    so a pid reused by a new process is read afresh and never shows the old process's name."""

    name: str | None
    cmdline: str | None
    user: str | None
    container: str | None
    job: JobRef | None = None
    """The Slurm job or Kubernetes pod, when attribution was asked for and the process is in one."""


NO_IDENTITY = ProcessIdentity(None, None, None, None)


@dataclass(frozen=True)
class Moving:
    """A process's figures at this sample; None where the OS will not say."""

    cpu_percent: float | None
    rss_bytes: int | None


OpenProcess = Callable[[int], psutil.Process]
"""``psutil.Process``, or a stand-in in tests: a pid in, a process out (NoSuchProcess when there is none)."""


class ProcessJoiner:
    """Joins NVML's (pid, memory) with the OS's user, command, CPU%, RSS and container.

    Its cost grows with the distinct processes, not with GPUs x processes: a pid listed on several GPUs is
    read once per sample, and what does not change (user, command, container: psutil and /proc/PID/cgroup)
    is read once per process lifetime, keyed by (pid, start time). On Linux the moving figures come from one
    read of /proc/PID/stat, CPU% being the CPU ticks used since the previous sample over the time between
    them (top's and psutil's figure, 100 per busy core); elsewhere from psutil. The first sight of a process
    reads 0% CPU, as in top. A pid NVML lists that the OS cannot find (exited, or in another pid namespace)
    is left out. ``attribute`` finds each process's Slurm job or Kubernetes pod (none by default).
    """

    def __init__(self, proc_root: Path = Path("/proc"), open_process: OpenProcess = psutil.Process,
                 clock: Callable[[], float] = time.monotonic, procfs: bool | None = None,
                 attribute: Attributor | None = None) -> None:
        self._proc_root = proc_root
        self._attribute = attribute
        self._open_process = open_process
        self._clock = clock
        self._procfs = sys.platform.startswith("linux") if procfs is None else procfs
        self._ticks_per_s = os.sysconf("SC_CLK_TCK") if self._procfs else 100
        self._page_bytes = os.sysconf("SC_PAGE_SIZE") if self._procfs else 4096
        self._identities: dict[int, tuple[float, ProcessIdentity]] = {}
        """pid -> (start time, identity): a pid whose start time changed was reused and is read afresh."""
        self._cpu_seen: dict[int, tuple[int, int, float]] = {}
        """pid -> (start ticks, CPU ticks, when), from the previous sample (procfs)."""
        self._processes: dict[int, psutil.Process] = {}
        """pid -> the psutil process whose CPU% is measured between samples (without procfs)."""

    def join(self, samples: Iterable[ProcessSample]) -> list[ProcessSample]:
        """The samples with their OS facts filled in, each distinct pid read once; those whose process is
        gone are dropped. Processes no longer listed are forgotten."""
        now = self._clock()
        read: dict[int, tuple[ProcessIdentity, Moving] | None] = {}
        joined = []
        for sample in samples:
            if sample.pid not in read:
                read[sample.pid] = self._read(sample.pid, now)
            facts = read[sample.pid]
            if facts is not None:
                _fill(sample, *facts)
                joined.append(sample)
        self._forget_all_but(set(read))
        return joined

    def jobs(self, samples: Iterable[ProcessSample]) -> list[JobSample]:
        """The jobs these joined processes belong to, each with its pids, in the order first met."""
        grouped: dict[JobRef, list[int]] = {}
        for sample in samples:
            known = self._identities.get(sample.pid)
            job = known[1].job if known else None
            if job is not None and sample.pid not in grouped.setdefault(job, []):
                grouped[job].append(sample.pid)
        return [JobSample(**asdict(job), pids=pids) for job, pids in grouped.items()]

    def _read(self, pid: int, now: float) -> tuple[ProcessIdentity, Moving] | None:
        try:
            return self._read_procfs(pid, now) if self._procfs else self._read_psutil(pid)
        except psutil.NoSuchProcess:
            self._forget(pid)
            return None
        except (psutil.AccessDenied, PermissionError):  # listed by NVML, hidden from us: keep it, unjoined
            return NO_IDENTITY, Moving(None, None)

    def _read_procfs(self, pid: int, now: float) -> tuple[ProcessIdentity, Moving] | None:
        stat = read_proc_stat(pid, self._proc_root)
        if stat is None:
            self._forget(pid)
            return None
        identity = self._identity(pid, stat.started_ticks, lambda: self._open_process(pid))
        seen = self._cpu_seen.get(pid)
        self._cpu_seen[pid] = (stat.started_ticks, stat.cpu_ticks, now)
        cpu = 0.0
        if seen is not None and seen[0] == stat.started_ticks and now > seen[2]:
            cpu = (stat.cpu_ticks - seen[1]) / self._ticks_per_s / (now - seen[2]) * 100
        return identity, Moving(cpu_percent=round(cpu, 1), rss_bytes=stat.rss_pages * self._page_bytes)

    def _read_psutil(self, pid: int) -> tuple[ProcessIdentity, Moving]:
        current = self._open_process(pid)
        kept = self._processes.get(pid)
        if kept is None or kept.create_time() != current.create_time():  # new, or the pid was reused
            self._processes[pid] = kept = current
        identity = self._identity(pid, kept.create_time(), lambda: kept)
        try:
            with kept.oneshot():
                return identity, Moving(cpu_percent=kept.cpu_percent(), rss_bytes=int(kept.memory_info().rss))
        except psutil.AccessDenied:
            return identity, Moving(None, None)

    def _identity(self, pid: int, started: float, process: Callable[[], psutil.Process]) -> ProcessIdentity:
        """The process's identity, read on first sight of (pid, start time) and kept while it is listed."""
        known = self._identities.get(pid)
        if known is None or known[0] != started:
            known = self._identities[pid] = (started, self._read_identity(process()))
        return known[1]

    def _read_identity(self, proc: psutil.Process) -> ProcessIdentity:
        name = cmdline = None
        try:
            name = proc.name()
            cmdline = " ".join(proc.cmdline()) or name
        except psutil.AccessDenied:
            pass
        return ProcessIdentity(name=name, cmdline=cmdline, user=_user_of(proc),
                               container=container_of(proc.pid, self._proc_root),
                               job=self._attribute.job_of(proc.pid) if self._attribute else None)

    def _forget(self, pid: int) -> None:
        for known in (self._identities, self._cpu_seen, self._processes):
            known.pop(pid, None)

    def _forget_all_but(self, pids: set[int]) -> None:
        for known in (self._identities, self._cpu_seen, self._processes):
            for pid in set(known) - pids:
                del known[pid]


def _user_of(proc: psutil.Process) -> str | None:
    try:
        return proc.username()
    except (KeyError, psutil.Error):
        return None


def _fill(sample: ProcessSample, identity: ProcessIdentity, moving: Moving) -> None:
    sample.name, sample.cmdline, sample.user = identity.name, identity.cmdline, identity.user
    sample.container = identity.container
    sample.job = identity.job.key if identity.job else None
    sample.cpu_percent, sample.rss_bytes = moving.cpu_percent, moving.rss_bytes


class LiveBackend:
    """Samples this machine. ``lib`` injects a fake pynvml; ``hostname`` overrides the label; ``attribute``
    names the job sources (``slurm``, ``k8s``) read for each process, when no ``joiner`` is given."""

    def __init__(self, lib: ModuleType | Any | None = None, hostname: str | None = None,
                 joiner: ProcessJoiner | None = None, clock: Callable[[], float] = time.time,
                 attribute: frozenset[str] = frozenset()) -> None:
        self._nvml = Nvml(lib)
        self._status = self._nvml.open()
        self._reader = GpuReader(self._nvml, watch_xids=True, clock=clock)
        self._hostname = hostname or socket.gethostname()
        self._clock = clock
        self._joiner = joiner or ProcessJoiner(attribute=Attributor(attribute) if attribute else None)
        self._driver = self._nvml.driver_version() if self._status.available else None
        self._cuda = self._nvml.cuda_driver_version() if self._status.available else None
        read_host()  # prime psutil's CPU counters so the first snapshot measures an interval
        self._primed_at: float | None = time.monotonic()

    @property
    def gpu_status(self) -> str | None:
        """None when NVML is up; otherwise why there are no GPUs, in words."""
        return None if self._status.available else self._status.reason

    def snapshot(self) -> Snapshot:
        if self._primed_at is not None:  # psutil reads 0% CPU over an interval this short
            time.sleep(max(0.0, FIRST_CPU_INTERVAL_S - (time.monotonic() - self._primed_at)))
            self._primed_at = None
        gpus, absence = self._read_gpus() if self._status.available else ([], self._status.reason)
        return Snapshot(
            time=self._clock(),
            hostname=self._hostname,
            gpus=gpus,
            host=read_host(),
            driver_version=self._driver,
            cuda_driver_version=self._cuda,
            gpu_status=absence,
            jobs=self._joiner.jobs(process for gpu in gpus for process in gpu.processes),
        )

    def close(self) -> None:
        self._reader.close()
        self._nvml.close()

    def _read_gpus(self) -> tuple[list[GpuSample], str | None]:
        """Every GPU NVML lists, with its processes joined; or none and why, when NVML cannot list them
        (this sample only: the next one asks again, so a driver being reloaded costs a few samples)."""
        count, why_not = self._nvml.count_devices()
        if not count:
            return [], why_not or "the NVIDIA driver is loaded but lists no GPU"
        gpus = [self._reader.sample(index) for index in range(count)]
        running = {p.pid for p in self._joiner.join(p for gpu in gpus for p in gpu.processes)}
        for gpu in gpus:
            gpu.processes = [process for process in gpu.processes if process.pid in running]
        return gpus, None
