"""The advisor: does a job fit on a GPU, what would make it fit, and which GPUs to buy or rent."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufly.catalog.lookup import Catalog
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.checks import (
    check_job,
    check_nodes,
    check_request,
    context_note,
    device_spec,
    splits_tensors,
    tensor_parallel_ok,
)
from gpufly.estimate.engines import (
    GIB,
    LLAMA_CPP_KV_LADDER,
    SPEED_MEDIAN_ERROR,
    UNCALIBRATED_SPEED_ERROR,
    VRAM_MEDIAN_ERROR,
    Engine,
    engine,
)
from gpufly.estimate.formats import GGUF_LADDER, kv_bytes, kv_key, weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import MemoryBreakdown, lora_adapter_params, memory
from gpufly.estimate.ranges import Estimate, memory_estimate, speed_estimates
from gpufly.estimate.speed import HOST_BOUND, Speed, speed
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec

GPU_COUNTS = (1, 2, 4, 8)
_COUNT = re.compile(r"^\s*(\d+)\s*[x\u00d7*]\s*(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class GpuChoice:
    """What ``--gpu`` named: the catalog GPU, how many, and what was assumed when the name covered variants."""

    spec: GpuSpec
    count: int
    assumed: str | None = None


def parse_gpu(text: str, catalog: Catalog) -> GpuChoice:
    """'H100', '2xH100' or '4 x rtx 4090' -> the GPU (through ``Catalog.resolve``, which says what it assumed for
    a name that covers several variants), and the count."""
    match = _COUNT.match(text)
    count, name = (int(match.group(1)), match.group(2)) if match else (1, text)
    if count <= 0:
        raise GpuflyError(f"GPU count must be at least 1 in '{text}'", hint="e.g. --gpu 2xH100")
    resolution = catalog.resolve(name)
    return GpuChoice(resolution.spec, count, resolution.assumed)


@dataclass(frozen=True)
class Fit:
    """The verdict for one model, job and GPU (``job.gpus`` of them).

    ``gpu`` is the device the software sees (one die of a multi-die card, ``card`` the catalog entry); ``speed`` is
    the prediction as if the job ran: shown as speed only when it fits, else as the speed it would have if it fit.
    ``notes`` are what a real run would accept with a caveat (a context past the trained length, a die).
    ``memory_range`` and ``speed_ranges`` are the 80% ranges of the memory total and of each predicted speed
    (estimate/ranges.py); like the speed, the speed ranges of a job that does not fit are what it would be if it fit.
    """

    model: ModelSpec
    gpu: GpuSpec
    job: Job
    memory: MemoryBreakdown
    speed: Speed
    card: GpuSpec
    notes: tuple[str, ...] = ()
    memory_range: Estimate | None = None
    speed_ranges: dict[str, Estimate] = field(default_factory=dict)

    @property
    def capacity_bytes(self) -> int:
        """Memory the job may use on each GPU: vLLM its gpu_memory_utilization share, SGLang and MLC LLM their
        documented shares; TensorRT-LLM gives its KV cache kv_free_fraction of what the rest leaves, so the KV
        cache must fit in that share of the free memory."""
        vram = self.gpu.vram_gib * GIB
        if self.job.training:
            return int(vram)
        runtime = engine(self.job.engine)
        share = self.job.gpu_memory_utilization if runtime.name == "vllm" else runtime.memory_share
        if runtime.kv_free_fraction:
            rest = self.memory.total_bytes - self.memory.get("kv_cache")
            return int(vram - (1 - runtime.kv_free_fraction) * max(0.0, vram - rest))
        if runtime.share_holds_weights_and_kv:  # weights + KV within the share, the rest of the job in the rest
            outside = self.memory.total_bytes - self.memory.get("weights") - self.memory.get("kv_cache")
            return int(min(vram, vram * share + outside))
        return int(vram * share)

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.memory.total_bytes

    @property
    def fits(self) -> bool:
        return self.free_bytes >= 0

    @property
    def training_band(self) -> tuple[float, float]:
        """The training-speed 80% range as ratios to its value ((1, 1) where there is none): what a scaling over
        nodes of the same job carries."""
        for name in ("train_samples_s", "train_tokens_s"):
            band = self.speed_ranges.get(name)
            if band is not None and band.value:
                return band.low / band.value, band.high / band.value
        return 1.0, 1.0

    @property
    def tight(self) -> bool:
        """Fits with less room than the memory estimate's own median error: a real run may not."""
        return self.fits and self.free_bytes < VRAM_MEDIAN_ERROR * self.memory.total_bytes

    @property
    def verdict(self) -> str:
        gib = abs(self.free_bytes) / GIB
        where = f"{self.job.gpus}x {self.gpu.name}" if self.job.gpus > 1 else self.gpu.name
        if self.job.nodes > 1:
            where = _("{nodes} nodes of {where}").format(nodes=self.job.nodes, where=where)
        if self.tight:
            return _("fits on {where} with only {free} GiB free per GPU: within the memory estimate's error (median "
                     "{error}), so a real run may not fit").format(where=where, free=f"{gib:.2f}",
                                                                   error=f"{VRAM_MEDIAN_ERROR:.1%}")
        if self.fits:
            return _("fits on {where}, with {free} GiB free per GPU").format(where=where, free=f"{gib:.1f}")
        return _("does not fit on {where}: short by {short} GiB per GPU").format(where=where, short=f"{gib:.1f}")

    def to_dict(self) -> dict[str, Any]:
        predicted = self.speed.to_dict()
        ranges = {name: e.to_dict() for name, e in self.speed_ranges.items()}
        return {"gpu": self.gpu.id, "gpu_name": self.gpu.name, "gpus": self.job.gpus, "nodes": self.job.nodes,
                "fits": self.fits,
                "tight": self.tight, "verdict": self.verdict, "capacity_bytes": self.capacity_bytes,
                "free_bytes": self.free_bytes, "memory": self.memory.to_dict(),
                "memory_range": self.memory_range.to_dict() if self.memory_range else None,
                "speed": predicted if self.fits else None, "speed_if_it_fit": None if self.fits else predicted,
                "speed_ranges": ranges if self.fits else None,
                "speed_ranges_if_it_fit": None if self.fits else ranges,
                "notes": list(self.notes)}


