"""An 80% range on every predicted number, from how far the predictions missed on published measurements.

``benchmarks/estimate_accuracy.py --write-ranges`` compares each prediction with the measured value on the fit set
(the rows it may be tuned on; the check set is never used here), and stores, per metric, engine and regime (one
GPU or several), the 10th and 90th percentiles of log(measured / predicted), with what the rows covered (GPU
families, formats, model sizes). A prediction's range is its value times those two ratios. Three guards keep the
range honest where the rows are thin:

- rows of one GPU and source are alike, so percentiles over them are too narrow for a GPU they do not include: each
  metric and regime's bands are widened by the smallest factor at which bands computed without a fifth of the fit
  set's GPUs hold 80% of that fifth's rows (cross-validation inside the fit set, ``RangeTable.widening``);
- a group with fewer than MIN_ROWS rows borrows the band of the wider group (the metric for every engine) and is
  widened by SMALL_GROUP_WIDENING, and no band is narrower than FLOOR on either side;
- a job outside what the rows covered (a GPU family, a format, or a model size they do not contain) is widened by
  OUTSIDE_WIDENING, and the basis says what was missing.

The check set tells whether this holds: docs/calibration.md gives the share of check rows inside their range.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.engines import engine
from gpufly.estimate.formats import weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.speed import Speed
from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext
from gpufly.models.spec import ModelSpec

COVERAGE = 0.8
"""The share of measurements a range is meant to hold: from the 10th to the 90th percentile of the residuals."""
MIN_ROWS = 8
"""Below this many fit rows, a group's own percentiles are noise: it borrows the metric's band for all engines."""
FLOOR = math.log(1.08)
"""No band is narrower than 8% either side: the spread of repeated runs of one setup (llama-bench's +-, driver and
build changes between published runs) alone is several percent."""
SMALL_GROUP_WIDENING = 1.5
"""A borrowed band is widened by half: the engine's own spread is unknown."""
OUTSIDE_WIDENING = 2.0
"""Outside the calibrated region (no fit rows for the GPU family, the format or the model size) the band doubles
(in log space): a constant fitted on one architecture or format carries no evidence for another. Each further
way the job lies outside (a family and a format and a size none of the rows had) widens it FURTHER_WIDENING
again: the errors of constants carried over several gaps add up."""
FURTHER_WIDENING = 1.5
WIDEST = math.log(3)
"""However many gaps, a widened band goes no further than a factor of 3 either way, or its own band doubled where
that is wider: past that the number says little, and the widening's reasons say why."""
SIZE_MARGIN = 2.0
"""A model up to this factor smaller or larger than the fit rows' models still counts as calibrated."""
RANGES_FILE = Path(__file__).parent / "data" / "ranges.json"

METRICS = ("decode", "prefill", "inference memory", "training memory", "training throughput")
MEMORY_METRICS = ("inference memory", "training memory")
"""Memory does not depend on the GPU family (bytes are bytes): only formats and sizes bound its region."""


def regime(gpus: int) -> str:
    return "1 GPU" if gpus == 1 else "multi-GPU"


@dataclass(frozen=True)
class Band:
    """The fit set's residuals for one metric, engine and regime: log(measured / predicted) percentiles and what
    the rows covered. ``engine`` "all" is the metric over every engine."""

    metric: str
    engine: str
    regime: str
    rows: int
    low: float
    high: float
    families: tuple[str, ...]
    formats: tuple[str, ...]
    params_b: tuple[float, float]
    max_nodes: int = 1
    """The most nodes any of the rows spanned: a job on more nodes is outside what they cover."""

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "engine": self.engine, "regime": self.regime, "rows": self.rows,
                "low": round(self.low, 4), "high": round(self.high, 4), "families": list(self.families),
                "formats": list(self.formats), "params_b": list(self.params_b), "max_nodes": self.max_nodes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Band:
        return cls(data["metric"], data["engine"], data["regime"], int(data["rows"]), float(data["low"]),
                   float(data["high"]), tuple(data["families"]), tuple(data["formats"]),
                   (float(data["params_b"][0]), float(data["params_b"][1])), int(data.get("max_nodes", 1)))


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


@dataclass(frozen=True)
class Residual:
    """One fit row: its group, where it sat (GPU family, format, model size), and log(measured / predicted)."""

    metric: str
    engine: str
    regime: str
    family: str
    format: str
    params_b: float
    log_ratio: float
    nodes: int = 1


