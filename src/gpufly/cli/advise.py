"""`gpufly fit`, `gpufly recommend` and `gpufly models`: the advisor on the command line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gpufly.cli.render import LANG_HELP, MISSING, choose_language, console, print_json, print_note
from gpufly.errors import GpuflyError
from gpufly.estimate.engines import GIB, ollama_context
from gpufly.estimate.engines import engine as resolve_engine
from gpufly.estimate.job import DEFAULT_LORA_TARGETS, Job
from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext

if TYPE_CHECKING:
    from gpufly.catalog import Catalog, GpuSpec
    from gpufly.estimate.advise import Change, Fit, GpuChoice, Pick, Ranking
    from gpufly.estimate.parallel import Scaling
    from gpufly.estimate.ranges import Estimate
    from gpufly.models.spec import ModelSpec

SCHEMA_VERSION = 1
DEFAULT_TARGETS = ",".join(DEFAULT_LORA_TARGETS)

Task = Annotated[str, typer.Option("--task", help="infer, lora, qlora or full.")]
Quant = Annotated[str | None, typer.Option(
    "--quant", help="fp32, bf16, fp16, fp8, int8, int4[-gN], nf4, q4_k_m, q8_0, q4_0... Default: bf16, or a GGUF "
    "file's own format.", show_default=False)]
Ctx = Annotated[int | None, typer.Option(
    "--ctx", help="Tokens per sequence (prompt + output; training sequence length). Default: 4096, or the model's "
    "maximum when shorter.", show_default=False)]
Batch = Annotated[int, typer.Option("--batch", help="Sequences at once (training: micro-batch per GPU).")]
Kv = Annotated[str, typer.Option("--kv", help="KV-cache format: fp16, fp8, q8_0, q4_0.")]
EngineOpt = Annotated[str | None, typer.Option(
    "--engine", help="transformers, vllm, llama.cpp, sglang (mem-fraction-static 0.88), tensorrt-llm (KV cache 0.9 "
    "of free memory), exllamav2 (EXL2/GPTQ, KV for the whole --ctx), mlc-llm (q4f16_1, 0.85 of memory) or ollama "
    "(llama.cpp with Ollama's defaults: Q4_K_M, context by GPU memory, no flash attention). Default: llama.cpp for "
    "GGUF files and formats, else transformers.", show_default=False)]
Optimizer = Annotated[str, typer.Option(
    "--optimizer", help="adamw, adamw8bit, paged-adamw, paged-adamw8bit (bitsandbytes: states paged to host memory "
    "under pressure), sgd, sgd-momentum, adafactor.")]
Zero = Annotated[int, typer.Option("--zero", help="ZeRO/FSDP stage 0-3 across the GPUs.")]
Checkpointing = Annotated[bool | None, typer.Option(
    "--checkpointing/--no-checkpointing", help="Full activation checkpointing. Default: the task's recipe (on for "
    "LoRA and QLoRA, as PEFT and TRL set it; off for full training).", show_default=False)]
LoraRank = Annotated[int | None, typer.Option("--lora-rank", help="LoRA rank r. Default: 16.", show_default=False)]
LoraTargets = Annotated[str | None, typer.Option(
    "--lora-targets", help=f"Comma-separated linear layers LoRA adapts. Default: those of {DEFAULT_TARGETS} the "
    "model has.", show_default=False)]
GpuMemory = Annotated[float | None, typer.Option("--gpu-memory-utilization", show_default=False,
                                                 help="vLLM: the share of each GPU's memory it may claim. Default: "
                                                      "0.9, vLLM's.")]
Fsdp = Annotated[str | None, typer.Option("--fsdp", help="FSDP: full_shard (= ZeRO-3) or shard_grad_op (= ZeRO-2).")]
Fp32 = Annotated[bool, typer.Option("--fp32", help="Train in fp32 instead of mixed precision (= --precision fp32).")]
Precision = Annotated[str | None, typer.Option(
    "--precision", help="Training recipe: mixed (bf16 compute, fp32 master weights and optimizer states; PEFT's fp32 "
    "upcast for QLoRA), bf16 (pure bf16 weights, gradients and optimizer states, as torchtune's full fine-tune) or "
    "fp32. Default: mixed.", show_default=False)]
CheckpointingMode = Annotated[str | None, typer.Option(
    "--checkpointing-mode", help="Activation checkpointing: none, selective (every other layer, torchtitan's "
    "selective_ac_option 2) or full. Default: the task's recipe, as --checkpointing.", show_default=False)]
Attention = Annotated[str | None, typer.Option(
    "--attention", help="Attention kernel: flash, sdpa (flash or memory-efficient kernels on CUDA) or eager (stores "
    "s x s softmax per head and layer: in training for backward, in a transformers prefill one layer's at a time). "
    "Default: flash in training, the engine's default in inference.", show_default=False)]
OptimizerInBackward = Annotated[bool, typer.Option(
    "--optimizer-in-backward", help="Step each parameter as backward makes its gradient (torchtune's "
    "optimizer_in_bwd): only the largest gradient is live.")]
Offload = Annotated[str | None, typer.Option(
    "--offload", help="Training state in host memory: optimizer (ZeRO-Offload: gradients, master weights and "
    "optimizer states) or params (also the weights, FSDP CPU offload). Default: none.", show_default=False)]
Loss = Annotated[str | None, typer.Option(
    "--loss", help="Training loss over the vocabulary: full (transformers: the whole logits, upcast to fp32), "
    "chunked (LitGPT: 16-bit logits and cross-entropy in chunks) or fused (Liger, Unsloth, Cut Cross-Entropy: "
    "the logits never whole). Default: full.", show_default=False)]
Prompt = Annotated[int | None, typer.Option(
    "--prompt", metavar="TOKENS", help="Inference: tokens of each prompt, the part of --ctx a prefill runs at once. "
    "Default: the whole --ctx (the largest prefill it allows).", show_default=False)]
CudaContext = Annotated[float | None, typer.Option(
    "--cuda-context", metavar="GIB", help="Training: the CUDA context in GiB, as nvidia-smi shows for an idle torch "
    "process. Default (or 0): 0.49 (0.27-0.62 with lazy or eager module loading; more with many libraries' "
    "kernels).",
    show_default=False)]
Nodes = Annotated[int, typer.Option("--nodes", help="Nodes of --gpu COUNTxNAME each (training: data, pipeline or "
                                     "tensor parallel across them; vLLM inference: a pipeline stage per node).")]
Link = Annotated[str | None, typer.Option(
    "--link", help="Link between the GPUs of a node: nvlink or pcie. Default: the GPU's fabric on SXM/OAM modules, "
    "PCIe for add-in cards.", show_default=False)]
InternodeOpt = Annotated[str | None, typer.Option(
    "--internode", help="Network between nodes: ib-xdr, ib-ndr, ib-hdr, ib-edr, roce-400, roce-200, roce-100, "
    "eth-100, eth-25, eth-10. Default: ib-ndr (ib-hdr before 2022) for data-centre modules, else eth-100.",
    show_default=False)]
Nics = Annotated[int | None, typer.Option(
    "--nics", help="Network cards per node. Default: one per GPU for InfiniBand/RoCE, one per node for Ethernet.",
    show_default=False)]
Tp = Annotated[int, typer.Option("--tp", help="Training: tensor-parallel size (inside a node).")]
Pp = Annotated[int, typer.Option("--pp", help="Training: pipeline stages (across nodes).")]
Microbatches = Annotated[int | None, typer.Option(
    "--microbatches", help="Training: micro-batches per step through the pipeline. Default: 4 x --pp.",
    show_default=False)]
GlobalBatch = Annotated[int | None, typer.Option(
    "--global-batch", help="Training: samples per optimizer step across all GPUs (fixed as nodes are added). "
    "Default: --batch on every data-parallel GPU.", show_default=False)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Lang = Annotated[str | None, typer.Option("--lang", metavar="LANG", help=LANG_HELP)]


DEFAULT_CONTEXT = 4096


def _load(model: str, exact: bool = False) -> ModelSpec:
    from gpufly.models.resolve import load_model

    return load_model(model, exact=exact)


def _context(spec: ModelSpec, ctx: int | None, engine: str | None = None, vram_gib: float | None = None) -> int:
    """--ctx as given, or 4096 capped at the model's maximum (a BERT takes 512); with --engine ollama, Ollama's
    default context for the GPU's memory (the smallest, 4096, where no GPU is named), capped the same way."""
    if ctx is not None:
        return ctx
    default = DEFAULT_CONTEXT
    if engine is not None and resolve_engine(engine).name == "ollama":
        default = ollama_context(vram_gib) if vram_gib is not None else ollama_context(0)
    return min(default, spec.max_context or default)


