"""Prometheus metrics from the sampler's latest snapshot and history, named as DCGM-exporter names them.

The per-GPU gauges come from the metric table (``gpufly.monitor.metrics.GPU_METRICS``): one row each.

Where DCGM-exporter has a field, the metric carries its name, unit and labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, ``GPU_I_PROFILE``/``GPU_I_ID`` for a MIG instance,
``Hostname``, ``DCGM_FI_DRIVER_VERSION``), so the Grafana dashboards and alerts people already have
keep working. Everything else is ``gpufly_*`` in Prometheus base units (bytes, seconds, joules, hertz).

A field that is None (the card does not report it, or the GPU is lost) is left out for that GPU,
never written as 0: a 0 would draw a real-looking line on a chart and fire no alert.

``gpufly_gpu_health`` is each GPU's verdict (``gpufly.monitor.health``: 0 healthy, 1 degraded, 2 failing), one
series per GPU whose ``reason`` label is the most severe reason's short code (``none`` when healthy), so its
cardinality stays one series per GPU at any moment and the label takes one of ``health.CODES``.
``gpufly_gpu_xid_events_total`` counts each GPU's XID events by code, the ``xid`` label bounded to the codes of
gpufly's XID table (``gpufly.monitor.xids``) and ``other``.

Jobs (``gpufly serve --attribute slurm,k8s``, ``JobCollector``) are one ``gpufly_job_info`` series each, carrying
the job's names, and a few per-job figures keyed by ``job`` alone (memory per GPU, share of each GPU, energy):
the names are joined in a query (``* on(job) group_left(user) gpufly_job_info``) rather than repeated on every
series, and a job's series end when its last process does, so cardinality follows the jobs running now.
``CostCollector`` (``--price-per-kwh``) prices the energy counters.

The collectors live on their own ``CollectorRegistry``, so the process's default metrics (and
anything else that registers globally) stay out of the GPU page.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from gpufly import __version__
from gpufly.hw import GpuSample, MigSample
from gpufly.monitor.energy import EnergyPrice, JobEnergy, gpu_shares, job_of_pid
from gpufly.monitor.health import HealthWatch, assess
from gpufly.monitor.metrics import GPU_METRICS, MIB, GpuMetric
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import History

GPU_LABELS: tuple[str, ...] = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                               "DCGM_FI_DRIVER_VERSION")
"""DCGM-exporter's labels for a whole GPU, in its order (internal/pkg/rendermetrics/render_metrics.go)."""

MIG_LABELS: tuple[str, ...] = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID",
                               "Hostname", "DCGM_FI_DRIVER_VERSION")
"""A MIG instance adds its profile and GPU instance id; ``UUID`` stays the parent GPU's, as in DCGM-exporter."""


MIG_FIELDS: tuple[tuple[str, str, Callable[[MigSample], float | None]], ...] = (
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     lambda m: None if m.memory_used_bytes is None else m.memory_used_bytes / MIB),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda m: None if m.memory_used_bytes is None or m.memory_total_bytes is None
     else (m.memory_total_bytes - m.memory_used_bytes) / MIB),
)
"""Per MIG instance, NVML reports memory only; utilization is not available inside MIG through NVML."""


def gpu_labels(snapshot: Snapshot, gpu: GpuSample) -> dict[str, str]:
    """DCGM-exporter's identity labels for one GPU; an unknown value is the empty string, as DCGM writes it."""
    device = gpu.minor_number if gpu.minor_number is not None else gpu.index
    return {
        "gpu": str(gpu.index),
        "UUID": gpu.uuid or "",
        "pci_bus_id": gpu.pci_bus_id or "",
        "device": f"nvidia{device}",
        "modelName": gpu.name,
        "Hostname": snapshot.hostname,
        "DCGM_FI_DRIVER_VERSION": snapshot.driver_version or "",
    }


