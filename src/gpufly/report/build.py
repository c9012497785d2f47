"""`gpufly report` assembled: each section computed by the stage that owns it, gathered into one ``Report``.

The CLI renders a ``Report`` (terminal, ``--json``, or the page of ``report/html.py``); everything that decides
what goes in it lives here, so a notebook or a fleet aggregator gets the same content from ``build_report()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.bench import BenchRun
    from gpufly.catalog import Catalog
    from gpufly.doctor import Facts
    from gpufly.report.actions import Action
    from gpufly.report.fleet import FleetSection
    from gpufly.report.machine import MachineReport
    from gpufly.report.models_fit import BuyRow, ModelFitRow
    from gpufly.report.peers import LadderPlace
    from gpufly.report.reaches import ReachSection
    from gpufly.report.setup import SetupSection

SCHEMA_VERSION = 2
FAILED_STATUSES = ("failed", "oom", "timeout")
"""Tuner trial statuses that mean the trial did not run to the end."""
SECTIONS = ("machine", "setup", "reaches", "fits", "next")
"""The report's sections in the order a person reads them; the HTML page and the terminal both follow it."""


@dataclass(frozen=True)
class TuneSummary:
    """The best safe configuration of a `gpufly tune` results file, the code that applies it, and how the other
    trials went."""

    trials: int
    best: str | None
    """The winner's name; None where the run named none (``verdict`` and ``reason`` say why)."""
    speedup: float | None
    knobs: dict[str, Any]
    code: tuple[str, ...]
    unsafe: int
    failed: int
    verdict: str = "faster"
    """The run's conclusion (``tune.verdict.decide``): faster, no gain, undecided or too noisy."""
    reason: str = ""
    speedup_low: float | None = None
    speedup_high: float | None = None
    workload: str | None = None
    device: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    """The versions the results file records (its header keeps torch's; Python's and gpufly's are not in it)."""
    steps: int | None = None
    """Steps each trial trained."""
    batch_size: int | None = None
    """The baseline's batch; None where it reported none."""
    noise_floor: float | None = None
    """The run-to-run spread of the baseline's throughput (``gpufly.tune.noise``): the noise a gain must clear."""
    baseline_runs: int | None = None
    """How many times the baseline ran through the search: what the noise floor rests on."""

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "code": list(self.code), "versions": dict(self.versions)}


@dataclass(frozen=True)
class Report:
    """Everything `gpufly report` shows. ``reaches`` is None without --bench or --bench-file; ``buys`` lists GPUs to
    buy within ``budget_usd`` (on a machine without a catalog GPU, or when a budget is given); ``profile`` and
    ``tune`` and ``fleet`` are None unless asked for."""

    machine: MachineReport
    places: list[LadderPlace]
    setup: SetupSection
    models: list[ModelFitRow]
    buys: list[BuyRow]
    budget_usd: float | None
    actions: list[Action]
    reaches: ReachSection | None = None
    profile: dict[str, Any] | None = None
    tune: TuneSummary | None = None
    fleet: FleetSection | None = None

    def to_dict(self) -> dict[str, Any]:
        from gpufly.report.models_fit import CONTEXT

        return {"schema_version": SCHEMA_VERSION, "sections": list(SECTIONS), "machine": self.machine.to_dict(),
                "ladder": [place.to_dict() for place in self.places], "setup": self.setup.to_dict(),
                "reaches": self.reaches.to_dict() if self.reaches else None,
                "fits": {"context": CONTEXT, "batch": 1, "models": [row.to_dict() for row in self.models],
                         "budget_usd": self.budget_usd, "buy": [row.to_dict() for row in self.buys]},
                "next": [action.to_dict() for action in self.actions],
                "profile": self.profile, "tune": self.tune.to_dict() if self.tune else None,
                "fleet": self.fleet.to_dict() if self.fleet else None}


def build_report(bench: bool = False, bench_file: Path | None = None, profile: Path | None = None,
                 tune: Path | None = None, budget_usd: float | None = None, fleet: Path | None = None) -> Report:
    """Probe this machine and gather every section. The doctor's part uses its fast path (import_frameworks=False:
    the frameworks' installed files are read, not imported, which takes seconds each) and the report says so;
    `gpufly doctor` is the command that imports them. Saved files are read before anything is measured, so a bad
    path fails at once."""
    from gpufly.doctor import probe_all
    from gpufly.report.fleet import fleet_section
    from gpufly.report.machine import probe_machine

    if bench and bench_file is not None:
        raise GpuflyError("--bench and --bench-file both give the bench section", hint="pass one of them")
    if budget_usd is not None and budget_usd <= 0:
        raise GpuflyError(f"--budget must be positive, got {budget_usd:g}", hint="e.g. --budget 2000")
    profiled = profile_summary(profile) if profile else None
    tuned = tune_summary(tune) if tune else None
    compared = fleet_section(fleet) if fleet else None
    saved = _load_bench(bench_file) if bench_file is not None else None
    machine = probe_machine()
    facts = probe_all(import_frameworks=False)
    run, source = (quick_bench(), "measured now (quick)") if bench else (saved, str(bench_file))
    return compose(machine, facts, frameworks_imported=False, bench=run, bench_source=source, profile=profiled,
                   tune=tuned, budget_usd=budget_usd, fleet=compared)