def _describe(spec: ModelSpec, job: Job) -> str:
    what = {"infer": _("inference at {quant}"), "lora": _("LoRA r{rank} on a {quant} base"),
            "qlora": _("QLoRA r{rank}"),
            "full": _("full training") if job.mixed_precision else _("full training (fp32)")}
    extra = f", {job.engine}" if not job.training else f", {job.optimizer}"
    if job.training and job.zero:
        extra += f", ZeRO-{job.zero}"
    if job.training and job.tensor_parallel * job.pipeline_parallel > 1:
        tp, pp, dp = job.layout
        extra += f", tp {tp} x pp {pp} x dp {dp}"
    if job.checkpointing:
        extra += _(", selective checkpointing") if job.selective else _(", gradient checkpointing")
    extra += _training_extras(job) if job.training else ""
    params = (_("{params} B params, {active} B active") if spec.active_params else _("{params} B params")).format(
        params=f"{spec.params / 1e9:.2f}", active=f"{(spec.active_params or 0) / 1e9:.1f}")
    from gpufly.estimate.formats import weight_format

    fmt = weight_format(job.quant)
    task = what[job.task].format(quant=fmt.label if fmt.kernel else job.quant, rank=job.lora_rank)
    if not spec.is_transformer:  # a CNN: no context, and no LLM engine
        return _("{model} ({params}; {method}): {task}, batch {batch}").format(
            model=spec.name, params=params, method=spec.params_method, task=task, batch=job.batch) + (
            extra if job.training else "")
    return _("{model} ({params}; {method}): {task}, ctx {ctx}, batch {batch}{extra}").format(
        model=spec.name, params=params, method=spec.params_method, task=task, ctx=f"{job.context:,}",
        batch=job.batch, extra=extra)


def _training_extras(job: Job) -> str:
    """The training recipe's choices that differ from the defaults, for the job's one-line description."""
    said = [text for text, on in (
        (_("pure bf16"), job.precision == "bf16"),
        (_("{attention} attention").format(attention=job.attention), job.attention != "flash"),
        (_("optimizer in backward"), job.optimizer_in_backward),
        (_("{offload} offloaded").format(offload=job.offload), job.offload != "none"),
        (_("{loss} loss").format(loss=job.loss), job.loss != "full")) if on]
    return "".join(f", {text}" for text in said)


def _gib(value: int | float) -> str:
    return f"{value / GIB:,.2f}"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.1f}" if value >= 1 else f"{value:,.2f}"


def _rate(value: float | None, unit: str, estimate: Estimate | None = None) -> str:
    """``37 tok/s``, or with its range ``37 tok/s (29-44, 80% range)``."""
    if value is None:
        return MISSING
    shown = f"{_number(value)} {unit}"
    if estimate is None:
        return shown
    return _("{value} ({low}-{high}, {coverage} range)").format(
        value=shown, low=_number(estimate.low), high=_number(estimate.high), coverage=f"{estimate.coverage:.0%}")