def _mig_labels(base: dict[str, str], mig: MigSample) -> dict[str, str]:
    labels = {**base, "GPU_I_PROFILE": mig.profile or "",
              "GPU_I_ID": "" if mig.gpu_instance_id is None else str(mig.gpu_instance_id)}
    return {name: labels[name] for name in MIG_LABELS}


class SnapshotCollector:
    """A prometheus_client collector that turns the latest snapshot (and History's totals) into metric families.

    It holds no numbers of its own: each scrape reads ``history.latest``, so a scrape never waits on NVML.
    ``source`` says where the figures come from (``live`` or ``replay``), for ``gpufly_exporter_info``.
    ``health`` is the ``HealthWatch`` listening to the same sampler (its verdicts hold the rules that need
    several samples); without one, each scrape judges the latest sample alone.
    """

    def __init__(self, history: History, source: str = "live", metrics: tuple[GpuMetric, ...] = GPU_METRICS,
                 health: HealthWatch | None = None) -> None:
        self.history = history
        self.source = source
        self.metrics = metrics
        self.health = health

    def collect(self) -> Iterator[Metric]:
        snapshot = self.history.latest
        yield from self._about(snapshot)
        if snapshot is None:
            return
        yield from self._gpu_families(snapshot)
        yield from self._totals(snapshot)
        yield from self._host(snapshot)

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the set of series depends on the snapshot, so registering must not call collect."""
        return []

    def _about(self, snapshot: Snapshot | None) -> Iterator[Metric]:
        build = InfoMetricFamily("gpufly_build", "gpufly version and the Python it runs on.")
        build.add_metric([], {"version": __version__, "python_version": platform.python_version()})
        yield build
        info = InfoMetricFamily("gpufly_exporter", "Where this exporter's figures come from.")
        labels = {"source": self.source}
        if snapshot is not None:
            labels |= {"Hostname": snapshot.hostname, "driver_version": snapshot.driver_version or "",
                       "cuda_driver_version": snapshot.cuda_driver_version or "",
                       "gpu_status": snapshot.gpu_status or ""}
        info.add_metric([], labels)
        yield info
        samples = CounterMetricFamily("gpufly_exporter_samples", "Snapshots taken since the exporter started.")
        samples.add_metric([], float(self.history.samples))
        yield samples
        if snapshot is not None:
            gpus = GaugeMetricFamily("gpufly_gpus", "GPUs seen in the latest snapshot, lost ones included.",
                                     labels=["Hostname"])
            gpus.add_metric([snapshot.hostname], float(len(snapshot.gpus)))
            yield gpus

    def _gpu_families(self, snapshot: Snapshot) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}

        def family(name: str, help_text: str) -> GaugeMetricFamily:
            if name not in families:
                families[name] = GaugeMetricFamily(name, help_text, labels=list(GPU_LABELS))
            return families[name]

        lost = family("gpufly_gpu_lost", "1 when the GPU has fallen off the bus (NVML: GPU is lost), else 0.")
        health = GaugeMetricFamily("gpufly_gpu_health", "Health verdict: 0 healthy, 1 degraded, 2 failing; label "
                                   "reason is the most severe reason's code (none when healthy).",
                                   labels=[*GPU_LABELS, "reason"])
        families[health.name] = health
        for gpu in snapshot.gpus:
            base = gpu_labels(snapshot, gpu)
            lost.add_metric([base[n] for n in GPU_LABELS], 1.0 if gpu.lost else 0.0)
            verdict = self.health.verdict(gpu) if self.health is not None else assess([gpu])
            health.add_metric([*(base[n] for n in GPU_LABELS), verdict.code], float(verdict.level))
            if gpu.lost:
                continue
            for metric in self.metrics:
                value = metric.value(gpu)
                if value is not None:
                    family(metric.exporter, metric.help).add_metric([base[n] for n in GPU_LABELS], value)
            for mig in gpu.mig:
                for name, help_text, read in MIG_FIELDS:
                    value = read(mig)
                    if value is not None:
                        # The per-instance series share the whole-GPU family: one name, more labels, as DCGM does.
                        family(name, help_text).add_sample(name, _mig_labels(base, mig), float(value))
        yield from families.values()

    def _totals(self, snapshot: Snapshot) -> Iterator[Metric]:
        energy = CounterMetricFamily("gpufly_gpu_energy_joules",
                                     "Energy used since the exporter started, in joules (NVML's counter, else "
                                     "power integrated over samples).", labels=list(GPU_LABELS))
        throttle = CounterMetricFamily("gpufly_gpu_throttle_seconds",
                                       "Seconds a slowdown reason (power cap, thermal, ...) was active since start.",
                                       labels=[*GPU_LABELS, "reason"])
        xids = CounterMetricFamily("gpufly_gpu_xid_events",
                                   "XID events NVML delivered since the exporter started; label xid: the code where "
                                   "gpufly's table (NVIDIA's XID catalog) has it, else other.",
                                   labels=[*GPU_LABELS, "xid"])
        for gpu in snapshot.gpus:
            base = [gpu_labels(snapshot, gpu)[n] for n in GPU_LABELS]
            for code, events in sorted(self.history.xid_counts(gpu.index).items()):
                xids.add_metric([*base, code], float(events))  # kept for a lost GPU: XID 79 is why it is lost
            if gpu.lost:
                continue
            joules = self.history.energy_since_start_j(gpu.index)
            if joules is not None:
                energy.add_metric(base, joules)
            for reason, seconds in sorted(self.history.throttle_seconds(gpu.index).items()):
                throttle.add_metric([*base, reason], seconds)
        yield energy
        yield throttle
        yield xids

    def _host(self, snapshot: Snapshot) -> Iterator[Metric]:
        host = snapshot.host
        values = (
            ("gpufly_host_cpu_percent", "Host CPU use over all cores, in percent.", host.cpu_percent),
            ("gpufly_host_memory_used_bytes", "Host RAM in use, in bytes.", host.memory_used_bytes),
            ("gpufly_host_memory_total_bytes", "Host RAM, in bytes.", host.memory_total_bytes),
            ("gpufly_host_swap_used_bytes", "Swap in use, in bytes.", host.swap_used_bytes),
            ("gpufly_host_swap_total_bytes", "Swap, in bytes.", host.swap_total_bytes),
        )
        for name, help_text, value in values:
            if value is not None:
                fam = GaugeMetricFamily(name, help_text, labels=["Hostname"])
                fam.add_metric([snapshot.hostname], float(value))
                yield fam
        if host.load_average:
            load = GaugeMetricFamily("gpufly_host_load_average", "Load average over 1, 5 and 15 minutes.",
                                     labels=["Hostname", "period"])
            for period, value in zip(("1m", "5m", "15m"), host.load_average, strict=False):
                load.add_metric([snapshot.hostname, period], float(value))
            yield load


JOB_INFO_LABELS: tuple[str, ...] = ("job", "scheduler", "user", "name", "partition", "namespace", "container",
                                     "Hostname")
"""``gpufly_job_info``'s labels: ``job`` is the Slurm job id or the pod UID; an unknown value is empty."""