def fit(model: ModelSpec, gpu: GpuSpec, job: Job, calibrated: bool = False) -> Fit:
    """The verdict for ``job`` on ``job.gpus`` devices of ``gpu`` (a multi-die card's dies each count as one):
    memory per device (bytes) and predicted speed. ``calibrated``: ``gpu`` holds a bench run's measured ceilings
    (estimate/calibrate.py), which narrows the speed ranges. Raises GpuflyError for what a real run would refuse."""
    notes = check_job(model, gpu, job)
    device = device_spec(gpu)
    linked = job
    if job.world > 1:
        from gpufly.estimate.comms import default_link, topology

        notes += topology(device, job)[1]
        if not job.link:  # NCCL's buffers follow the link the speed assumes (the GPU's default), not PCIe
            linked = job.with_(link=default_link(device))
    if job.training and gpu.vendor == "apple":
        notes += (_("on Apple silicon PyTorch runs on MPS: there is no CUDA context and no NCCL; the runtime item "
                    "(and, across machines, the nccl one) stands in with the CUDA figures, not measured on a Mac"),)
    needed, predicted = memory(model, linked), speed(model, device, job)
    return Fit(model, device, job, needed, predicted, card=gpu, notes=notes,
               memory_range=memory_estimate(model, device, job, needed.total_bytes),
               speed_ranges=speed_estimates(model, device, job, predicted, calibrated))


def _fit_or_none(model: ModelSpec, gpu: GpuSpec, job: Job) -> Fit | None:
    """The verdict for a change gpufly tries, or None where a real run would refuse it (llama.cpp across nodes)."""
    try:
        return fit(model, gpu, job)
    except GpuflyError:
        return None


def _resized(job: Job, count: int, **changes: Any) -> Job | None:
    """``job`` on ``count`` GPUs per node, or None where its --tp/--pp layout does not divide them."""
    try:
        return job.with_(gpus=count, **changes)
    except GpuflyError:
        return None