def _bases(verdict: Fit) -> list[str]:
    """One line per distinct basis of the ranges shown: how many fit rows, which group, what widened it."""
    shown = [*([verdict.memory_range] if verdict.memory_range else []), *verdict.speed_ranges.values()]
    return list(dict.fromkeys(e.basis.text() for e in shown))


def _speed_line(verdict: Fit) -> str:
    """The predicted speed; for a job that does not fit, labelled as what it would be if it fit."""
    s, ranges = verdict.speed, verdict.speed_ranges
    if verdict.job.training:
        line = (_rate(s.train_tokens_s, "tokens/s", ranges.get("train_tokens_s")) if s.train_tokens_s
                else _rate(s.train_samples_s, "samples/s", ranges.get("train_samples_s")))
    else:
        ttft = (_(", first token after {time}").format(
            time=_rate(s.time_to_first_token_s, "s", ranges.get("time_to_first_token_s")))
            if s.time_to_first_token_s else "")
        decode = _rate(s.decode_tok_s, "tok/s", ranges.get("decode_tok_s"))
        batch = verdict.job.batch
        if batch > 1 and s.decode_tok_s:
            decode = _("{decode} over the batch of {batch} ({each} tok/s per sequence)").format(
                decode=decode, batch=f"{batch:,}", each=_number(s.decode_tok_s / batch))
        line = _("decode {decode} at the end of the context, prefill {prefill}{ttft}").format(
            decode=decode, prefill=_rate(s.prefill_tok_s, "tok/s", ranges.get("prefill_tok_s")), ttft=ttft)
        if s.prompt_tokens and s.prefill_tok_s:
            line += _(" (a {tokens}-token prompt)").format(tokens=f"{s.prompt_tokens:,}")
    said = _("speed: {speed}") if verdict.fits else _("speed if it fit (hypothetical: it does not fit): {speed}")
    why = f" ({s.why})" if s.why else ""
    basis = (_("roofline with calibrated efficiencies; bound by {bound}").format(bound=_bound(s.bound))
             if s.bound and not verdict.job.training else _("roofline with calibrated efficiencies"))
    return said.format(speed=line) + f"{why}  [{basis}; docs/estimates.md]"


def _bound(name: str) -> str:
    """What limits the decode speed (estimate.speed.decode_terms), in the reader's language."""
    from gpufly.estimate.speed import HOST_BOUND

    return {"memory bandwidth (decode)": _("memory bandwidth (decode)"), "compute (decode)": _("compute (decode)"),
            HOST_BOUND: _("host (the engine's per-layer launch time)")}.get(name, name)


def _part(name: str) -> str:
    """A step part's name (as in the JSON) in the reader's language."""
    return {"compute": _("compute"), "tensor-parallel all-reduce": _("tensor-parallel all-reduce"),
            "pipeline bubble": _("pipeline bubble"), "pipeline sends": _("pipeline sends"),
            "pipeline sends between nodes": _("pipeline sends between nodes"),
            "data-parallel communication (exposed)": _("data-parallel communication (exposed)"),
            "engine overhead": _("engine overhead")}.get(name, _bound(name))


def _item(name: str) -> str:
    """A memory item's name (``kv_cache``, as in the JSON) in the reader's language."""
    return {"weights": _("weights"), "kv_cache": _("kv_cache"), "activations": _("activations"),
            "allocator": _("allocator"), "runtime": _("runtime"), "gradients": _("gradients"),
            "optimizer": _("optimizer"), "lora_adapters": _("lora_adapters"), "gathered": _("gathered"),
            "nccl": _("nccl")}.get(name, name)


