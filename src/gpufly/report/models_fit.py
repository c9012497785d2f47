"""The report's advisor section: popular models by task (inference at common formats, LoRA, QLoRA, full training)
on this machine's GPUs, or, on a machine without one, on the best GPUs a person could buy within a budget.

Every figure comes from the estimate (``fit``, ``recommend``) as it gives it: a speed is a single predicted number
(the estimate carries no per-prediction range; its calibrated median error is carried beside it), and a row that
does not fit has no speed, since a report row is read as what the machine does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.catalog.spec import GpuSpec
    from gpufly.estimate import Fit, Job
    from gpufly.models.spec import ModelSpec

DEFAULT_MODELS = ("llama-3.2-3b", "llama-3.1-8b", "qwen2.5-14b", "qwen2.5-32b", "llama-3.1-70b")
CONTEXT = 4096
"""Tokens per sequence: prompt plus output for inference, the sequence length for training (batch 1)."""
DEFAULT_BUDGET_USD = 2000.0
"""The budget for a machine without a GPU when none is given: a high-end consumer card."""


@dataclass(frozen=True)
class JobKind:
    """One column of the advisor: a task at a weight format, on an engine (None: the estimate's default)."""

    task: str
    quant: str
    engine: str | None
    label: str

    def job(self, spec: ModelSpec) -> Job:
        from gpufly.estimate import Job

        return Job.from_options(spec, task=self.task, quant=self.quant, engine=self.engine, context=CONTEXT)


JOB_KINDS = (
    JobKind("infer", "bf16", "transformers", "infer bf16"),
    JobKind("infer", "q8_0", "llama.cpp", "infer Q8_0"),
    JobKind("infer", "q4_k_m", "llama.cpp", "infer Q4_K_M"),
    JobKind("lora", "bf16", None, "LoRA"),
    JobKind("qlora", "bf16", None, "QLoRA"),
    JobKind("full", "bf16", None, "full training"),
)
"""Inference at 16 bits (transformers) and the two GGUF types people run most (llama.cpp); LoRA and QLoRA with
their recipes' defaults (rank 16, checkpointing on); full training with AdamW."""


def _speed(verdict: Fit) -> tuple[float | None, str]:
    from gpufly.estimate.advise import headline

    return headline(verdict.speed, verdict.job)


@dataclass(frozen=True)
class ModelFitRow:
    """One model and job on one GPU type (``gpus`` of it together). ``speed`` is None where the job does not fit;
    ``speed_low``-``speed_high`` is its 80% range (the estimate's, from published measurements: docs/calibration.md);
    ``median_error`` is the estimate's median error for this engine."""

    model: str
    model_id: str
    job: str
    task: str
    quant: str
    engine: str
    gpu: str
    gpu_id: str
    gpus: int
    fits: bool
    tight: bool
    needs_bytes: int
    capacity_bytes: int
    speed: float | None
    speed_unit: str
    median_error: float
    speed_low: float | None = None
    speed_high: float | None = None

    @property
    def command(self) -> str:
        """The `gpufly fit` line that shows this row in full."""
        where = f"{self.gpus}x{self.gpu_id}" if self.gpus > 1 else self.gpu_id
        return f"gpufly fit {self.model_id} --gpu {where} --task {self.task} --quant {self.quant} --ctx {CONTEXT}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "command": self.command, "context": CONTEXT,
                "speed_range": _range(self.speed, self.speed_low, self.speed_high)}


def _range(speed: float | None, low: float | None, high: float | None) -> dict[str, float] | None:
    """The 80% range of a predicted speed for --json, or None where there is no speed or no range."""
    if speed is None or low is None or high is None:
        return None
    return {"low": low, "high": high, "coverage": 0.8}


def range_text(row: ModelFitRow | BuyRow) -> str:
    """' (88-145)': the 80% range of a row's predicted speed as the terminal and the page show it, or nothing
    where there is no speed or the estimate gives no range."""
    if row.speed is None or row.speed_low is None or row.speed_high is None:
        return ""
    return f" ({row.speed_low:,.0f}-{row.speed_high:,.0f})"


def _headline_range(verdict: Fit) -> tuple[float | None, float | None]:
    """The 80% range of the speed ``headline`` picks: decode for inference, training tokens (or samples) per
    second for training."""
    job = verdict.job
    name = ("decode_tok_s" if not job.training
            else "train_tokens_s" if verdict.speed.train_tokens_s is not None else "train_samples_s")
    band = verdict.speed_ranges.get(name)
    return (band.low, band.high) if band is not None else (None, None)