class JobCollector:
    """The jobs of the latest snapshot: one info series each, their memory and share per GPU, their energy.

    ``energy`` is the ``JobEnergy`` listening to the same sampler; without one, no energy series.
    """

    def __init__(self, history: History, energy: JobEnergy | None = None) -> None:
        self.history = history
        self.energy = energy

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snapshot = self.history.latest
        if snapshot is None or not snapshot.jobs:
            return
        host = snapshot.hostname
        info = InfoMetricFamily("gpufly_job", "A Slurm job or Kubernetes pod with processes on this machine's GPUs "
                                "(gpufly serve --attribute); 1 while any of its processes runs.",
                                labels=list(JOB_INFO_LABELS))
        for job in snapshot.jobs:
            info.add_metric([job.key, job.scheduler, job.user, job.name, job.partition, job.namespace,
                             job.container, host], {})
        yield info
        yield from self._per_gpu(snapshot)
        if self.energy is not None:
            energy = CounterMetricFamily(
                "gpufly_job_energy_joules", "Energy of the job's GPU processes since this exporter first saw the "
                "job, in joules: each GPU's NVML energy counter split by SM share, evenly per process where NVML "
                "gives no share.", labels=["job", "Hostname"])
            for key, joules in sorted(self.energy.joules().items()):
                energy.add_metric([key, host], joules)
            yield energy

    def _per_gpu(self, snapshot: Snapshot) -> Iterator[Metric]:
        labels = ["job", "gpu", "UUID", "Hostname"]
        memory = GaugeMetricFamily("gpufly_job_gpu_memory_bytes", "GPU memory held by the job's processes on "
                                   "this GPU, in bytes.", labels=labels)
        share = GaugeMetricFamily("gpufly_job_gpu_share", "The job's share of this GPU (0 to 1) that its energy "
                                  "is split by; label basis: sm (NVML per-process SM share) or even (per process, "
                                  "NVML gave no share).", labels=[*labels, "basis"])
        owners = job_of_pid(snapshot)
        for gpu in snapshot.gpus:
            if gpu.lost:
                continue
            used: dict[str, int] = {}
            for process in gpu.processes:
                if process.pid in owners and process.gpu_memory_bytes is not None:
                    used[owners[process.pid]] = used.get(owners[process.pid], 0) + process.gpu_memory_bytes
            base = [str(gpu.index), gpu.uuid or "", snapshot.hostname]
            for key, nbytes in sorted(used.items()):
                memory.add_metric([key, *base], float(nbytes))
            shares = gpu_shares(gpu, owners)
            for key, fraction in sorted(shares.by_job.items()):
                share.add_metric([key, *base, shares.basis], fraction)
        yield memory
        yield share


