"""`gpufly fit`, `gpufly recommend` and `gpufly models`: the advisor on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gpufly.catalog import Catalog, GpuSpec, default_catalog
from gpufly.cli.render import MISSING, console, print_json
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.estimate.engines import GIB
from gpufly.estimate.job import DEFAULT_LORA_TARGETS, Job
from gpufly.models.spec import ModelSpec

if TYPE_CHECKING:
    from gpufly.estimate.advise import Change, Fit

SCHEMA_VERSION = 1
DEFAULT_TARGETS = ",".join(DEFAULT_LORA_TARGETS)

Task = Annotated[str, typer.Option("--task", help="infer, lora, qlora or full.")]
Quant = Annotated[str, typer.Option("--quant", help="fp32, bf16, fp16, fp8, int8, int4[-gN], nf4, q4_k_m, q8_0...")]
Ctx = Annotated[int, typer.Option("--ctx", help="Tokens per sequence (prompt + output; training sequence length).")]
Batch = Annotated[int, typer.Option("--batch", help="Sequences at once (training: micro-batch per GPU).")]
Kv = Annotated[str, typer.Option("--kv", help="KV-cache format: fp16, fp8, q8_0, q4_0.")]
EngineOpt = Annotated[str, typer.Option("--engine", help="transformers, vllm or llama.cpp.")]
Optimizer = Annotated[str, typer.Option("--optimizer", help="adamw, adamw8bit, sgd, sgd-momentum, adafactor.")]
Zero = Annotated[int, typer.Option("--zero", help="ZeRO/FSDP stage 0-3 across the GPUs.")]
Checkpointing = Annotated[bool, typer.Option("--checkpointing", help="Full activation checkpointing.")]
LoraRank = Annotated[int, typer.Option("--lora-rank", help="LoRA rank r.")]
LoraTargets = Annotated[str, typer.Option("--lora-targets", help="Comma-separated modules LoRA adapts.")]
Fsdp = Annotated[str | None, typer.Option("--fsdp", help="FSDP: full_shard (= ZeRO-3) or shard_grad_op (= ZeRO-2).")]
Fp32 = Annotated[bool, typer.Option("--fp32", help="Train in fp32 instead of mixed precision.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


FSDP_STAGES = {"full_shard": 3, "shard_grad_op": 2, "no_shard": 0}
"""FSDP sharding strategies and the ZeRO stage each equals in memory (llm-analysis README)."""


def _job(task: str, quant: str, ctx: int, batch: int, kv: str, engine: str, optimizer: str, zero: int,
         checkpointing: bool, lora_rank: int, fp32: bool, lora_targets: str = DEFAULT_TARGETS,
         fsdp: str | None = None) -> Job:
    from gpufly.estimate.engines import engine as check_engine
    from gpufly.estimate.formats import kv_bytes, weight_format

    weight_format(quant)
    kv_bytes(kv)
    check_engine(engine)
    if fp32 and quant == "bf16":
        quant = "fp32"
    if quant.lower().startswith("q") and engine == "transformers" and task == "infer":
        engine = "llama.cpp"
    if fsdp is not None:
        if fsdp.lower() not in FSDP_STAGES:
            raise unknown_choice("FSDP strategy", fsdp, FSDP_STAGES)
        zero = FSDP_STAGES[fsdp.lower()]
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip())
    if not targets:
        raise GpuflyError("--lora-targets names no module", hint=f"e.g. --lora-targets {DEFAULT_TARGETS}")
    return Job(task=task, quant=quant, context=ctx, batch=batch, kv_format=kv, engine=engine, optimizer=optimizer,
               zero=zero, checkpointing=checkpointing, lora_rank=lora_rank, mixed_precision=not fp32,
               lora_targets=targets)


def _load(model: str, exact: bool = False) -> ModelSpec:
    from gpufly.models.resolve import load_model

    return load_model(model, exact=exact)


def _describe(spec: ModelSpec, job: Job) -> str:
    what = {"infer": f"inference at {job.quant}", "lora": f"LoRA r{job.lora_rank} on a {job.quant} base",
            "qlora": f"QLoRA r{job.lora_rank}", "full": "full training" + ("" if job.mixed_precision else " (fp32)")}
    extra = f", {job.engine}" if not job.training else f", {job.optimizer}"
    if job.training and job.zero:
        extra += f", ZeRO-{job.zero}"
    if job.checkpointing:
        extra += ", checkpointing"
    active = f", {spec.active_params / 1e9:.1f} B active" if spec.active_params else ""
    return (f"{spec.name} ({spec.params / 1e9:.2f} B params{active}; {spec.params_method}): {what[job.task]}, "
            f"ctx {job.context:,}, batch {job.batch}{extra}")


def _gib(value: int | float) -> str:
    return f"{value / GIB:,.2f}"


def _rate(value: float | None, unit: str) -> str:
    if value is None:
        return MISSING
    return f"{value:,.0f} {unit}" if value >= 10 else f"{value:,.1f} {unit}"


def render_fit(verdict: Fit, changes: list[Change], out: Console) -> None:
    out.print(verdict.verdict, style="bold green" if verdict.fits else "bold red")
    table = Table(title="Memory per GPU", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("how")
    for item in verdict.memory.items:
        table.add_row(item.name, _gib(item.bytes), item.note)
    table.add_row("total", _gib(verdict.memory.total_bytes), f"of {verdict.capacity_bytes / GIB:.1f} GiB",
                  style="bold")
    out.print(table)
    for note in verdict.memory.notes:
        out.print(f"note: {note}")
    s = verdict.speed
    if verdict.job.training:
        line = f"speed: {_rate(s.train_tokens_s, 'tokens/s')}" if s.train_tokens_s else \
            f"speed: {_rate(s.train_samples_s, 'samples/s')}"
    else:
        ttft = f", first token after {s.time_to_first_token_s:.2f} s" if s.time_to_first_token_s else ""
        line = (f"speed: decode {_rate(s.decode_tok_s, 'tok/s')} at the end of the context, prefill "
                f"{_rate(s.prefill_tok_s, 'tok/s')}{ttft}")
    out.print(line + (f" ({s.why})" if s.why else "") + "  [roofline with calibrated efficiencies; "
              "docs/estimates.md]")
    if changes:
        title = "Changes that make it fit" if not verdict.fits else "Other options"
        options = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        for column in ("change", "per-GPU GiB", "fits"):
            options.add_column(column)
        for change in changes:
            options.add_row(change.description, _gib(change.fit.memory.total_bytes), "yes" if change.fit.fits else "no")
        out.print(options)


def _render_catalog(job: Job, fits: list[Fit], out: Console) -> None:
    table = Table(title=f"Across the catalog: {sum(f.fits for f in fits)} of {len(fits)} GPUs fit",
                  box=box.SIMPLE_HEAD, title_justify="left")
    for column, justify in (("GPU", "left"), ("VRAM", "right"), ("needs", "right"), ("free", "right"),
                            ("speed", "right")):
        table.add_column(column, justify=justify)
    for verdict in fits:
        value = (verdict.speed.decode_tok_s if not job.training else
                 verdict.speed.train_tokens_s or verdict.speed.train_samples_s)
        unit = "tok/s" if not job.training else ("tokens/s" if verdict.speed.train_tokens_s else "samples/s")
        table.add_row(verdict.gpu.name, f"{verdict.gpu.vram_gib:g}", _gib(verdict.memory.total_bytes),
                      _gib(verdict.free_bytes), _rate(value, unit) if verdict.fits else "does not fit",
                      style=None if verdict.fits else "dim")
    out.print(table)


def _machine_gpus() -> list[tuple[GpuSpec, int]]:
    from gpufly.report.machine import probe_machine

    return probe_machine().gpu_types()


Targets = list[tuple[GpuSpec, int]]


def _calibrated(targets: Targets, results: Path, catalog: Catalog) -> tuple[Targets, list[str]]:
    """The target GPUs with measured ceilings from a bench run; without --gpu, the run's own GPU."""
    from gpufly.bench.results import load_run
    from gpufly.estimate.calibrate import calibrated_gpu

    run = load_run(results)
    if not targets:
        if not run.device.catalog_id:
            raise GpuflyError(f"the bench results are for '{run.device.name}', which the catalog lacks",
                              hint="give --gpu NAME")
        targets = [(catalog.get(run.device.catalog_id), 1)]
    calibrated, notes = [], []
    for target, count in targets:
        spec, changed = calibrated_gpu(target, run)
        calibrated.append((spec, count))
        notes += changed
    return calibrated, notes