def _errors(job: Job) -> float:
    from gpufly.estimate.advise import speed_error

    return speed_error(job)


def _models(names: Iterable[str]) -> list[tuple[str, ModelSpec]]:
    """Each preset with its name; a name this gpufly lacks is left out rather than failing the whole report."""
    from gpufly.models.resolve import load_model

    found = []
    for name in names:
        try:
            found.append((name, load_model(name)))
        except GpuflyError:
            continue
    return found


def model_fit_rows(gpus: Sequence[tuple[GpuSpec, int]], models: Iterable[str] = DEFAULT_MODELS,
                   kinds: Sequence[JobKind] = JOB_KINDS) -> list[ModelFitRow]:
    """For each GPU type on the machine (all of that type together), each model at each job kind. Training on
    several GPUs shards the weights (ZeRO-3, FSDP's full_shard), as `recommend` assumes; a job the estimate refuses
    (what a real run would refuse) has no row."""
    from gpufly.estimate import fit

    rows: list[ModelFitRow] = []
    for name, spec in _models(models):
        for gpu, count in gpus:
            for kind in kinds:
                try:
                    base = kind.job(spec)
                    job = base.with_(gpus=count, zero=3 if base.training and count > 1 else base.zero)
                    verdict = fit(spec, gpu, job)
                except GpuflyError:
                    continue
                speed, unit = _speed(verdict)
                low, high = _headline_range(verdict) if verdict.fits else (None, None)
                rows.append(ModelFitRow(spec.name, name, kind.label, job.task, job.quant, job.engine, gpu.name, gpu.id,
                                        count,
                                        verdict.fits, verdict.tight, verdict.memory.total_bytes,
                                        verdict.capacity_bytes, speed if verdict.fits else None, unit, _errors(job),
                                        low, high))
    return rows


def error_span(rows: Iterable[ModelFitRow | BuyRow]) -> str:
    """The estimate's median errors over ``rows`` as text: '6-11%', or '8%' when all share one."""
    errors = sorted({row.median_error for row in rows})
    if not errors:
        return "N/A"
    low, high = f"{100 * errors[0]:.0f}", f"{100 * errors[-1]:.0f}"
    return f"{low}%" if low == high else f"{low}-{high}%"


@dataclass(frozen=True)
class BuyRow:
    """The fastest catalog setup within the budget for one model and job; ``gpu`` None when nothing priced fits."""

    model: str
    model_id: str
    job: str
    task: str
    quant: str
    gpu: str | None
    gpus: int
    price_usd: float | None
    speed: float | None
    speed_unit: str
    median_error: float
    budget_usd: float
    speed_low: float | None = None
    speed_high: float | None = None

    @property
    def command(self) -> str:
        return f"gpufly recommend {self.model_id} --task {self.task} --quant {self.quant} --budget {self.budget_usd:g}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "command": self.command, "context": CONTEXT,
                "speed_range": _range(self.speed, self.speed_low, self.speed_high)}


def buy_rows(catalog: Iterable[GpuSpec], budget_usd: float, models: Iterable[str] = DEFAULT_MODELS,
             kinds: Sequence[JobKind] = JOB_KINDS) -> list[BuyRow]:
    """For a machine without a GPU: per model and job, the fastest setup (1-8 of a catalog GPU, priced at launch)
    within ``budget_usd``, as `gpufly recommend --budget` ranks them; a job the estimate refuses has no row. Only
    cards whose price (per device, for a multi-die card) is within the budget are offered: recommend would drop the
    rest after fitting each (a third of the report's time before this filter)."""
    from gpufly.estimate import recommend

    specs = [spec for spec in catalog if spec.launch_price_usd and spec.launch_price_usd / spec.dies <= budget_usd]
    rows: list[BuyRow] = []
    for name, spec in _models(models):
        for kind in kinds:
            try:
                job = kind.job(spec)
                ranking = recommend(spec, job, specs, budget_usd=budget_usd)
            except GpuflyError:
                continue
            error = _errors(job)
            if not ranking.picks:
                rows.append(BuyRow(spec.name, name, kind.label, job.task, job.quant, None, 0, None, None, "", error,
                                   budget_usd))
                continue
            pick = ranking.picks[0]
            low, high = _headline_range(pick.fit)
            rows.append(BuyRow(spec.name, name, kind.label, job.task, job.quant, pick.fit.card.name, pick.fit.job.gpus,
                               pick.price_usd, pick.throughput, pick.unit, error, budget_usd, low, high))
    return rows
