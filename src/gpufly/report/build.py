"""`gpufly report` assembled: each section computed by the stage that owns it, gathered into one ``Report``.

The CLI only renders a ``Report`` (terminal or ``--json``); everything that decides what goes in it lives here,
so a notebook, a fleet aggregator or an HTML page gets the same content from ``build_report()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.bench.results import BenchRun
    from gpufly.doctor.checks import Finding
    from gpufly.report.machine import MachineReport
    from gpufly.report.models_fit import ModelFitRow

SCHEMA_VERSION = 1
FAILED_STATUSES = ("failed", "oom", "timeout")
"""Tuner trial statuses that mean the trial did not run to the end."""


@dataclass(frozen=True)
class TuneSummary:
    """The best safe configuration of a `gpufly tune` results file, and how the other trials went."""

    trials: int
    best: str
    speedup: float | None
    knobs: dict[str, Any]
    unsafe: int
    failed: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Report:
    """Everything `gpufly report` shows; ``bench``, ``profile`` and ``tune`` are None unless asked for."""

    machine: MachineReport
    models: list[ModelFitRow]
    findings: list[Finding]
    bench: BenchRun | None = None
    profile: dict[str, Any] | None = None
    tune: TuneSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "machine": self.machine.to_dict(),
                "models": [row.to_dict() for row in self.models], "doctor": [f.to_dict() for f in self.findings],
                "bench": self.bench.to_dict() if self.bench else None, "profile": self.profile,
                "tune": self.tune.to_dict() if self.tune else None}


def build_report(bench: bool = False, profile: Path | None = None, tune: Path | None = None) -> Report:
    """Probe this machine and gather every section. The doctor's part does not import the frameworks (seconds
    each): it reads their installed files, and `gpufly doctor` is the command that imports them."""
    from gpufly.doctor.checks import diagnose
    from gpufly.doctor.probes import probe_all
    from gpufly.report.machine import probe_machine
    from gpufly.report.models_fit import model_fit_rows

    machine = probe_machine()
    profiled = profile_summary(profile) if profile else None
    tuned = tune_summary(tune) if tune else None
    return Report(machine=machine, models=model_fit_rows(machine.gpu_types()),
                  findings=diagnose(probe_all(import_frameworks=False)), bench=quick_bench() if bench else None,
                  profile=profiled, tune=tuned)


def quick_bench() -> BenchRun:
    """The benchmark summary in quick mode, on cuda:0 when PyTorch sees a GPU, else the CPU."""
    from gpufly.bench import open_device, run_benchmarks, select

    target = open_device(None)
    chosen, skipped = select(target.plan(quick=True), target.groups, [])
    return run_benchmarks(target, chosen, settings={"device": target.label, "quick": True}, errors=skipped)


def tune_summary(path: Path) -> TuneSummary:
    """The best safe trial of a tune results file; a file with none is an error that says why."""
    from gpufly.tune import ResultsLog

    if not path.is_file():
        raise GpuflyError(f"no tune results at {path}", "write them with `gpufly tune WORKLOAD --results FILE`")
    log = ResultsLog(path)
    best = log.best_safe_or_error()
    done = list(log.done().values())
    return TuneSummary(trials=len(done), best=best.name, speedup=best.speedup, knobs=dict(best.knobs),
                       unsafe=sum(r.status == "unsafe" for r in done),
                       failed=sum(r.status in FAILED_STATUSES for r in done))


def profile_summary(path: Path) -> dict[str, Any]:
    """A saved profile's summary and findings, as `gpufly profile` prints them."""
    from gpufly.profile.records import load_profile
    from gpufly.profile.render import summary
    from gpufly.profile.rules import diagnose

    data = load_profile(path)
    return summary(data, diagnose(data))