class CostCollector:
    """The energy counters priced (``gpufly serve --price-per-kwh``), per GPU and, with a ``JobEnergy``, per job."""

    def __init__(self, history: History, price: EnergyPrice, energy: JobEnergy | None = None) -> None:
        self.history = history
        self.price = price
        self.energy = energy

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snapshot = self.history.latest
        if snapshot is None:
            return
        gpu_cost = CounterMetricFamily(
            "gpufly_gpu_energy_cost", f"Cost of gpufly_gpu_energy_joules_total at {self.price.per_kwh} "
            f"{self.price.currency} per kWh, in the currency of label currency.",
            labels=[*GPU_LABELS, "currency"])
        for gpu in snapshot.gpus:
            joules = None if gpu.lost else self.history.energy_since_start_j(gpu.index)
            if joules is not None:
                base = gpu_labels(snapshot, gpu)
                gpu_cost.add_metric([*(base[n] for n in GPU_LABELS), self.price.currency], self.price.cost(joules))
        yield gpu_cost
        if self.energy is not None and snapshot.jobs:
            job_cost = CounterMetricFamily(
                "gpufly_job_energy_cost", f"Cost of gpufly_job_energy_joules_total at {self.price.per_kwh} "
                f"{self.price.currency} per kWh.", labels=["job", "Hostname", "currency"])
            for key, joules in sorted(self.energy.joules().items()):
                job_cost.add_metric([key, snapshot.hostname, self.price.currency], self.price.cost(joules))
            yield job_cost


def exporter_registry(history: History, source: str = "live", metrics: tuple[GpuMetric, ...] = GPU_METRICS,
                      health: HealthWatch | None = None) -> CollectorRegistry:
    """A registry of its own holding only the snapshot collector (no process or platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(history, source, metrics, health))
    return registry
