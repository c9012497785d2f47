"""Energy per job and its price: NVML's energy counter split among the jobs on each GPU.

Each GPU's joules over a sampling interval are the difference of NVML's total energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded), never power sampled and
integrated: the counter sees every spike between samples. A GPU without the counter (before Volta) gives
no job energy at all, rather than a guess. The interval's joules go to the processes on the GPU at its
end, by each one's SM share where NVML reports it for every process on the GPU (``nvmlDeviceGetProcessUtilization``),
else evenly per process; a job's part is the sum of its processes'. Energy of a GPU with no process, or of
processes outside any job, is nobody's job's.
"""

from __future__ import annotations

import math
import re
import threading
from collections import defaultdict
from dataclasses import dataclass

from gpufly.errors import GpuflyError
from gpufly.hw import GpuSample
from gpufly.monitor.sample import Snapshot

JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Shares:
    """How one GPU's energy divides among jobs: job key -> fraction, and on what basis."""

    by_job: dict[str, float]
    basis: str
    """``sm`` (NVML's per-process SM share) or ``even`` (per process, NVML gave no share for some)."""


def gpu_shares(gpu: GpuSample, job_of_pid: dict[int, str]) -> Shares:
    """Each job's fraction of this GPU now; processes outside any job keep theirs (the fractions sum to <= 1).

    >>> from gpufly.hw import ProcessSample
    >>> gpu = GpuSample(0, "H100", processes=[ProcessSample(1, 0, "compute", gpu_sm_percent=60.0),
    ...                                       ProcessSample(2, 0, "compute", gpu_sm_percent=20.0)])
    >>> gpu_shares(gpu, {1: "41", 2: "42"})
    Shares(by_job={'41': 0.75, '42': 0.25}, basis='sm')
    """
    processes = gpu.processes
    measured = bool(processes) and all(p.gpu_sm_percent is not None for p in processes)
    weights = {p.pid: float(p.gpu_sm_percent or 0.0) for p in processes} if measured else {}
    if not measured or sum(weights.values()) <= 0:
        weights, basis = {p.pid: 1.0 for p in processes}, "even"
    else:
        basis = "sm"
    total = sum(weights.values())
    by_job: dict[str, float] = defaultdict(float)
    for pid, weight in weights.items():
        if pid in job_of_pid and total > 0:
            by_job[job_of_pid[pid]] += weight / total
    return Shares(dict(by_job), basis)


def job_of_pid(snapshot: Snapshot) -> dict[int, str]:
    """pid -> the key of its job, for the snapshot's jobs."""
    return {pid: job.key for job in snapshot.jobs for pid in job.pids}


class JobEnergy:
    """Joules per job since this monitor first saw it, from each GPU's energy counter; a sampler listener.

    A job is forgotten in the snapshot where its last process is gone, so the series it feeds end with it
    (a job seen again starts from 0, which Prometheus' ``increase`` and ``rate`` read as a counter reset).
    A counter that goes backwards (the driver reloaded) or a lost GPU skips that interval.
    """

    def __init__(self) -> None:
        self._counter_j: dict[int, float] = {}
        self._joules: dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, snapshot: Snapshot) -> None:
        self.add(snapshot)

    def add(self, snapshot: Snapshot) -> None:
        owners = job_of_pid(snapshot)
        with self._lock:
            joules = {job.key: self._joules.get(job.key, 0.0) for job in snapshot.jobs}
            for gpu in snapshot.gpus:
                used = self._interval_joules(gpu)
                if used is None:
                    continue
                for job, share in gpu_shares(gpu, owners).by_job.items():
                    joules[job] += used * share
            self._joules = joules

    def _interval_joules(self, gpu: GpuSample) -> float | None:
        if gpu.lost or gpu.energy_j is None:
            self._counter_j.pop(gpu.index, None)
            return None
        before = self._counter_j.get(gpu.index)
        self._counter_j[gpu.index] = gpu.energy_j
        if before is None or gpu.energy_j < before:
            return None
        return gpu.energy_j - before

    def joules(self) -> dict[str, float]:
        """Job key -> joules since first seen, for the jobs of the latest snapshot."""
        with self._lock:
            return dict(self._joules)


_CURRENCY = re.compile(r"[A-Z]{3}")


@dataclass(frozen=True)
class EnergyPrice:
    """What a kilowatt-hour costs, in ``currency`` (an ISO 4217 code, the ``currency`` label)."""

    per_kwh: float
    currency: str = "USD"

    def __post_init__(self) -> None:
        if not math.isfinite(self.per_kwh) or self.per_kwh < 0:
            raise GpuflyError(f"--price-per-kwh must be a finite price of 0 or more, got {self.per_kwh}",
                              hint="the price of one kilowatt-hour, e.g. --price-per-kwh 0.15")
        if not _CURRENCY.fullmatch(self.currency):
            raise GpuflyError(f"--currency must be a three-letter ISO 4217 code, got {self.currency!r}",
                              hint="e.g. --currency USD, --currency EUR")

    def cost(self, joules: float) -> float:
        """The price of ``joules``.

        >>> EnergyPrice(0.2).cost(3.6e6)
        0.2
        """
        return joules / JOULES_PER_KWH * self.per_kwh