def render_fit(verdict: Fit, changes: list[Change], out: Console) -> None:
    out.print(verdict.verdict, style="bold yellow" if verdict.tight else "bold green" if verdict.fits else "bold red")
    for note in verdict.notes:
        out.print(_("note: {note}").format(note=note), markup=False)
    table = Table(title=_("Memory per GPU"), box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column(_("item"))
    table.add_column("GiB", justify="right")
    table.add_column(_("how"))
    for item in verdict.memory.items:
        table.add_row(_item(item.name), _gib(item.bytes), item.note)
    spread = verdict.memory_range
    of = _("of {capacity} GiB").format(capacity=f"{verdict.capacity_bytes / GIB:.1f}")
    table.add_row(_("total"), _gib(verdict.memory.total_bytes), of if spread is None else
                  _("{of}; {low}-{high} GiB, {coverage} range").format(
                      of=of, low=_gib(spread.low), high=_gib(spread.high), coverage=f"{spread.coverage:.0%}"),
                  style="bold")
    out.print(table)
    for note in verdict.memory.notes:
        out.print(_("note: {note}").format(note=note), markup=False)
    out.print(_speed_line(verdict), markup=False)
    if verdict.job.world > 1 and verdict.speed.step:
        _render_step(verdict, out)
    for basis in _bases(verdict):
        out.print(_("range: {basis}").format(basis=basis) + "  [docs/calibration.md]", markup=False)
    if not verdict.fits and not changes:
        out.print(_("none of the changes gpufly tries lowers what this job needs per GPU"))
    elif not verdict.fits and not any(change.fit.fits for change in changes):
        closest = changes[0]
        out.print(_("no single change makes it fit; the closest is {change}: {needs} GiB per GPU, still short by "
                    "{short} GiB").format(change=closest.description, needs=_gib_ranged(closest.fit),
                                          short=f"{-closest.fit.free_bytes / GIB:.1f}"), markup=False)
    elif changes:
        title = _("Changes that make it fit") if not verdict.fits else _("Other options")
        options = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        for column in (_("change"), _("per-GPU GiB (80% range)"), _("verdict")):
            options.add_column(column)
        for change in changes:
            options.add_row(change.description, _gib_ranged(change.fit),
                            _("fits") if change.fit.fits else _("does not fit"))
        out.print(options)


def _gib_ranged(verdict: Fit) -> str:
    """A verdict's per-GPU total in GiB with its 80% range: ``20.30 (18.91-23.12)``."""
    band = verdict.memory_range
    total = _gib(verdict.memory.total_bytes)
    return f"{total} ({_gib(band.low)}-{_gib(band.high)})" if band is not None else total


def _seconds(value: float) -> str:
    return f"{value * 1e3:,.2f} ms" if value < 1 else f"{value:,.3f} s"


def _render_step(verdict: Fit, out: Console) -> None:
    """One step's time item by item, communication marked: a decode step at the end of the context, or a
    training step across the job's GPUs and nodes."""
    step = verdict.speed.step
    total = sum(part.seconds for part in step)
    title = _("Training step") if verdict.job.training else _("Decode step (end of the context)")
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for index, column in enumerate((_("item"), _("time"), _("share"), _("how"))):
        table.add_column(column, justify="right" if index in (1, 2) else "left")
    for part in step:
        name = _part(part.name) + (_(" [comm]") if part.communication else "")
        table.add_row(name, _seconds(part.seconds), f"{part.seconds / total:.0%}" if total else MISSING, part.note)
    communication = sum(part.seconds for part in step if part.communication)
    table.add_row(_("total"), _seconds(total), "100%", _("communication {comm}, the rest {rest}").format(
        rest=_seconds(total - communication), comm=_seconds(communication)), style="bold")
    out.print(table)
    if verdict.job.training and verdict.job.world > 1:
        from gpufly.estimate.parallel import overlap_note

        out.print(_("assumed: {note}").format(note=overlap_note()), markup=False)


def _render_scaling(verdict: Fit, scaled: Scaling, out: Console) -> None:
    """Throughput and efficiency over node counts, and where adding nodes stops paying."""
    job = verdict.job
    table = Table(title=_("Scaling over nodes ({gpus} GPUs each, tp {tp} x pp {pp} kept; data parallel grows)").format(
        gpus=job.gpus, tp=job.tensor_parallel, pp=job.pipeline_parallel), box=box.SIMPLE_HEAD, title_justify="left")
    for index, column in enumerate((_("nodes"), _("samples/s"), _("step"), _("exposed comm"), _("efficiency"),
                                    _("fits"))):
        table.add_column(column, justify="right" if index < 5 else "left")
    shown = [p for p in scaled.points if p.nodes & (p.nodes - 1) == 0
             or p.nodes in (job.nodes, scaled.stops_at, scaled.points[0].nodes)]
    low, high = verdict.training_band
    for point in shown:
        samples = f"{_number(point.samples_s)} ({_number(point.samples_s * low)}-{_number(point.samples_s * high)})"
        table.add_row(str(point.nodes), samples + ("" if point.fits else " *"), _seconds(point.step_s),
                      _seconds(point.communication_s), f"{point.efficiency:.0%}",
                      _("fits") if point.fits else _("does not fit"),
                      style="bold" if point.nodes == job.nodes else None)
    out.print(table)
    out.print(_("samples/s with its 80% range, the band of this job's own prediction"), markup=False)
    if not all(point.fits for point in shown):
        out.print(_("* hypothetical: the setup does not fit; its speed is what it would be if it fit"), markup=False)
    stops = _stops_line(scaled)
    out.print(stops if any(p.fits for p in scaled.points) else _("if it fit: {said}").format(said=stops),
              markup=False)
    for note in (*scaled.notes, *([scaled.why] if scaled.why else [])):
        out.print(_("note: {note}").format(note=note), markup=False)
    asked = scaled.point(job.nodes)
    if asked is not None and asked.communication_s > 0.5 * asked.step_s:
        out.print(_("the step at {nodes} nodes is {share} exposed communication: a faster network (--internode, "
                    "--nics) or a layout that moves fewer bytes across nodes pays more than more nodes").format(
            nodes=job.nodes, share=f"{asked.communication_s / asked.step_s:.0%}"), markup=False)
    out.print(_("efficiency: samples/s over (nodes x one node's samples/s at the smallest count), a ratio of two "
                "predictions of the same model, whose shared bias cancels; llm-foundry's FSDP runs on 2-16 nodes "
                "over InfiniBand scale near-linearly, as the model predicts (docs/calibration.md)"), markup=False)


def _stops_line(scaled: Scaling) -> str:
    from gpufly.estimate.parallel import MAX_NODES

    if scaled.stops_at is None:
        last = scaled.points[-1] if scaled.points else None
        return _("adding nodes keeps paying up to {nodes} nodes (efficiency {eff}; each added node brings at least "
                 "{share} of a node's throughput)").format(nodes=last.nodes if last else MAX_NODES,
                                                           eff=f"{last.efficiency:.0%}" if last else MISSING,
                                                           share=f"{scaled.threshold:.0%}")
    point = scaled.point(scaled.stops_at)
    before = max((p for p in scaled.points if p.nodes < scaled.stops_at), key=lambda p: p.nodes)
    said = _("adding nodes stops paying at {nodes} nodes: going from {before} to {nodes} changes samples/s by "
             "{gain} per added node, under {share} of what a node brought at {first} ({base}; efficiency {eff})")
    return said.format(
        nodes=scaled.stops_at, before=before.nodes, first=scaled.points[0].nodes,
        gain=f"{((point.samples_s if point else 0.0) - before.samples_s) / (scaled.stops_at - before.nodes):+,.2f}",
        share=f"{scaled.threshold:.0%}", base=_number(scaled.points[0].samples_s / scaled.points[0].nodes),
        eff=f"{point.efficiency:.0%}" if point else MISSING)


def _render_catalog(job: Job, fits: list[Fit], solved: list[dict[str, int | None]], out: Console) -> None:
    table = Table(title=_("Across the catalog: {fitting} of {count} GPUs fit").format(
        fitting=sum(f.fits for f in fits), count=len(fits)), box=box.SIMPLE_HEAD, title_justify="left")
    limits = list(solved[0]) if solved else []
    columns = ("GPU", _("VRAM"), _("needs"), _("free"), _("speed"), *(_limit_words(key)[1] for key in limits))
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    for verdict, found in zip(fits, solved, strict=True):
        value = (verdict.speed.decode_tok_s if not job.training else
                 verdict.speed.train_tokens_s or verdict.speed.train_samples_s)
        unit = "tok/s" if not job.training else ("tokens/s" if verdict.speed.train_tokens_s else "samples/s")
        table.add_row(verdict.gpu.name, f"{verdict.gpu.vram_gib:g}", _gib(verdict.memory.total_bytes),
                      _gib(verdict.free_bytes), _rate(value, unit) if verdict.fits else _("does not fit"),
                      *(f"{found[key]:,}" if found[key] else _("none") for key in limits),
                      style=None if verdict.fits else "dim")
    out.print(table)
    if fits and not any(f.fits for f in fits):
        out.print(_("no single GPU in the catalog fits this job; `gpufly recommend MODEL` (with the same options) "
                    "ranks 2, 4 and 8 GPUs, or give --gpu NxNAME"), markup=False)


def _machine_gpus() -> list[GpuChoice]:
    from gpufly.estimate.advise import GpuChoice
    from gpufly.report.machine import probe_machine

    return [GpuChoice(spec, count) for spec, count in probe_machine().gpu_types()]


def _calibrated(targets: list[GpuChoice], results: Path, catalog: Catalog) -> tuple[list[GpuChoice], list[str]]:
    """The target GPUs with measured ceilings from a bench run; without --gpu, the run's own GPU."""
    from gpufly.bench.results import load_run
    from gpufly.estimate.advise import GpuChoice
    from gpufly.estimate.calibrate import calibrated_gpu

    run = load_run(results)
    if not targets:
        if not run.device.catalog_id:
            raise GpuflyError(f"the bench results are for '{run.device.name}', which the catalog lacks",
                              hint="give --gpu NAME")
        targets = [GpuChoice(catalog.get(run.device.catalog_id), 1)]
    calibrated, notes = [], []
    for target in targets:
        spec, changed = calibrated_gpu(target.spec, run)
        calibrated.append(GpuChoice(spec, target.count, target.assumed))
        notes += changed
    return calibrated, notes


def _catalog_view(spec: ModelSpec, base: Job, catalog: Catalog, solve: dict[str, bool], json_out: bool,
                  out: Console) -> None:
    """No catalog GPU on this machine: the verdict on every catalog GPU, with the solved limits as columns."""
    from gpufly.estimate.advise import fit as fit_one

    verdicts = sorted((fit_one(spec, g, base) for g in catalog if g.vram_gib), key=lambda f: -f.free_bytes)
    solved = [_solve(spec, verdict.gpu, base, solve) for verdict in verdicts]
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "model": spec.to_dict(), "job": base.to_dict(),
                    "gpus_on_this_machine": 0,
                    "catalog": [{**v.to_dict(), **limits, **_range_fields(_solve_ranges(spec, v.gpu, base, limits))}
                                for v, limits in zip(verdicts, solved, strict=True)]})
        return
    out.print(_describe(spec, base))
    out.print(_("no NVIDIA GPU from the catalog on this machine: the verdict across the catalog "
                "(give --gpu NAME for one card)"))
    _render_catalog(base, verdicts, solved, out)


