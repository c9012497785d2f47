"""Energy per job and its price: NVML's energy counter split among the jobs on each GPU.

Each GPU's joules over a sampling interval are the difference of NVML's total energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded), never power sampled and
integrated: the counter sees every spike between samples. A GPU without the counter (before Volta) gives
no job energy at all, rather than a guess. The interval's joules go to the processes on the GPU at its
end, by each one's SM share where NVML reports it for every process on the GPU (``nvmlDeviceGetProcessUtilization``),
else evenly per process; a job's part is the sum of its processes'. Energy of a GPU with no process, or of
processes outside any job, is nobody's job's.

``JobEnergy`` follows the jobs running now (the exporter's per-job counters end with the job); ``JobLedger`` keeps
every job a run has seen, ended ones included, for `gpufly watch`'s summary: its names, GPUs, energy and cost.
"""

from __future__ import annotations

import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.hw import JOULES_PER_KWH, GpuSample
from gpufly.monitor.sample import JobSample, Snapshot


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

    def add(self, snapshot: Snapshot) -> dict[str, float]:
        """Take the snapshot's interval in; the joules each job of the snapshot used over it."""
        owners = job_of_pid(snapshot)
        with self._lock:
            used_now = {job.key: 0.0 for job in snapshot.jobs}
            for gpu in snapshot.gpus:
                used = self._interval_joules(gpu)
                if used is None:
                    continue
                for job, share in gpu_shares(gpu, owners).by_job.items():
                    used_now[job] += used * share
            self._joules = {key: self._joules.get(key, 0.0) + joules for key, joules in used_now.items()}
            return used_now

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


@dataclass
class JobTotal:
    """One job over a whole run: the job as first seen (its names), the GPUs its processes used, its energy, and its
    cost when priced."""

    job: JobSample
    gpus: list[int] = field(default_factory=list)
    samples: int = 0
    """Snapshots it had a GPU process in."""
    first_seen: float = 0.0
    last_seen: float = 0.0
    energy_j: float = 0.0
    """Its share of the GPUs' energy counters over the intervals it ran (see the module's note)."""
    cost: float | None = None
    currency: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The job's names and the run's totals in one flat record (the processes of one snapshot left out)."""
        names = {key: value for key, value in asdict(self.job).items() if key != "pids"}
        totals = {key: value for key, value in asdict(self).items() if key != "job"}
        return {**names, **totals}

    def text(self) -> str:
        """``slurm job 4242 (alice, train, gpu): GPUs 0,1, 0.0123 kWh, 0.0015 USD over 12 samples``."""
        job = self.job
        names = ", ".join(part for part in (job.user, job.namespace, job.name, job.partition) if part)
        what = "slurm job" if job.scheduler == "slurm" else "pod"
        price = f", {self.cost:.4f} {self.currency}" if self.cost is not None else ""
        gpus = ",".join(str(index) for index in self.gpus) or "none"
        return (f"{what} {job.key}" + (f" ({names})" if names else "")
                + f": GPUs {gpus}, {self.energy_j / JOULES_PER_KWH:.4f} kWh ({self.energy_j:.0f} J){price}"
                + f" over {self.samples} samples")


class JobLedger:
    """Every job a run has seen, kept after its processes end (a sampler listener): `gpufly watch`'s summary.

    Its energy is ``JobEnergy``'s split of each GPU's counter, summed over the whole run, so a job that stops and
    comes back keeps what it used before; with a ``price``, each total is priced.
    """

    def __init__(self, price: EnergyPrice | None = None) -> None:
        self.price = price
        self._energy = JobEnergy()
        self._jobs: dict[str, JobTotal] = {}

    def __call__(self, snapshot: Snapshot) -> None:
        self.add(snapshot)

    def add(self, snapshot: Snapshot) -> None:
        used = self._energy.add(snapshot)
        for job in snapshot.jobs:
            total = self._jobs.get(job.key)
            if total is None:
                total = self._jobs[job.key] = JobTotal(replace(job, pids=[]), first_seen=snapshot.time)
            pids = set(job.pids)
            gpus = {gpu.index for gpu in snapshot.gpus for process in gpu.processes if process.pid in pids}
            total.gpus = sorted(set(total.gpus) | gpus)
            total.samples += 1
            total.last_seen = snapshot.time
            total.energy_j += used.get(job.key, 0.0)

    def totals(self) -> list[JobTotal]:
        """Every job seen, in the order first seen, priced when a price was given."""
        jobs = [replace(total, gpus=list(total.gpus)) for total in self._jobs.values()]
        if self.price is not None:
            for total in jobs:
                total.cost, total.currency = self.price.cost(total.energy_j), self.price.currency
        return jobs


def price_from_options(per_kwh: float | None, currency: str | None) -> EnergyPrice | None:
    """``--price-per-kwh`` and ``--currency`` as a price, checked; --currency alone is refused (it prices nothing)."""
    if per_kwh is None:
        if currency is not None:
            raise GpuflyError("--currency names the currency of --price-per-kwh, which was not given",
                              hint="add --price-per-kwh PRICE, e.g. --price-per-kwh 0.15 --currency EUR")
        return None
    return EnergyPrice(per_kwh, currency or "USD")


@dataclass
class GpuTotal:
    """One GPU's energy over a run (its counter's increase, else power integrated), priced when a price is given."""

    index: int
    name: str
    energy_j: float | None
    cost: float | None = None
    currency: str | None = None

    def text(self) -> str:
        if self.energy_j is None:
            return f"GPU {self.index} ({self.name}): energy not reported"
        price = f", {self.cost:.4f} {self.currency}" if self.cost is not None else ""
        kwh = self.energy_j / JOULES_PER_KWH
        return f"GPU {self.index} ({self.name}): {kwh:.4f} kWh ({self.energy_j:.0f} J){price}"


@dataclass
class RunSummary:
    """What a `gpufly watch` run used: energy (and cost) per GPU and per job."""

    gpus: list[GpuTotal]
    jobs: list[JobTotal]

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [asdict(gpu) for gpu in self.gpus], "jobs": [job.to_dict() for job in self.jobs]}

    def lines(self, attributed: bool) -> list[str]:
        """One line per GPU, then one per job (``no job seen`` when attribution found none)."""
        lines = [f"energy: {gpu.text()}" for gpu in self.gpus]
        if attributed:
            lines += [f"job: {job.text()}" for job in self.jobs] or ["job: no GPU process belonged to a job"]
        return lines


def run_summary(latest: Snapshot | None, energy_of: Callable[[int], float | None], ledger: JobLedger | None,
                price: EnergyPrice | None) -> RunSummary:
    """The run's totals: each GPU of the last snapshot with ``energy_of(index)`` (``History.energy_since_start_j``)
    joules, and the ledger's jobs."""
    gpus = []
    for gpu in latest.gpus if latest is not None else []:
        joules = energy_of(gpu.index)
        cost = price.cost(joules) if price is not None and joules is not None else None
        gpus.append(GpuTotal(gpu.index, gpu.name, joules, cost, price.currency if cost is not None and price else None))
    return RunSummary(gpus, ledger.totals() if ledger is not None else [])
