"""The advisor: does a job fit on a GPU, what would make it fit, and which GPUs to buy or rent."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpufly.catalog.lookup import Catalog
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.engines import GIB, LLAMA_CPP_KV_LADDER, Engine, engine
from gpufly.estimate.formats import GGUF_LADDER, kv_bytes, kv_key, weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import MemoryBreakdown, lora_adapter_params, memory
from gpufly.estimate.speed import Speed, speed
from gpufly.models.spec import ModelSpec

GPU_COUNTS = (1, 2, 4, 8)
_COUNT = re.compile(r"^\s*(\d+)\s*[x\u00d7*]\s*(.+)$", re.IGNORECASE)


def parse_gpu(text: str, catalog: Catalog) -> tuple[GpuSpec, int]:
    """'H100', '2xH100' or '4 x rtx 4090' -> (spec, count)."""
    match = _COUNT.match(text)
    count, name = (int(match.group(1)), match.group(2)) if match else (1, text)
    if count <= 0:
        raise GpuflyError(f"GPU count must be at least 1 in '{text}'", hint="e.g. --gpu 2xH100")
    return catalog.get(name), count


@dataclass(frozen=True)
class Fit:
    """The verdict for one model, job and GPU (``job.gpus`` of them)."""

    model: ModelSpec
    gpu: GpuSpec
    job: Job
    memory: MemoryBreakdown
    speed: Speed

    @property
    def capacity_bytes(self) -> int:
        """Memory the job may use on each GPU (vLLM: its gpu_memory_utilization share)."""
        share = self.job.gpu_memory_utilization if self.job.engine == "vllm" and not self.job.training else 1.0
        return int(self.gpu.vram_gib * GIB * share)

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.memory.total_bytes

    @property
    def fits(self) -> bool:
        return self.free_bytes >= 0

    @property
    def verdict(self) -> str:
        gib = abs(self.free_bytes) / GIB
        where = f"{self.job.gpus}x {self.gpu.name}" if self.job.gpus > 1 else self.gpu.name
        if self.fits:
            return f"fits on {where}, with {gib:.1f} GiB free per GPU"
        return f"does not fit on {where}: short by {gib:.1f} GiB per GPU"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.id, "gpu_name": self.gpu.name, "gpus": self.job.gpus, "fits": self.fits,
                "verdict": self.verdict, "capacity_bytes": self.capacity_bytes, "free_bytes": self.free_bytes,
                "memory": self.memory.to_dict(), "speed": self.speed.to_dict()}


def fit(model: ModelSpec, gpu: GpuSpec, job: Job) -> Fit:
    """The verdict for ``job`` on ``job.gpus`` of ``gpu``: memory per GPU (bytes) and predicted speed."""
    return Fit(model, gpu, job, memory(model, job), speed(model, gpu, job))


@dataclass(frozen=True)
class Change:
    """One change to the job, and what it does to memory."""

    description: str
    fit: Fit

    def to_dict(self) -> dict[str, Any]:
        return {"change": self.description, "fits": self.fit.fits,
                "per_gpu_total_bytes": self.fit.memory.total_bytes, "free_bytes": self.fit.free_bytes}


def largest(model: ModelSpec, gpu: GpuSpec, job: Job, field: str, upper: int) -> int | None:
    """The largest value of ``field`` (context or batch) in 1..upper that still fits, by bisection
    (memory grows monotonically with both)."""
    def ok(value: int) -> bool:
        return fit(model, gpu, job.with_(**{field: value})).fits

    if not ok(1):
        return None
    low, high = 1, upper
    if ok(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if ok(middle) else (low, middle)
    return low


def _is_llm(model: ModelSpec) -> bool:
    return model.kind == "decoder" and model.is_transformer


def _inference_changes(model: ModelSpec, job: Job, gpu: GpuSpec) -> Iterable[tuple[str, Job]]:
    """Smaller weights and, for LLMs, a smaller KV cache, in formats the job's engine runs: GGUF types
    for llama.cpp, fp8/int8/int4 elsewhere (int4 and the move to llama.cpp for transformer models only)."""
    runtime = engine(job.engine)
    if runtime.name == "llama.cpp":
        yield from _gguf_changes(model, job)
    else:
        order = ["fp8", "int8", "int4"] if gpu.fp8_tensor_tflops else ["int8", "int4"]
        for quant in order:
            if quant != job.quant and (quant != "int4" or model.is_transformer):
                yield f"--quant {quant}", job.with_(quant=quant)
    if not _is_llm(model):
        return
    if runtime.name != "llama.cpp":
        yield "--engine llama.cpp --quant q4_k_m", job.with_(engine="llama.cpp", quant="q4_k_m")
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
    """Smaller KV-cache formats the engine has: q8_0/q4_0 in llama.cpp, fp8 in vLLM, none in transformers."""
    current = kv_bytes(kv_key(job.kv_format))
    ladder = LLAMA_CPP_KV_LADDER if runtime.name == "llama.cpp" else ("fp8",)
    for kv in ladder:
        if kv in runtime.kv_formats and kv_bytes(kv) < current:
            yield f"--kv {kv}", job.with_(kv_format=kv)


def _training_changes(model: ModelSpec, job: Job) -> Iterable[tuple[str, Job]]:
    """Checkpointing, a lighter optimizer, LoRA/QLoRA where the model has layers to adapt, batch 1."""
    if not job.checkpointing:
        yield "--checkpointing", job.with_(checkpointing=True)
    adaptable = lora_adapter_params(model, job) > 0
    if job.task == "full":
        if adaptable:
            yield "--task lora", job.with_(task="lora")
        if job.optimizer == "adamw":
            yield "--optimizer adamw8bit", job.with_(optimizer="adamw8bit")
    if job.task in ("full", "lora") and adaptable:
        yield "--task qlora --checkpointing", job.with_(task="qlora", checkpointing=True)
    if job.batch > 1:
        yield "--batch 1", job.with_(batch=1)


def _more_gpus(job: Job, gpu: GpuSpec) -> Iterable[tuple[str, Job]]:
    """Tensor parallel for inference; for training ZeRO-3 (FSDP full_shard), which splits the weights:
    data parallelism alone keeps a whole copy on every GPU."""
    for count in GPU_COUNTS:
        if count > job.gpus:
            zero = {"zero": 3} if job.training else {}
            flag = " --zero 3" if zero and job.zero != 3 else ""
            yield f"--gpu {count}x{gpu.name.replace(' ', '')}{flag}", job.with_(gpus=count, **zero)


def changes(current: Fit) -> list[Change]:
    """Changes that would make the job fit (or fit with more room), each with its new total.

    Only changes that lower the per-GPU total are kept. When none of them fits, the one closest to
    fitting (the smallest total) comes back alone, its ``fit.fits`` False, so the user learns how far
    the best single change still is.
    """
    model, gpu, job = current.model, current.gpu, current.job
    candidates = list(_training_changes(model, job) if job.training else _inference_changes(model, job, gpu))
    if not current.fits and job.context > 1 and model.is_transformer:
        best = largest(model, gpu, job, "context", job.context)
        if best is not None:
            candidates.append((f"--ctx {best}", job.with_(context=best)))
    candidates += _more_gpus(job, gpu)
    total = current.memory.total_bytes
    results = [change for change in (Change(text, fit(model, gpu, changed)) for text, changed in candidates)
               if change.fit.memory.total_bytes < total]
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
    def per_dollar(self) -> float | None:
        return self.throughput / self.price_usd if self.throughput and self.price_usd else None

    @property
    def per_watt(self) -> float | None:
        watts = (self.fit.gpu.tdp_w or 0) * self.fit.job.gpus
        return self.throughput / watts if self.throughput and watts else None

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


def recommend(model: ModelSpec, job: Job, catalog: Iterable[GpuSpec], budget_usd: float | None = None,
              max_gpus: int = 8, prefer: str = "speed") -> list[Pick]:
    """For each GPU, the fewest of it (1, 2, 4, 8) that fit the job; ranked by ``prefer``."""
    if prefer not in PREFERENCES:
        raise GpuflyError(f"unknown preference '{prefer}'", hint="--prefer speed, cost or power")
    if budget_usd is not None and budget_usd <= 0:
        raise GpuflyError(f"--budget must be positive, got {budget_usd:g}", hint="e.g. --budget 5000")
    if max_gpus <= 0:
        raise GpuflyError(f"--max-gpus must be at least 1, got {max_gpus}",
                          hint=f"e.g. --max-gpus 8 (counts tried: {', '.join(map(str, GPU_COUNTS))})")
    picks: list[Pick] = []
    for gpu in catalog:
        for count in (c for c in GPU_COUNTS if c <= max_gpus):
            changed = job.with_(gpus=count, zero=3 if job.training and count > 1 else job.zero)
            verdict = fit(model, gpu, changed)
            if not verdict.fits:
                continue
            price = gpu.launch_price_usd * count if gpu.launch_price_usd else None
            if budget_usd is not None and (price is None or price > budget_usd):
                break
            throughput, unit = headline(verdict.speed, changed)
            picks.append(Pick(verdict, price, throughput, unit))
            break
    key = PREFERENCES[prefer]
    return sorted(picks, key=lambda p: (key(p) > 0, key(p)), reverse=True)