LIMITS = {"max_ctx": "context", "max_batch": "batch"}
"""What --max-ctx and --max-batch solve for: the Job field."""


def _limit_words(key: str) -> tuple[str, str]:
    """A solved limit's words in a sentence and in a column, in the reader's language."""
    return {"max_ctx": (_("longest context"), _("max ctx")), "max_batch": (_("largest batch"), _("max batch"))}[key]


def _solve(spec: ModelSpec, gpu: GpuSpec, job: Job, solve: dict[str, bool]) -> dict[str, int | None]:
    """The largest context and/or batch that fits ``gpu``, for the flags set in ``solve``."""
    from gpufly.estimate.advise import largest

    return {key: largest(spec, gpu, job, LIMITS[key], _upper(spec, key)) for key, wanted in solve.items() if wanted}


def _upper(spec: ModelSpec, key: str) -> int:
    return spec.max_context or 1_048_576 if key == "max_ctx" else 65_536


def _solve_ranges(spec: ModelSpec, gpu: GpuSpec, job: Job,
                  solved: dict[str, int | None]) -> dict[str, tuple[int | None, int | None]]:
    """Each solved limit's 80% range, from the memory estimate's: the limit were the memory at the high end of its
    range, and at the low end."""
    from gpufly.estimate.advise import largest_range

    return {key: largest_range(spec, gpu, job, LIMITS[key], _upper(spec, key))
            for key, value in solved.items() if value is not None}