def fit(
    model: Annotated[str, typer.Argument(help="Preset name, config.json or folder, .gguf file, or module:function.")],
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU name, or COUNTxNAME (2xH100). Default: this machine's.")
    ] = None,
    task: Task = "infer", quant: Quant = "bf16", ctx: Ctx = 4096, batch: Batch = 1, kv: Kv = "fp16",
    engine: EngineOpt = "transformers", optimizer: Optimizer = "adamw", zero: Zero = 0,
    checkpointing: Checkpointing = False, lora_rank: LoraRank = 16, lora_targets: LoraTargets = DEFAULT_TARGETS,
    fsdp: Fsdp = None, fp32: Fp32 = False,
    max_ctx: Annotated[bool, typer.Option("--max-ctx", help="Solve for the longest context that fits.")] = False,
    max_batch: Annotated[bool, typer.Option("--max-batch", help="Solve for the largest batch that fits.")] = False,
    exact: Annotated[bool, typer.Option("--exact", help="Count parameters on the meta device (transformers).")] = False,
    calibrate: Annotated[Path | None, typer.Option("--calibrate", metavar="RESULTS",
                                                   help="Predict from `gpufly bench --save` results.")] = None,
    json_out: Json = False,
) -> None:
    """Will MODEL fit on a GPU for this job? Memory breakdown, predicted speed, and what would make it fit."""
    from gpufly.estimate.advise import changes, largest, parse_gpu
    from gpufly.estimate.advise import fit as fit_one

    catalog = default_catalog()
    targets = [parse_gpu(gpu, catalog)] if gpu else _machine_gpus()
    calibration: list[str] = []
    if calibrate is not None:
        targets, calibration = _calibrated(targets, calibrate, catalog)
    base = _job(task, quant, ctx, batch, kv, engine, optimizer, zero, checkpointing, lora_rank, fp32, lora_targets,
                fsdp)
    spec = _load(model, exact)
    out = console()
    if not targets:
        verdicts = sorted((fit_one(spec, g, base) for g in catalog if g.vram_gib), key=lambda f: -f.free_bytes)
        if json_out:
            print_json({"schema_version": SCHEMA_VERSION, "model": spec.to_dict(), "job": base.__dict__,
                        "gpus_on_this_machine": 0, "catalog": [v.to_dict() for v in verdicts]})
            return
        out.print(_describe(spec, base))
        out.print("no NVIDIA GPU from the catalog on this machine: the verdict across the catalog "
                  "(give --gpu NAME for one card)")
        _render_catalog(base, verdicts, out)
        return
    results = []
    for target, count in targets:
        job = base.with_(gpus=count)
        verdict = fit_one(spec, target, job)
        solved = {}
        if max_ctx:
            solved["max_ctx"] = largest(spec, target, job, "context", spec.max_context or 1_048_576)
        if max_batch:
            solved["max_batch"] = largest(spec, target, job, "batch", 65_536)
        results.append((verdict, changes(verdict), solved))
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "model": spec.to_dict(), "job": base.__dict__,
                    "results": [{**v.to_dict(), "changes": [c.to_dict() for c in ch], **solved}
                                for v, ch, solved in results]})
        if not all(v.fits for v, _, _ in results):
            raise typer.Exit(1)
        return
    for note in calibration:
        out.print(f"calibrated: {note}")
    for verdict, found_changes, solved in results:
        out.print(_describe(spec, verdict.job))
        render_fit(verdict, found_changes, out)
        for key, value in solved.items():
            label = "longest context" if key == "max_ctx" else "largest batch"
            out.print(f"{label} that fits: {value:,}" if value else f"{label}: nothing fits, even at 1")
    if not all(v.fits for v, _, _ in results):
        raise typer.Exit(1)