def _runs(model: ModelSpec, job: Job) -> bool:
    """Whether the engine would start the job at all (a tensor-parallel size the heads divide)."""
    return not splits_tensors(job) or tensor_parallel_ok(model, job.gpus)


@dataclass(frozen=True)
class Change:
    """One change to the job, and what it does to memory."""

    description: str
    fit: Fit

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.description, "fits": self.fit.fits,
                "per_gpu_total_bytes": self.fit.memory.total_bytes, "free_bytes": self.fit.free_bytes,
                "memory_range": self.fit.memory_range.to_dict() if self.fit.memory_range else None}


def largest(model: ModelSpec, gpu: GpuSpec, job: Job, field: str, upper: int, bound: str = "") -> int | None:
    """The largest value of ``field`` (context or batch) in 1..upper that still fits, by bisection
    (memory grows monotonically with both); None when even 1 does not. ``bound`` "low" or "high": were the memory
    at that end of its 80% range (the answer's own range: the high end gives the smaller value)."""
    def ok(value: int) -> bool:
        verdict = fit(model, gpu, job.with_(**{field: value}))
        band = verdict.memory_range
        if not bound or band is None or not band.value:
            return verdict.fits
        scale = (band.high if bound == "high" else band.low) / band.value
        return verdict.capacity_bytes >= verdict.memory.total_bytes * scale

    if not ok(1):
        return None
    low, high = 1, upper
    if ok(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if ok(middle) else (low, middle)
    return low


def largest_range(model: ModelSpec, gpu: GpuSpec, job: Job, field: str, upper: int) -> tuple[int | None, int | None]:
    """The 80% range of ``largest``: the largest value that fits were the memory at the high end of its range, and
    at the low end."""
    return (largest(model, gpu, job, field, upper, bound="high"), largest(model, gpu, job, field, upper, bound="low"))


def _is_llm(model: ModelSpec) -> bool:
    return model.kind == "decoder" and model.is_transformer


def _inference_changes(model: ModelSpec, job: Job, gpu: GpuSpec) -> Iterable[tuple[str, Job]]:
    """Smaller weights and, for LLMs, a smaller KV cache, in formats the job's engine runs: GGUF types
    for llama.cpp, fp8/int8/int4 elsewhere (int4 and the move to llama.cpp for transformer models only)."""
    runtime = engine(job.engine)
    if runtime.family == "llama.cpp":
        yield from _gguf_changes(model, job)
    else:
        order = ["fp8", "int8", "int4"] if gpu.fp8_tensor_tflops else ["int8", "int4"]
        for quant in order:
            if not runtime.runs(weight_format(quant)):
                continue
            if quant != job.quant and (quant != "int4" or model.is_transformer):
                yield f"--quant {quant}", job.with_(quant=quant)
    if not _is_llm(model):
        return
    if runtime.family != "llama.cpp":
        llama = engine("llama.cpp")
        kv = job.kv_format if kv_key(job.kv_format) in llama.kv_formats else "fp16"
        yield "--engine llama.cpp --quant q4_k_m", job.with_(
            engine="llama.cpp", quant="q4_k_m", kv_format=kv, flash_attention=llama.flash_attention_default,
            sdpa=False)
    yield from _kv_changes(runtime, job)


def _gguf_changes(model: ModelSpec, job: Job) -> Iterable[tuple[str, Job]]:
    """The GGUF types smaller than the current weights: llama.cpp has no fp8/int8/int4 weights."""
    if not model.is_transformer:
        return
    current = weight_format(job.quant).bits_per_weight
    for quant in GGUF_LADDER:
        if weight_format(quant).bits_per_weight < current:
            yield f"--quant {quant}", job.with_(quant=quant)


def _kv_changes(runtime: Engine, job: Job) -> Iterable[tuple[str, Job]]:
    """Smaller KV-cache formats the engine has: q8_0/q4_0 in llama.cpp (and ExLlamaV2's Q8/Q4 caches), fp8 in vLLM,
    none in transformers. llama.cpp and Ollama quantize the cache only with flash attention on: there the change
    turns it on too."""
    current = kv_bytes(kv_key(job.kv_format))
    ladder = LLAMA_CPP_KV_LADDER if runtime.family == "llama.cpp" or "q4_0" in runtime.kv_formats else ("fp8",)
    needs_flash = runtime.family == "llama.cpp" and not job.flash_attention
    for kv in ladder:
        if kv in runtime.kv_formats and kv_bytes(kv) < current:
            if needs_flash:
                yield f"--attention flash --kv {kv}", job.with_(kv_format=kv, flash_attention=True)
            else:
                yield f"--kv {kv}", job.with_(kv_format=kv)


def _training_changes(model: ModelSpec, job: Job) -> Iterable[tuple[str, Job]]:
    """Flash attention instead of eager, checkpointing, the full fine-tune's lighter recipes (pure bf16, the
    optimizer in backward, 8-bit states, states in host memory), LoRA/QLoRA where the model has layers to adapt,
    batch 1."""
    if job.attention == "eager":
        yield "--attention flash", job.with_(flash_attention=True, sdpa=False)
    if not job.checkpointing:
        yield "--checkpointing", job.with_(checkpointing=True)
    elif job.selective:
        yield "--checkpointing-mode full", job.with_(selective=False)
    adaptable = lora_adapter_params(model, job) > 0
    if job.task == "full":
        if adaptable:
            yield "--task lora", job.with_(task="lora")
        if job.precision == "mixed":
            yield "--precision bf16", job.with_(master_weights=False)
        if not job.optimizer_in_backward and not job.accumulates and job.pipeline_parallel == 1:
            yield "--optimizer-in-backward", job.with_(optimizer_in_backward=True)
        if job.optimizer == "adamw":
            yield "--optimizer adamw8bit", job.with_(optimizer="adamw8bit")
        if job.offload == "none":
            yield "--offload optimizer", job.with_(offload="optimizer")
    if job.loss != "fused" and model.kind == "decoder" and model.vocab:
        yield "--loss fused", job.with_(loss="fused")
    if job.task in ("full", "lora") and adaptable:
        yield "--task qlora --checkpointing", job.with_(task="qlora", checkpointing=True)
    if job.batch > 1:
        yield "--batch 1", job.with_(batch=1)


def _more_gpus(model: ModelSpec, job: Job, gpu: GpuSpec) -> Iterable[tuple[str, Job]]:
    """Tensor parallel for inference (at sizes the heads divide, where the engine splits tensors); for training
    ZeRO-3 (FSDP full_shard), which splits the weights: data parallelism alone keeps a whole copy on every GPU."""
    for count in GPU_COUNTS:
        if count > job.gpus:
            zero = {"zero": 3} if job.training else {}
            flag = " --zero 3" if zero and job.zero != 3 else ""
            changed = _resized(job, count, **zero)
            if changed is None:
                continue
            if _runs(model, changed):
                yield f"--gpu {count}x{gpu.id}{flag}", changed  # the catalog id: what --gpu reads back


def changes(current: Fit) -> list[Change]:
    """Changes that would make the job fit (or fit with more room), each with its new total.

    Only changes that lower the per-GPU total are kept. When none of them fits, the one closest to
    fitting (the smallest total) comes back alone, its ``fit.fits`` False, so the user learns how far
    the best single change still is.
    """
    model, gpu, job = current.model, current.card, current.job
    candidates = list(_training_changes(model, job) if job.training else _inference_changes(model, job, gpu))
    if not current.fits and job.context > 1 and model.is_transformer:
        best = largest(model, gpu, job, "context", job.context)
        if best is not None:
            candidates.append((f"--ctx {best}", job.with_(context=best)))
    candidates += _more_gpus(model, job, gpu)
    total = current.memory.total_bytes
    results = [Change(text, verdict) for text, changed in candidates
               if (verdict := _fit_or_none(model, gpu, changed)) is not None and verdict.memory.total_bytes < total]
    if current.fits:
        return results[:4]
    fitting = [change for change in results if change.fit.fits]
    if fitting or not results:
        return fitting
    return [min(results, key=lambda change: change.fit.memory.total_bytes)]


@dataclass(frozen=True)
class Pick:
    """One recommended configuration: a GPU, how many, and what it delivers."""

    fit: Fit
    price_usd: float | None
    throughput: float | None
    unit: str

    @property
    def watts(self) -> float | None:
        return self.fit.gpu.tdp_w * self.fit.job.world if self.fit.gpu.tdp_w else None

    @property
    def per_dollar(self) -> float | None:
        return self.throughput / self.price_usd if self.throughput and self.price_usd else None

    @property
    def per_watt(self) -> float | None:
        return self.throughput / self.watts if self.throughput and self.watts else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.fit.to_dict(), "price_usd": self.price_usd, "throughput": self.throughput,
                "unit": self.unit, "per_dollar": self.per_dollar, "per_watt": self.per_watt}


