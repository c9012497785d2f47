"""Watching GPUs: snapshots of the machine, a sampler with its history, recordings, and the views on them.

A client of ``gpufly.hw`` (the one GPU reader). Usable from a notebook with no UI in sight::

    from gpufly.monitor import LiveBackend, Sampler
    sampler = Sampler(LiveBackend(), interval=1.0).start()
    ...
    sampler.history.series(0, "power_w")

``gpufly top`` (``monitor.tui``, needs textual) and ``gpufly serve`` (``monitor.exporter`` and
``monitor.server``, need prometheus_client) are built on the same pieces; importing this package pulls in
neither library.
"""

from gpufly.monitor.attribution import Attributor, JobRef, parse_sources
from gpufly.monitor.backends.live import LiveBackend
from gpufly.monitor.backends.replay import ReplayBackend, read_recording
from gpufly.monitor.energy import EnergyPrice, JobEnergy
from gpufly.monitor.health import Health, HealthWatch, Level, assess
from gpufly.monitor.logger import SampleLog
from gpufly.monitor.metrics import GPU_METRICS, GpuMetric
from gpufly.monitor.sample import SCHEMA_VERSION, JobSample, Snapshot
from gpufly.monitor.sampler import Backend, History, Sampler, open_backend

__all__ = [
    "GPU_METRICS",
    "SCHEMA_VERSION",
    "Attributor",
    "Backend",
    "EnergyPrice",
    "GpuMetric",
    "Health",
    "HealthWatch",
    "History",
    "JobEnergy",
    "JobRef",
    "JobSample",
    "Level",
    "LiveBackend",
    "ReplayBackend",
    "SampleLog",
    "Sampler",
    "Snapshot",
    "assess",
    "open_backend",
    "parse_sources",
    "read_recording",
]