def fit(
    model: Annotated[str, typer.Argument(help="Preset name, config.json or folder, .gguf file, or module:function.")],
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU name, or COUNTxNAME (2xH100). Default: this machine's.")
    ] = None,
    task: Task = "infer", quant: Quant = None, ctx: Ctx = None, batch: Batch = 1, kv: Kv = "fp16",
    engine: EngineOpt = None, optimizer: Optimizer = "adamw", zero: Zero = 0,
    checkpointing: Checkpointing = None, lora_rank: LoraRank = None, lora_targets: LoraTargets = None,
    fsdp: Fsdp = None, fp32: Fp32 = False, gpu_memory_utilization: GpuMemory = None,
    nodes: Nodes = 1, link: Link = None, internode: InternodeOpt = None, nics: Nics = None, tp: Tp = 1, pp: Pp = 1,
    microbatches: Microbatches = None, global_batch: GlobalBatch = None, precision: Precision = None,
    checkpointing_mode: CheckpointingMode = None, attention: Attention = None,
    optimizer_in_backward: OptimizerInBackward = False, offload: Offload = None, cuda_context: CudaContext = None,
    loss: Loss = None, prompt: Prompt = None,
    max_ctx: Annotated[bool, typer.Option("--max-ctx", help="Solve for the longest context that fits.")] = False,
    max_batch: Annotated[bool, typer.Option("--max-batch", help="Solve for the largest batch that fits.")] = False,
    exact: Annotated[bool, typer.Option("--exact", help="Count parameters on the meta device (transformers).")] = False,
    calibrate: Annotated[Path | None, typer.Option("--calibrate", metavar="RESULTS",
                                                   help="Predict from `gpufly bench --save` results.")] = None,
    json_out: Json = False, lang: Lang = None,
) -> None:
    """Will MODEL fit on a GPU for this job? Memory breakdown, predicted speed, and what would make it fit.

    Examples:
      gpufly fit llama-3.1-8b --gpu 4090
      gpufly fit qwen2.5-7b --gpu 4090 --task qlora --max-batch --lang zh
      gpufly fit qwen2.5-7b --gpu 4xA100-PCIe-80GB --engine vllm --link pcie --ctx 8192 --prompt 6144 --json
      gpufly fit llama-3.1-70b --task full --gpu 8xH100 --nodes 4 --tp 8 --pp 4 --global-batch 512
    """
    choose_language(lang, json_out)
    from gpufly.catalog import default_catalog
    from gpufly.estimate.advise import changes, parse_gpu
    from gpufly.estimate.advise import fit as fit_one

    catalog = default_catalog()
    targets = [parse_gpu(gpu, catalog)] if gpu else _machine_gpus()
    calibration: list[str] = []
    if calibrate is not None:
        targets, calibration = _calibrated(targets, calibrate, catalog)
    spec = _load(model, exact)  # a model that cannot be read is the one line said: no note on the GPU before it
    for target in targets:
        if target.assumed:
            print_note(target.assumed)
    vram = targets[0].spec.vram_gib if targets else None
    serving = engine if task == "infer" else None  # an engine's context default applies to inference alone
    base = Job.from_options(spec, task=task, quant=quant, context=_context(spec, ctx, serving, vram), batch=batch,
                            kv_format=kv,
                            engine=engine, optimizer=optimizer, zero=zero, checkpointing=checkpointing,
                            lora_rank=lora_rank, fp32=fp32, lora_targets=lora_targets, fsdp=fsdp,
                            gpu_memory_utilization=gpu_memory_utilization,
                            gpus=targets[0].count if targets else 1, nodes=nodes, link=link,
                            internode=internode, nics=nics, tensor_parallel=tp, pipeline_parallel=pp,
                            microbatches=microbatches, global_batch=global_batch, precision=precision,
                            checkpointing_mode=checkpointing_mode, attention=attention,
                            optimizer_in_backward=optimizer_in_backward, offload=offload,
                            cuda_context_gib=cuda_context, prompt=prompt, loss=loss, note=print_note)
    out = console()
    solve = {"max_ctx": max_ctx, "max_batch": max_batch}
    if not targets:
        _catalog_view(spec, base, catalog, solve, json_out, out)
        return
    results = []
    narrowed: list[dict[str, dict[str, float]]] = []
    scalings: list[Scaling | None] = []
    solved_ranges: list[dict[str, tuple[int | None, int | None]]] = []
    for target in targets:
        job = base.with_(gpus=target.count)
        verdict = fit_one(spec, target.spec, job, calibrated=calibrate is not None)
        solved = _solve(spec, target.spec, job, solve)
        results.append((target, verdict, changes(verdict), solved))
        solved_ranges.append(_solve_ranges(spec, target.spec, job, solved))
        scalings.append(_scaling(spec, verdict))
        if calibrate is not None:
            narrowed.append(_narrowing(verdict, fit_one(spec, catalog.get(target.spec.id), job)))
    solving = any(solve.values())
    answered = all(value is not None for *_rest, solved in results for value in solved.values())
    ok = answered if solving else all(verdict.fits for _target, verdict, *_rest in results)
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "model": spec.to_dict(), "job": base.to_dict(),
                    "results": [{**solved, **_range_fields(solved_ranges[i]), **v.to_dict(),
                                 "assumed": target.assumed,
                                 "changes": [c.to_dict() for c in ch],
                                 "scaling": scaled.to_dict(v.training_band) if (scaled := scalings[i]) else None,
                                 "links": _links(v),
                                 **({"calibration": narrowed[i]} if narrowed else {})}
                                for i, (target, v, ch, solved) in enumerate(results)]})
    else:
        for note in calibration:
            out.print(_("calibrated: {note}").format(note=note))
        for i, (_target, verdict, found_changes, solved) in enumerate(results):
            _render_result(spec, verdict, found_changes, solved, out, solved_ranges[i])
            scaled = scalings[i]
            if scaled is not None and scaled.points:
                _render_scaling(verdict, scaled, out)
            for line in _narrowing_lines(narrowed[i] if narrowed else {}):
                out.print(line, markup=False)
    if not ok:
        raise typer.Exit(1)


def _links(verdict: Fit) -> dict[str, object] | None:
    """The links a job on several GPUs runs over (estimate/comms.py), for --json."""
    from gpufly.estimate.comms import topology

    return topology(verdict.gpu, verdict.job)[0].to_dict() if verdict.job.world > 1 else None