def _load_bench(path: Path) -> BenchRun:
    from gpufly.bench import load_run

    return load_run(path)


def compose(machine: MachineReport, facts: Facts, *, frameworks_imported: bool, bench: BenchRun | None = None,
            bench_source: str = "", profile: dict[str, Any] | None = None, tune: TuneSummary | None = None,
            budget_usd: float | None = None, catalog: Catalog | None = None,
            fleet: FleetSection | None = None) -> Report:
    """The report from facts already gathered: each section computed by the stage that owns it, then the actions
    they point to, ranked. No probe runs here, so a test composes a report from recorded facts."""
    from gpufly.catalog import default_catalog
    from gpufly.report import actions
    from gpufly.report.models_fit import DEFAULT_BUDGET_USD, buy_rows, model_fit_rows
    from gpufly.report.peers import ladder_place
    from gpufly.report.reaches import reach_section
    from gpufly.report.setup import setup_section

    catalog = catalog or default_catalog()
    types = machine.gpu_types()
    places = [ladder_place(spec, catalog.specs) for spec, _ in types]
    setup = setup_section(facts, frameworks_imported)
    reaches = reach_section(bench, bench_source) if bench is not None else None
    models = model_fit_rows(types)
    budget = budget_usd if budget_usd is not None or types else DEFAULT_BUDGET_USD
    buys = buy_rows(catalog.specs, budget) if budget is not None else []
    ranked = actions.rank([*actions.setup_actions(setup), *actions.bench_actions(reaches, bool(machine.gpus)),
                           *actions.tune_actions(tune), *actions.profile_actions(profile),
                           *actions.model_actions(models, buys)])
    return Report(machine=machine, places=places, setup=setup, models=models, buys=buys, budget_usd=budget,
                  actions=ranked, reaches=reaches, profile=profile, tune=tune, fleet=fleet)


def quick_bench() -> BenchRun:
    """The benchmark summary in quick mode, on cuda:0 when PyTorch sees a GPU, else the CPU."""
    from gpufly.bench import open_device, run_benchmarks, select

    target = open_device(None)
    chosen, skipped = select(target.plan(quick=True), target.groups, [])
    return run_benchmarks(target, chosen, settings={"device": target.label, "quick": True}, errors=skipped)


def tune_summary(path: Path) -> TuneSummary:
    """The best safe trial of a tune results file; a file with none is an error that says why."""
    from gpufly.tune import ResultsLog, code_for, decide

    if not path.is_file():
        raise GpuflyError(f"no tune results at {path}", "write them with `gpufly tune WORKLOAD --results FILE`")
    log = ResultsLog(path)
    done = list(log.done().values())
    decision = decide(done)
    unsafe = sum(r.status == "unsafe" for r in done)
    failed = sum(r.status in FAILED_STATUSES for r in done)
    receipt = _tune_receipt(log.identity() or {}, done)
    if decision.winner is None and decision.verdict in ("undecided", "too noisy"):
        return TuneSummary(trials=len(done), best=None, speedup=None, knobs={}, code=(), unsafe=unsafe,
                           failed=failed, verdict=decision.verdict, reason=decision.reason, **receipt)
    best = decision.winner or log.best_safe_or_error()  # the latter raises, saying why there is no winner
    return TuneSummary(trials=len(done), best=best.name, speedup=best.speedup, knobs=dict(best.knobs),
                       code=tuple(code_for(dict(best.knobs))), unsafe=unsafe, failed=failed,
                       verdict=decision.verdict, reason=decision.reason,
                       speedup_low=best.speedup_low, speedup_high=best.speedup_high, **receipt)


def _tune_receipt(identity: dict[str, Any], done: list[Any]) -> dict[str, Any]:
    """What a tune results file records of its run: the header's workload, device, torch and steps; the baseline's
    batch, noise floor and how many runs it rests on (a file written before the header or the baseline's role
    has less, and says nothing it does not have)."""
    baseline = next((r for r in done if r.role == "baseline"), None)
    steps = identity.get("steps")
    return {"workload": identity.get("workload") if isinstance(identity.get("workload"), str) else None,
            "device": identity.get("device") if isinstance(identity.get("device"), str) else None,
            "versions": {"torch": identity["torch"]} if isinstance(identity.get("torch"), str) else {},
            "steps": steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
            "batch_size": baseline.batch_size if baseline is not None else None,
            "noise_floor": baseline.noise_floor if baseline is not None else None,
            "baseline_runs": len(baseline.throughputs) if baseline is not None and baseline.throughputs else None}


def profile_summary(path: Path) -> dict[str, Any]:
    """A saved profile's summary and findings, as `gpufly profile` prints them."""
    from gpufly.profile.records import load_profile
    from gpufly.profile.render import summary
    from gpufly.profile.rules import diagnose

    data = load_profile(path)
    return summary(data, diagnose(data))