def recommend(
    model: Annotated[str, typer.Argument(help="Preset name, config.json or folder, .gguf file, or module:function.")],
    task: Task = "infer", quant: Quant = "bf16", ctx: Ctx = 4096, batch: Batch = 1, kv: Kv = "fp16",
    engine: EngineOpt = "transformers", optimizer: Optimizer = "adamw", checkpointing: Checkpointing = False,
    lora_rank: LoraRank = 16, lora_targets: LoraTargets = DEFAULT_TARGETS, fp32: Fp32 = False,
    budget: Annotated[
        float | None, typer.Option("--budget", metavar="USD", help="Most to spend (launch prices).")
    ] = None,
    max_gpus: Annotated[int, typer.Option("--max-gpus", help="At most this many GPUs (1, 2, 4, 8).")] = 8,
    prefer: Annotated[str, typer.Option("--prefer", help="Rank by speed, cost or power.")] = "speed",
    top: Annotated[int, typer.Option("--top", help="Show this many.")] = 15,
    json_out: Json = False,
) -> None:
    """Rank catalog GPUs (and how many of each) that fit MODEL for this job."""
    from gpufly.estimate.advise import recommend as rank

    job = _job(task, quant, ctx, batch, kv, engine, optimizer, 0, checkpointing, lora_rank, fp32, lora_targets)
    spec = _load(model)
    picks = rank(spec, job, default_catalog(), budget_usd=budget, max_gpus=max_gpus, prefer=prefer)
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "model": spec.to_dict(), "job": job.__dict__,
                    "prefer": prefer, "budget_usd": budget, "picks": [p.to_dict() for p in picks[:top]]})
        return
    out = console()
    out.print(_describe(spec, job))
    if not picks:
        out.print("no GPU in the catalog fits this job" + (" within the budget" if budget else "")
                  + f" with up to {max_gpus} GPUs")
        return
    table = Table(title=f"Best GPUs, by {prefer}" + (f", within ${budget:,.0f}" if budget else ""),
                  box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("#", "GPUs", "per-GPU GiB", "speed", "price", "per $1k", "per kW"):
        table.add_column(column, justify="left" if column == "GPUs" else "right")
    for rank_no, pick in enumerate(picks[:top], 1):
        count = pick.fit.job.gpus
        table.add_row(str(rank_no), f"{count}x {pick.fit.gpu.name}" if count > 1 else pick.fit.gpu.name,
                      f"{_gib(pick.fit.memory.total_bytes)} / {pick.fit.gpu.vram_gib:g}",
                      _rate(pick.throughput, pick.unit.split()[0]),
                      f"${pick.price_usd:,.0f}" if pick.price_usd else MISSING,
                      f"{pick.per_dollar * 1000:,.1f}" if pick.per_dollar else MISSING,
                      f"{pick.per_watt * 1000:,.0f}" if pick.per_watt else MISSING)
    out.print(table)
    out.print("Prices are launch MSRPs where the vendor published one; data-center GPUs have none.")


def models(json_out: Json = False) -> None:
    """List the preset models."""
    from gpufly.models.presets import presets

    found = presets()
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "presets": list(found.values())})
        return
    table = Table(title=f"{len(found)} preset models", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("id", "name", "kind", "params"):
        table.add_column(column, justify="right" if column == "params" else "left")
    for preset in found.values():
        params = preset.get("published_params")
        shown = f"{params / 1e9:.2f} B" if params else MISSING
        table.add_row(preset["id"], preset["name"], preset.get("kind", ""), shown)
    console().print(table)