def _scaling(spec: ModelSpec, verdict: Fit) -> Scaling | None:
    """For training across nodes, throughput over node counts and where adding nodes stops paying."""
    from gpufly.estimate.parallel import scaling

    if not verdict.job.training or verdict.job.nodes == 1:
        return None
    return scaling(spec, verdict.gpu, verdict.job)


def _narrowing(calibrated: Fit, datasheet: Fit) -> dict[str, dict[str, float]]:
    """Per predicted speed: its range from the datasheet and from the measured card, and how much narrower (in log
    width, so 0.3 means the high/low ratio's logarithm shrank by 30%)."""
    found = {}
    for name, measured in calibrated.speed_ranges.items():
        paper = datasheet.speed_ranges.get(name)
        if paper is None or paper.low <= 0 or measured.low <= 0:
            continue
        width = math.log(paper.high / paper.low)
        found[name] = {"datasheet_low": paper.low, "datasheet_high": paper.high, "low": measured.low,
                       "high": measured.high,
                       "narrower_by": 1 - math.log(measured.high / measured.low) / width if width else 0.0}
    return found


NARROWED_UNITS = {"decode_tok_s": "tok/s", "prefill_tok_s": "tok/s", "time_to_first_token_s": "s",
                  "train_tokens_s": "tokens/s", "train_samples_s": "samples/s"}


def _narrowed_label(name: str) -> str:
    return {"decode_tok_s": _("decode"), "prefill_tok_s": _("prefill"), "time_to_first_token_s": _("first token"),
            "train_tokens_s": _("training"), "train_samples_s": _("training")}[name]


def _narrowing_lines(narrowed: dict[str, dict[str, float]]) -> list[str]:
    return [_("calibrated range: {what} {low}-{high} {unit} (datasheet {paper_low}-{paper_high}): {narrower} "
              "narrower").format(what=_narrowed_label(name), low=_number(n["low"]), high=_number(n["high"]),
                                 unit=NARROWED_UNITS[name], paper_low=_number(n["datasheet_low"]),
                                 paper_high=_number(n["datasheet_high"]), narrower=f"{n['narrower_by']:.0%}")
            for name, n in narrowed.items()]


def _range_fields(ranges: dict[str, tuple[int | None, int | None]]) -> dict[str, dict[str, float | None]]:
    """--json's ``max_ctx_range``/``max_batch_range``: the solved limit's 80% range."""
    from gpufly.estimate.ranges import COVERAGE

    return {f"{key}_range": {"low": low, "high": high, "coverage": COVERAGE} for key, (low, high) in ranges.items()}


def _range_words(bounds: tuple[int | None, int | None] | None) -> str:
    if bounds is None:
        return ""
    low, high = bounds
    return _(" ({low}-{high}, 80% range: the memory estimate's)").format(
        low=f"{low:,}" if low is not None else _("none"), high=f"{high:,}" if high is not None else "?")


def _render_result(spec: ModelSpec, verdict: Fit, found_changes: list[Change], solved: dict[str, int | None],
                   out: Console, ranges: dict[str, tuple[int | None, int | None]] | None = None) -> None:
    """One target's answer: what --max-ctx/--max-batch solved for first (with its range), then the verdict at the
    given job."""
    where = f"{verdict.job.gpus}x {verdict.gpu.name}" if verdict.job.gpus > 1 else verdict.gpu.name
    for key, value in solved.items():
        field, label = LIMITS[key], _limit_words(key)[0]
        if value is None:
            out.print(_("{limit} on {where}: none fits, even at 1").format(limit=label, where=where), style="bold red")
            continue
        ceiling = _(" (the model's maximum, max_position_embeddings)") if (
            field == "context" and value == spec.max_context) else ""
        out.print(_("{limit} that fits on {where}: {value}{ceiling}").format(
            limit=label, where=where, value=f"{value:,}" + _range_words((ranges or {}).get(key)), ceiling=ceiling),
            style="bold green")
    if solved:
        shown = ", ".join(f"--{LIMITS[key].replace('context', 'ctx')} {getattr(verdict.job, LIMITS[key]):,}"
                          for key in solved)
        out.print(_("at the given {options}:").format(options=shown))
    out.print(_describe(spec, verdict.job))
    render_fit(verdict, found_changes, out)