def headline(s: Speed, job: Job) -> tuple[float | None, str]:
    """The one number to rank by: decode tok/s for inference, training tokens or samples per second."""
    if not job.training:
        return s.decode_tok_s, "tok/s (decode)"
    if s.train_tokens_s is not None:
        return s.train_tokens_s, "tokens/s (train)"
    return s.train_samples_s, "samples/s (train)"


PREFERENCES: dict[str, Callable[[Pick], float]] = {
    "speed": lambda p: p.throughput or 0.0,
    "cost": lambda p: p.per_dollar or 0.0,
    "power": lambda p: p.per_watt or 0.0,
}
TIE_BREAK = "price, then power, then memory headroom"
"""The second key among setups the prediction cannot tell apart: cheaper, then less power, then more room."""


def _tie_key(pick: Pick) -> tuple[bool, float, bool, float, float, str]:
    """Cheaper first (unpriced last), then fewer watts (unknown last), then more free memory, then the name."""
    price, watts = pick.price_usd, pick.watts
    return (price is None, price or 0.0, watts is None, watts or 0.0, -pick.fit.free_bytes, pick.fit.gpu.name)


def speed_error(job: Job) -> float:
    """The relative error of a speed prediction for ``job``: the calibrated median for its engine."""
    if job.training:
        return SPEED_MEDIAN_ERROR["training"]
    runtime = engine(job.engine)
    return SPEED_MEDIAN_ERROR.get(runtime.family, UNCALIBRATED_SPEED_ERROR)