def bands_from(residuals: list[Residual]) -> list[Band]:
    """A band per (metric, engine, regime) and per (metric, "all", regime) that has any rows."""
    groups: dict[tuple[str, str, str], list[Residual]] = {}
    for r in residuals:
        groups.setdefault((r.metric, r.engine, r.regime), []).append(r)
        groups.setdefault((r.metric, "all", r.regime), []).append(r)
    tail = (1 - COVERAGE) / 2
    return [Band(metric, engine, where, len(items), percentile([r.log_ratio for r in items], tail),
                 percentile([r.log_ratio for r in items], 1 - tail), tuple(sorted({r.family for r in items})),
                 tuple(sorted({r.format for r in items})),
                 (min(r.params_b for r in items), max(r.params_b for r in items)), max(r.nodes for r in items))
            for (metric, engine, where), items in sorted(groups.items())]


@dataclass(frozen=True)
class RangeTable:
    """The bands, and ``widening`` per metric and regime (widening_key): the factor (on log ratios) that makes the
    bands hold COVERAGE of rows from GPUs they were not computed on, found by cross-validation over the fit set's
    GPUs (rows of one GPU and source move together, so a band from the rows alone is too narrow for a GPU it has
    not seen)."""

    bands: tuple[Band, ...]
    rule: str = ""
    widening: tuple[tuple[str, float], ...] = ()

    def widening_for(self, where: Where) -> float:
        return dict(self.widening).get(widening_key(where), 1.0)

    def find(self, metric: str, engine: str, where: str) -> Band | None:
        return next((b for b in self.bands if (b.metric, b.engine, b.regime) == (metric, engine, where)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"coverage": COVERAGE, "split_rule": self.rule, "widening": dict(self.widening),
                "bands": [b.to_dict() for b in self.bands]}


@cache
def default_table() -> RangeTable:
    """The bands shipped with gpufly (written by benchmarks/estimate_accuracy.py --write-ranges)."""
    try:
        data = json.loads(RANGES_FILE.read_text())
    except (OSError, ValueError) as exc:
        raise GpuflyError(f"cannot read the calibrated ranges {RANGES_FILE}: {exc}",
                          hint="python benchmarks/estimate_accuracy.py --write-ranges") from exc
    return RangeTable(tuple(Band.from_dict(b) for b in data["bands"]), data.get("split_rule", ""),
                      tuple((metric, float(factor)) for metric, factor in data.get("widening", {}).items()))


def widening_key(where: Where) -> str:
    """The cross-validated widening is per metric and regime: "prefill, multi-GPU"."""
    return f"{where.metric}, {regime(where.gpus)}"


@dataclass(frozen=True)
class Where:
    """What a prediction is for, as the bands are keyed: metric, engine, GPU count, GPU family, format, size."""

    metric: str
    engine: str
    gpus: int
    family: str
    format: str
    params_b: float
    calibrated: bool = False
    """The GPU's rates and bandwidth are this card's measured ceilings (`fit --calibrate`), not its datasheet's."""
    nodes: int = 1
    uncovered: tuple[str, ...] = ()
    """What about the job no fit row has, said by the caller (a link the multi-GPU rows never used)."""


CALIBRATED = "this card's measured ceilings (--calibrate) stand in for its family's rows and the spread between GPUs"


@dataclass(frozen=True)
class Basis:
    """Where a range comes from: how many fit rows, of which group, and what widened it."""

    rows: int
    group: str
    widened: tuple[str, ...] = ()
    narrowed: str = ""

    def text(self) -> str:
        base = (ngettext("{rows} fit row, {group}", "{rows} fit rows, {group}", self.rows) if self.rows
                else _("no fit rows: {group}")).format(rows=self.rows, group=self.group)
        return (base + (_("; widened: {why}").format(why=", ".join(self.widened)) if self.widened else "")
                + (_("; narrowed: {why}").format(why=self.narrowed) if self.narrowed else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "group": self.group, "widened": bool(self.widened),
                "widened_for": list(self.widened), "narrowed": self.narrowed or None, "text": self.text()}


NO_ROWS = (math.log(1 / 2), math.log(2))
"""A metric gpufly has no fit rows for at all: a factor of 2 either way, said so."""


def _built_on(name: str) -> str:
    """The engine ``name`` is a build of (Ollama: llama.cpp), or ""."""
    try:
        return engine(name).like
    except GpuflyError:
        return ""


def _documented_only(name: str, table: RangeTable) -> bool:
    """An engine with no fit rows for any metric (SGLang, TensorRT-LLM, exllamav2, MLC LLM, Ollama): the band it
    borrows says nothing about its own constants, so it is widened as outside the calibrated region."""
    if name == "training" or any(b.engine == name for b in table.bands):
        return False
    try:
        return engine(name).documented_only
    except GpuflyError:
        return True


def _outside(band: Band, where: Where) -> list[str]:
    """What about the job the band's rows did not cover."""
    missing = []
    if where.metric not in MEMORY_METRICS and not where.calibrated and where.family not in band.families:
        missing.append(_("no fit rows on {family} GPUs").format(family=where.family))
    if where.format not in band.formats:
        missing.append(_("no fit rows at {format}").format(format=where.format))
    if where.nodes > band.max_nodes and where.metric not in MEMORY_METRICS:
        missing.append(ngettext("no fit rows across {nodes} nodes (the rows span at most {most} node)",
                                "no fit rows across {nodes} nodes (the rows span at most {most} nodes)",
                                band.max_nodes).format(nodes=where.nodes, most=band.max_nodes))
    missing += where.uncovered
    smallest, largest = band.params_b
    if not smallest / SIZE_MARGIN <= where.params_b <= largest * SIZE_MARGIN:
        missing.append(_("no fit rows near {size} B params (rows cover {smallest}-{largest} B)").format(
            size=f"{where.params_b:.1f}", smallest=f"{smallest:g}", largest=f"{largest:g}"))
    return missing


def band_for(where: Where, table: RangeTable | None = None) -> tuple[float, float, Basis]:
    """The log-ratio bounds for one prediction and their basis: the group's own band when it has MIN_ROWS rows,
    else the metric's band across engines (in this regime, else on one GPU, and for memory else on several GPUs:
    one GPU's share of a job is estimated alike however many there are, unlike a speed) widened; widened again
    outside the calibrated region."""
    table = table or default_table()
    group = regime(where.gpus)
    own = table.find(where.metric, where.engine, group)
    widened: list[str] = []
    borrowed = (table.find(where.metric, "all", "multi-GPU"),) if where.metric in MEMORY_METRICS else ()
    shared = next((b for b in (table.find(where.metric, "all", group), table.find(where.metric, "all", "1 GPU"),
                               *borrowed)
                   if b is not None and b.rows >= MIN_ROWS), None)
    host = _built_on(where.engine)
    kin = table.find(where.metric, host, group) if own is None and host else None
    if own is not None and own.rows >= MIN_ROWS:
        engine_name = "" if where.metric.startswith("training") else f"{where.engine} "
        band, scale, label = own, 1.0, f"{engine_name}{where.metric}, {group}"
    elif kin is not None and kin.rows >= MIN_ROWS:
        band, scale, label = kin, OUTSIDE_WIDENING, f"{host} {where.metric}, {group}"
        widened.append(_("no fit rows for {engine}: the band of {host}, which it runs with its own defaults").format(
            engine=where.engine, host=host))
    elif shared is None:
        low, high = NO_ROWS
        return low, high, Basis(0, _("{metric} has no published rows; a factor of 2 either way").format(
            metric=where.metric), (_("no rows"),))
    else:
        band = shared
        scale, label = SMALL_GROUP_WIDENING, f"{where.metric}, all engines, {band.regime}"
        if _documented_only(where.engine, table):
            scale *= OUTSIDE_WIDENING
            widened.append(_("no fit rows for {engine}: it runs {host}'s constants with its own defaults, "
                             "unmeasured").format(engine=where.engine, host=host) if host else
                           _("no fit rows for {engine}: its constants come from its documentation and first "
                             "principles, not from measurements").format(engine=where.engine))
        else:
            widened.append(ngettext("only {rows} fit row for {engine}, {group}", "only {rows} fit rows for {engine}, "
                                    "{group}", own.rows).format(rows=own.rows, engine=where.engine, group=group) if own
                           else _("no fit rows for {engine}, {group}").format(engine=where.engine, group=group))
    outside = _outside(band, where)
    if outside:
        scale *= OUTSIDE_WIDENING * FURTHER_WIDENING ** (len(outside) - 1)
        widened += outside
    measured = where.calibrated and where.metric not in MEMORY_METRICS
    widening = table.widening_for(where)
    if not measured:
        scale *= widening
    # Measured ceilings narrow a band only where it was widened for what they stand in for: the GPU family's rows
    # and the spread between GPUs. A family with its own rows and no spread widening keeps its band, and says so.
    narrowed = measured and (where.family not in band.families or widening > 1)
    low = min(band.low, -FLOOR) * scale
    high = max(band.high, FLOOR) * scale
    if outside:
        limit = max(WIDEST, OUTSIDE_WIDENING * max(-band.low, band.high, FLOOR))
        low, high = max(low, -limit), min(high, limit)
    return low, high, Basis(band.rows, label, tuple(widened), CALIBRATED if narrowed else "")


@dataclass(frozen=True)
class Estimate:
    """A predicted number with its 80% range: ``low`` and ``high`` bound what a real run measures, 8 times in 10."""

    value: float
    low: float
    high: float
    basis: Basis
    coverage: float = COVERAGE

    def contains(self, measured: float) -> bool:
        return self.low <= measured <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "coverage": self.coverage,
                "basis": self.basis.to_dict()}


def estimate(value: float, where: Where, table: RangeTable | None = None, inverse: bool = False) -> Estimate:
    """``value`` with its range. ``inverse``: the number is a time for a rate the bands describe (time to first
    token from prefill tok/s), so the range turns over."""
    low, high, basis = band_for(where, table)
    if inverse:
        return Estimate(value, value / math.exp(high), value / math.exp(low), basis)
    return Estimate(value, value * math.exp(low), value * math.exp(high), basis)


SIXTEEN_BIT = ("fp16", "bf16", "F16", "BF16")
"""Weights in 16 bits under any name count as one format for the calibrated region."""


def format_key(quant: str) -> str:
    name = weight_format(quant).name
    return "16-bit" if name in SIXTEEN_BIT else name


def where(metric: str, model: ModelSpec, gpu: GpuSpec, job: Job, calibrated: bool = False) -> Where:
    """The key of the prediction of ``metric`` for ``job``: training runs count as the engine "training"."""
    runtime = "training" if job.training else engine(job.engine).name
    return Where(metric, runtime, job.world, gpu.architecture, format_key(job.quant), model.params / 1e9, calibrated,
                 job.nodes, _uncovered(metric, gpu, job, model) if metric not in MEMORY_METRICS else ())


def _uncovered(metric: str, gpu: GpuSpec, job: Job, model: ModelSpec | None = None) -> tuple[str, ...]:
    """What the speed rows never had: a mixture-of-experts model (every fit row is a dense model, and an MoE step
    adds routing and expert kernels that are slow at small batches); and on several GPUs, tensors split over PCIe
    (the multi-GPU rows split tensors only over NVLink: vLLM on A100 SXM) or nodes other than as llm-foundry's FSDP
    (ZeRO-3) data parallelism over InfiniBand."""
    from gpufly.estimate.comms import default_internode, default_link, internode

    missing = []
    if model is not None and model.moe is not None:
        missing.append(_("no fit rows for mixture-of-experts models"))
    tensor_split = (job.training and job.tensor_parallel > 1) or (not job.training and not engine(
        job.engine).splits_layers)
    if job.gpus > 1 and tensor_split and (job.link or default_link(gpu)) == "pcie":
        missing.append(_("no fit rows for tensor parallelism over PCIe"))
    if job.nodes == 1:
        return tuple(missing)
    if not job.training:
        missing.append(_("no fit rows for inference across nodes"))
    elif job.tensor_parallel > 1 or job.pipeline_parallel > 1 or job.zero < 3:
        missing.append(_("no fit rows for this layout across nodes (the multi-node rows are FSDP/ZeRO-3 data "
                         "parallel)"))
    if not internode(job.internode or default_internode(gpu)[0]).rdma:
        missing.append(_("no fit rows over a network without RDMA"))
    return tuple(missing)


SPEED_METRICS = {"decode_tok_s": ("decode", False), "prefill_tok_s": ("prefill", False),
                 "time_to_first_token_s": ("prefill", True), "train_tokens_s": ("training throughput", False),
                 "train_samples_s": ("training throughput", False)}
"""Each predicted speed, the residual band it takes, and whether it is a time (the band turned over)."""


def memory_estimate(model: ModelSpec, gpu: GpuSpec, job: Job, total_bytes: int) -> Estimate:
    """The per-GPU memory total with its range (measured peaks over predicted, on the fit rows)."""
    metric = "training memory" if job.training else "inference memory"
    return estimate(float(total_bytes), where(metric, model, gpu, job))


def speed_estimates(model: ModelSpec, gpu: GpuSpec, job: Job, speed: Speed,
                    calibrated: bool = False) -> dict[str, Estimate]:
    """Every number ``speed`` predicts, with its range; a figure the speed leaves unknown has none. ``calibrated``:
    ``gpu`` carries this card's measured ceilings, which stand in for the GPU-to-GPU spread the cross-validated
    widening and the family check allow for; the fit rows' own spread remains."""
    found = {}
    for name, (metric, inverse) in SPEED_METRICS.items():
        value = getattr(speed, name)
        if value is not None:
            found[name] = estimate(value, where(metric, model, gpu, job, calibrated), inverse=inverse)
    return found