def recommend(
    model: Annotated[str, typer.Argument(help="Preset name, config.json or folder, .gguf file, or module:function.")],
    task: Task = "infer", quant: Quant = None, ctx: Ctx = None, batch: Batch = 1, kv: Kv = "fp16",
    engine: EngineOpt = None, optimizer: Optimizer = "adamw", checkpointing: Checkpointing = None,
    lora_rank: LoraRank = None, lora_targets: LoraTargets = None, fp32: Fp32 = False,
    gpu_memory_utilization: GpuMemory = None, nodes: Nodes = 1, internode: InternodeOpt = None, nics: Nics = None,
    precision: Precision = None, checkpointing_mode: CheckpointingMode = None, attention: Attention = None,
    optimizer_in_backward: OptimizerInBackward = False, offload: Offload = None, cuda_context: CudaContext = None,
    loss: Loss = None, prompt: Prompt = None,
    budget: Annotated[
        float | None, typer.Option("--budget", metavar="USD", help="Most to spend (launch prices).")
    ] = None,
    max_gpus: Annotated[int, typer.Option("--max-gpus", help="At most this many GPUs (1, 2, 4, 8).")] = 8,
    prefer: Annotated[str, typer.Option("--prefer", help="Rank by speed, cost or power.")] = "speed",
    top: Annotated[int, typer.Option("--top", help="Show this many.")] = 15,
    json_out: Json = False, lang: Lang = None,
) -> None:
    """Rank catalog GPUs (and how many of each) that fit MODEL for this job.

    Examples:
      gpufly recommend llama-3.1-8b
      gpufly recommend llama-3.1-70b --quant int4 --budget 5000
      gpufly recommend qwen2.5-7b --task lora --prefer cost --top 5 --lang zh
      gpufly recommend llama-3.1-70b --task full --nodes 4 --internode ib-ndr
    """
    from gpufly.catalog import default_catalog
    from gpufly.estimate.advise import recommend as rank

    choose_language(lang, json_out)

    if top < 1:
        raise GpuflyError(f"--top must be at least 1, got {top}", hint="e.g. --top 10")
    if budget is not None and not math.isfinite(budget):
        raise GpuflyError(f"--budget must be a number of dollars, got {budget}", hint="e.g. --budget 5000")
    spec = _load(model)
    serving = engine if task == "infer" else None  # an engine's context default applies to inference alone
    job = Job.from_options(spec, task=task, quant=quant, context=_context(spec, ctx, serving), batch=batch,
                           kv_format=kv,
                           engine=engine, optimizer=optimizer, checkpointing=checkpointing, lora_rank=lora_rank,
                           fp32=fp32, lora_targets=lora_targets, gpu_memory_utilization=gpu_memory_utilization,
                           nodes=nodes, internode=internode, nics=nics, precision=precision,
                           checkpointing_mode=checkpointing_mode, attention=attention,
                           optimizer_in_backward=optimizer_in_backward, offload=offload, cuda_context_gib=cuda_context,
                           prompt=prompt, loss=loss, note=print_note)
    ranking = rank(spec, job, default_catalog(), budget_usd=budget, max_gpus=max_gpus, prefer=prefer)
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "model": spec.to_dict(), "job": job.to_dict(),
                    "budget_usd": budget, **ranking.to_dict(top)})
        return
    out = console()
    out.print(_describe(spec, job))
    if not ranking.picks:
        nothing = (_("no GPU in the catalog fits this job within the budget with up to {count} GPUs") if budget
                   else _("no GPU in the catalog fits this job with up to {count} GPUs"))
        out.print(nothing.format(count=max_gpus))
        return
    _render_ranking(ranking, budget, top, out)


HEADLINE_RANGES = {"tok/s (decode)": "decode_tok_s", "tokens/s (train)": "train_tokens_s",
                   "samples/s (train)": "train_samples_s"}
"""The ``speed_ranges`` key of each ranking unit (estimate.advise.headline)."""


def _headline_range(pick: Pick) -> Estimate | None:
    return pick.fit.speed_ranges.get(HEADLINE_RANGES.get(pick.unit, ""))


def _render_ranking(ranking: Ranking, budget: float | None, top: int, out: Console) -> None:
    preference = {"speed": _("speed"), "cost": _("cost"), "power": _("power")}.get(ranking.prefer, ranking.prefer)
    title = (_("Best GPUs, by {preference}, within {budget}") if budget else _("Best GPUs, by {preference}")).format(
        preference=preference, budget=f"${budget or 0:,.0f}")
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    columns = ("#", _("tie"), _("GPUs"), _("per-GPU GiB"), _("speed"), _("price"), _("per $1k"), _("per kW"))
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 2 else "right")
    for index, pick in enumerate(ranking.picks[:top]):
        count = pick.fit.job.gpus
        group = ranking.tie_group(index)
        table.add_row(str(index + 1), f"={group}" if group else "",
                      (f"{count}x {pick.fit.gpu.name}" if count > 1 else pick.fit.gpu.name)
                      + (_(" x {nodes} nodes").format(nodes=pick.fit.job.nodes) if pick.fit.job.nodes > 1 else ""),
                      f"{_gib_ranged(pick.fit)} / {pick.fit.gpu.vram_gib:g}"
                      + (_(" (tight)") if pick.fit.tight else ""),
                      _rate(pick.throughput, pick.unit.split()[0], _headline_range(pick)),
                      f"${pick.price_usd:,.0f}" if pick.price_usd else MISSING,
                      f"{pick.per_dollar * 1000:,.1f}" if pick.per_dollar else MISSING,
                      f"{pick.per_watt * 1000:,.0f}" if pick.per_watt else MISSING)
    out.print(table)
    for number, (start, end) in enumerate(ranking.groups, 1):
        if start >= top:
            break
        out.print(_("tie ={group}: setups {first}-{last} ({count}) have predictions whose +-{error} bands (the "
                    "calibrated median error) overlap the first's: ordered by {order}").format(
                        group=number, first=start + 1, last=end, count=end - start, error=f"{ranking.error:.0%}",
                        order=_("price, then power, then memory headroom")), markup=False)
    if any(pick.fit.tight for pick in ranking.picks[:top]):
        out.print(_("(tight): fits with less room than the memory estimate's median error; a real run may not fit"))
    if ranking.engine_limit:
        out.print(_("note: {note}").format(note=ranking.engine_limit), markup=False)
    for assumption in ranking.assumed:
        out.print(_("note: {note}").format(note=assumption), markup=False)
    out.print(_("Prices are launch MSRPs where the vendor published one; data-center GPUs have none."))


def models(json_out: Json = False, lang: Lang = None) -> None:
    """List the preset models.

    Examples:
      gpufly models
      gpufly models --json
    """
    from gpufly.models.presets import presets

    choose_language(lang, json_out)

    found = presets()
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "presets": list(found.values())})
        return
    table = Table(title=ngettext("{count} preset model", "{count} preset models", len(found)).format(
        count=len(found)), box=box.SIMPLE_HEAD, title_justify="left")
    for index, column in enumerate(("id", _("name"), _("kind"), _("params"))):
        table.add_column(column, justify="right" if index == 3 else "left")
    for preset in found.values():
        params = preset.get("published_params")
        shown = f"{params / 1e9:.2f} B" if params else MISSING
        table.add_row(preset["id"], preset["name"], preset.get("kind", ""), shown)
    console().print(table)
