"""Profile a user's own training or inference loop and say in plain words what holds it back.

``records`` (the measurements) and ``rules`` (the diagnosis) are pure. ``Profiler`` composes the parts
that measure a live loop, each with one job: ``StepClock`` (steps and loader waits), ``Sampling`` (which
steps are looked inside) and ``OwnTime`` (what gpufly's own code costs), ``SyncCounter`` (host-device syncs
and copies), ``ModelHooks`` (forward, backward, optimizer), ``MemoryReader``, ``TraceWindow``
(torch.profiler) and ``GpuWatch`` (NVML samples). torch is imported only when profiling
starts, so importing this package stays cheap.
"""

from __future__ import annotations

from gpufly.profile.callbacks import hf_callback, lightning_callback
from gpufly.profile.gpuwatch import GpuWatch
from gpufly.profile.hooks import ModelHooks
from gpufly.profile.profiler import Profiler
from gpufly.profile.readers import MemoryReader
from gpufly.profile.records import (
                                    Conditions,
                                    GpuReading,
                                    LoopSettings,
                                    Overhead,
                                    ProfileData,
                                    StepNoise,
                                    StepRecord,
                                    TraceSummary,
                                    load_profile,
)
from gpufly.profile.rules import THRESHOLDS, Finding, Thresholds, diagnose
from gpufly.profile.sampling import EVERY_STEP, DetailSchedule, OwnTime, Sampling
from gpufly.profile.steps import StepClock
from gpufly.profile.syncs import SyncCounter
from gpufly.profile.trace import TraceWindow

__all__ = [
    "EVERY_STEP",
    "THRESHOLDS",
    "Conditions",
    "DetailSchedule",
    "Finding",
    "GpuReading",
    "GpuWatch",
    "LoopSettings",
    "MemoryReader",
    "ModelHooks",
    "Overhead",
    "OwnTime",
    "ProfileData",
    "Profiler",
    "Sampling",
    "StepClock",
    "StepNoise",
    "StepRecord",
    "SyncCounter",
    "Thresholds",
    "TraceSummary",
    "TraceWindow",
    "diagnose",
    "hf_callback",
    "lightning_callback",
    "load_profile",
]