@dataclass(frozen=True)
class Ranking:
    """The fitting setups, best first, and what the ranking cannot tell: ``groups`` are runs of picks (start, end
    index, end excluded) whose predictions are within ``error`` of each other, ordered among themselves by
    TIE_BREAK; ``engine_limit`` says when the engine, not the GPU, sets every speed."""

    picks: list[Pick]
    prefer: str
    error: float
    groups: tuple[tuple[int, int], ...] = ()
    engine_limit: str | None = None
    assumed: tuple[str, ...] = ()
    """What the ranking assumed that the job did not say (ZeRO-3 for training on several GPUs)."""

    def tie_group(self, index: int) -> int | None:
        """The number (from 1) of the near-tie group the pick at ``index`` belongs to, or None."""
        return next((number for number, (start, end) in enumerate(self.groups, 1) if start <= index < end), None)

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        shown = self.picks[:top] if top else self.picks
        return {"prefer": self.prefer, "error": self.error, "tie_break": TIE_BREAK,
                "ties": [{"from": start + 1, "to": end, "count": end - start} for start, end in self.groups],
                "engine_limit": self.engine_limit, "assumed": list(self.assumed),
                "picks": [{**pick.to_dict(), "tie_group": self.tie_group(index)} for index, pick in enumerate(shown)]}


def _overlap(best: float, other: float, error: float) -> bool:
    """Whether two predictions' ranges of +-error overlap."""
    return other * (1 + error) >= best * (1 - error)


def _rank(picks: list[Pick], key: Callable[[Pick], float], error: float) -> tuple[list[Pick], list[tuple[int, int]]]:
    """Best first by ``key``; a run of picks within ``error`` of its first is one group, ordered by TIE_BREAK.
    Picks without a prediction come last, by TIE_BREAK too."""
    known = sorted((p for p in picks if key(p) > 0), key=key, reverse=True)
    ordered: list[Pick] = []
    groups: list[tuple[int, int]] = []
    while known:
        group = [p for p in known if _overlap(key(known[0]), key(p), error)]
        known = known[len(group):]
        if len(group) > 1:
            groups.append((len(ordered), len(ordered) + len(group)))
        ordered += sorted(group, key=_tie_key)
    ordered += sorted((p for p in picks if key(p) <= 0), key=_tie_key)
    return ordered, groups


def _engine_limit(job: Job, picks: list[Pick]) -> str | None:
    """A sentence when the fastest prediction waits on the host: no GPU can beat the engine's own floor, so the
    engine, not the GPU, sets the speed of every setup that reaches it."""
    fastest = max((p for p in picks if p.throughput), key=lambda p: p.throughput or 0.0, default=None)
    floored = [p for p in picks if p.fit.speed.bound == HOST_BOUND]
    if job.training or fastest is None or fastest.fit.speed.bound != HOST_BOUND or len(floored) < 2:
        return None
    runtime = engine(job.engine)
    gguf = weight_format(job.quant).engine_family == "gguf"
    better = "--engine llama.cpp" if gguf else "--engine vllm (or --engine llama.cpp --quant q4_k_m)"
    per_token_ms = 1e3 * job.batch / (fastest.throughput or 1.0)
    return _("{engine} is the limit, not the GPU: its eager decode launches each layer's kernels from the host, "
             "about {step} ms a step for this model whatever the GPU, so {count} setups predict the same {speed} "
             "tok/s; {better} would separate them").format(engine=runtime.display, step=f"{per_token_ms:.0f}",
                                                           count=len(floored), speed=f"{fastest.throughput:,.0f}",
                                                           better=better)


def recommend(model: ModelSpec, job: Job, catalog: Iterable[GpuSpec], budget_usd: float | None = None,
              max_gpus: int = 8, prefer: str = "speed") -> Ranking:
    """For each GPU, the fewest of it (1, 2, 4, 8 devices) that fit the job and that the engine would run;
    ranked by ``prefer``, near-ties (within the prediction's error) broken by TIE_BREAK."""
    if prefer not in PREFERENCES:
        raise GpuflyError(f"unknown preference '{prefer}'", hint="--prefer speed, cost or power")
    if budget_usd is not None and budget_usd <= 0:
        raise GpuflyError(f"--budget must be positive, got {budget_usd:g}", hint="e.g. --budget 5000")
    if max_gpus <= 0:
        raise GpuflyError(f"--max-gpus must be at least 1, got {max_gpus}",
                          hint=f"e.g. --max-gpus 8 (counts tried: {', '.join(map(str, GPU_COUNTS))})")
    check_nodes(job)
    check_request(model, job)  # a refusal of the job itself is the user's to hear, not one GPU's to skip
    context_note(model, job)
    picks: list[Pick] = []
    for gpu in catalog:
        for count in (c for c in GPU_COUNTS if c <= max_gpus):
            changed = _resized(job, count, zero=3 if job.training and count * job.nodes > 1 else job.zero)
            if changed is None or not _runs(model, changed):
                continue
            verdict = _fit_or_none(model, gpu, changed)  # None: the engine refuses this GPU (vLLM's bf16 on a V100)
            if verdict is None or not verdict.fits:
                continue
            price = verdict.gpu.launch_price_usd * changed.world if verdict.gpu.launch_price_usd else None
            if budget_usd is not None and (price is None or price > budget_usd):
                break
            throughput, unit = headline(verdict.speed, changed)
            picks.append(Pick(verdict, price, throughput, unit))
            break
    error = speed_error(job)
    ordered, groups = _rank(picks, PREFERENCES[prefer], error)
    assumed: tuple[str, ...] = ()
    if job.training and job.zero != 3 and any(pick.fit.job.world > 1 for pick in ordered):
        assumed = (_("setups of several GPUs shard weights, gradients and optimizer states with ZeRO-3 (FSDP "
                     "full_shard; --zero {zero} would keep more on every GPU): `gpufly fit` with the setup and "
                     "--zero gives the other stages").format(zero=job.zero),)
    return Ranking(ordered, prefer, error, tuple(groups), _engine_limit(job, ordered), assumed)
