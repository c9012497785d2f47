"""What a real run would refuse, checked before any estimate: a context past the model's maximum, a
tensor-parallel size the heads do not divide, and a multi-die card taken as one device.

A refusal is a GpuflyError (one `error:` line and a hint); what a run would accept with a caveat (a context
stretched by the config's RoPE scaling, one die of a two-die card) comes back as a note for the verdict.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpufly.catalog.spec import RATE_FIELDS, GpuSpec, parse_compute_capability
from gpufly.errors import GpuflyError
from gpufly.estimate.engines import engine
from gpufly.estimate.formats import weight_format
from gpufly.estimate.job import Job
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec


def context_note(model: ModelSpec, job: Job) -> str | None:
    """None when the context is within the model's maximum; a warning when it is beyond it and the config declares
    RoPE scaling (the run goes on, quality past the trained length is the scaling's); else a GpuflyError, as the
    model's position embeddings or RoPE tables end there."""
    limit = model.max_context
    if limit is None or job.context <= limit:
        return None
    if model.rope_scaling is not None:
        return _("--ctx {ctx} is beyond {model}'s max_position_embeddings ({limit}); its config declares RoPE "
                 "scaling ({scaling}), so the estimate goes on, but quality past that length is not the model's "
                 "published one").format(ctx=f"{job.context:,}", model=model.name, limit=f"{limit:,}",
                                         scaling=model.rope_scaling.described)
    raise GpuflyError(f"--ctx {job.context:,} is beyond {model.name}'s maximum context of {limit:,} tokens "
                      "(max_position_embeddings), and its config declares no RoPE scaling to stretch it",
                      hint=f"use --ctx {limit} or less, or --max-ctx for the longest context that fits")


def splits_tensors(job: Job) -> bool:
    """Whether the job splits each layer's matrices across its GPUs (vLLM's tensor parallelism), where the heads
    must divide; transformers' device_map and llama.cpp split whole layers, and training here is data parallel."""
    return job.gpus > 1 and not job.training and not engine(job.engine).splits_layers


def tensor_parallel_ok(model: ModelSpec, size: int) -> bool:
    """vLLM's rule (ModelConfig.verify_with_parallel_config and QKVParallelLinear): the attention heads divide
    by the size; KV heads divide by it, or, when there are fewer KV heads than GPUs, the size divides by them
    (each KV head is then replicated)."""
    heads = model.heads
    if not heads or model.attention is None:
        return True
    if heads % size:
        return False
    kv_heads = model.attention.kv_heads if model.attention.kind == "mha" else 0
    if not kv_heads:
        return True
    return kv_heads % size == 0 if size <= kv_heads else size % kv_heads == 0


def tensor_parallel_sizes(model: ModelSpec) -> list[int]:
    """Every tensor-parallel size the model's heads allow, up to its head count."""
    return [size for size in range(1, (model.heads or 1) + 1) if tensor_parallel_ok(model, size)]


def check_tensor_parallel(model: ModelSpec, job: Job) -> None:
    """Refuse a tensor-parallel size the engine (or Megatron-style training, --tp) would refuse, naming the sizes
    that work."""
    size = job.tensor_parallel if job.training else job.gpus
    if (job.training and size == 1) or (not job.training and not splits_tensors(job)):
        return
    if tensor_parallel_ok(model, size):
        return
    assert model.attention is not None
    kv = f" and {model.attention.kv_heads} KV heads" if model.attention.kind == "mha" else ""
    sizes = ", ".join(map(str, tensor_parallel_sizes(model)))
    who = "tensor-parallel training" if job.training else engine(job.engine).display
    other = "" if job.training else "; or --engine llama.cpp, which splits layers"
    raise GpuflyError(f"{who} cannot split {model.name}'s {model.heads} attention heads{kv} "
                      f"across {size} GPUs (tensor parallelism needs the size to divide them)",
                      hint=f"tensor-parallel sizes that work: {sizes}{other}")


def check_nodes(job: Job) -> str | None:
    """Refuse inference across nodes on an engine that cannot run it; a note when tensor parallelism crosses nodes
    (every layer's all-reduces then wait on the network, ten times slower than NVLink or worse)."""
    if job.nodes == 1:
        return None
    if not job.training and engine(job.engine).splits_layers:
        raise GpuflyError(f"gpufly models inference across nodes for vLLM (tensor parallel in a node, a pipeline "
                          f"stage per node), not for {engine(job.engine).display}",
                          hint="--engine vllm, or --nodes 1")
    if job.training and job.tensor_parallel > job.gpus:
        return _("--tp {tp} spans {nodes} nodes: each layer's all-reduces cross the network, usually the slowest "
                 "layout; keep --tp at {gpus} or less and put the nodes in --pp or data parallelism").format(
            tp=job.tensor_parallel, nodes=job.tensor_parallel // job.gpus, gpus=job.gpus)
    return None


def device_spec(gpu: GpuSpec) -> GpuSpec:
    """The one device software sees: a card of ``dies`` dies (an MI250X's two GCDs) is that many devices, each
    with its share of the memory, bandwidth, compute, power and price; a one-die card is itself."""
    if gpu.dies <= 1:
        return gpu
    share: dict[str, Any] = {name: getattr(gpu, name) / gpu.dies for name in
                             (*RATE_FIELDS, "vram_gib", "memory_bandwidth_gbps", "tdp_w", "launch_price_usd")
                             if getattr(gpu, name) is not None}
    if gpu.memory_bus_bits:
        share["memory_bus_bits"] = gpu.memory_bus_bits // gpu.dies
    return replace(gpu, dies=1, **share)


def die_note(gpu: GpuSpec, count: int) -> str | None:
    """What a count of a multi-die card means: devices (dies), not cards."""
    if gpu.dies <= 1:
        return None
    device = device_spec(gpu)
    cards = count / gpu.dies
    shown = (_("{cards} card") if cards == 1 else _("{cards} cards")).format(cards=f"{cards:g}")
    return _("the {gpu} is {dies} devices to the software (one per die, each {vram} GiB and {bandwidth} GB/s): --gpu "
             "counts devices, so {count} is {cards}; --gpu {whole} is the whole card").format(
        gpu=gpu.name, dies=gpu.dies, vram=f"{device.vram_gib:g}", bandwidth=f"{device.memory_bandwidth_gbps:,.0f}",
        count=count, cards=shown, whole=f"{gpu.dies}x{gpu.name.replace(' ', '')}")


BF16_ENGINES_REFUSE = ("vllm", "sglang", "tensorrt-llm")
"""Engines that stop at start on bf16 weights without bf16 hardware: vLLM's _check_if_gpu_supports_dtype ("Bfloat16 is
only supported on GPUs with compute capability of at least 8.0 ... use float16 instead ... --dtype=half"), SGLang
(which loads models through vLLM's config checks) and TensorRT-LLM (bf16 kernels need SM 8.0)."""


def _inference_below(gpu: GpuSpec, job: Job, minimum: tuple[int, int]) -> bool:
    """Whether the job is inference on an NVIDIA GPU whose compute capability is under ``minimum``."""
    return (not job.training and gpu.vendor == "nvidia" and gpu.compute_capability is not None
            and parse_compute_capability(gpu.compute_capability) < minimum)


def _refused_or_noted(gpu: GpuSpec, job: Job, refusing: tuple[str, ...], what: str, why: str, hint: str,
                      note: str) -> str:
    """Refused where the job's engine stops at start on ``what`` on this GPU; elsewhere the ``note``."""
    if job.engine in refusing:
        raise GpuflyError(f"{engine(job.engine).display} refuses {what} on the {gpu.name} (compute capability "
                          f"{gpu.compute_capability}; {why})", hint=hint)
    return note


def bf16_note(gpu: GpuSpec, job: Job) -> str | None:
    """bf16 weights on an NVIDIA GPU older than Ampere (compute capability under 8.0: V100, T4, RTX 20xx): refused where
    the engine refuses them; for transformers, which runs them without tensor cores, a note pointing at fp16."""
    if weight_format(job.quant).compute_dtype != "bf16" or not _inference_below(gpu, job, (8, 0)):
        return None
    return _refused_or_noted(
        gpu, job, BF16_ENGINES_REFUSE, "bf16", "bf16 needs 8.0 or newer", "use --quant fp16 (vLLM: --dtype half)",
        _("the {gpu} (compute capability {cc}) has no bf16 tensor cores: bf16 matmuls run without them, far "
          "slower than the speed below says; --quant fp16 runs on them").format(
            gpu=gpu.name, cc=gpu.compute_capability))


AWQ_MIN_CAPABILITY = (7, 5)
"""AWQ's 4-bit kernels need Turing or newer on NVIDIA: vLLM's AWQConfig.get_min_capability is 75 ("The AWQ kernel only
supports Turing or newer GPUs"; SGLang loads through the same check), and AutoAWQ, which transformers runs AWQ
checkpoints through, states "Your NVIDIA GPU(s) must be of Compute Capability 7.5" in its README."""
AWQ_ENGINES_REFUSE = ("vllm", "sglang")


def awq_note(gpu: GpuSpec, job: Job) -> str | None:
    """An AWQ checkpoint on an NVIDIA GPU older than Turing (Pascal, Volta): refused where the engine checks the
    capability at start (vLLM, SGLang); elsewhere a note that AutoAWQ's kernels do not support the card."""
    if weight_format(job.quant).kernel != "awq" or not _inference_below(gpu, job, AWQ_MIN_CAPABILITY):
        return None
    return _refused_or_noted(
        gpu, job, AWQ_ENGINES_REFUSE, "AWQ weights", "its AWQ kernels need 7.5 or newer",
        "use a GPTQ int4 checkpoint (--quant gptq) or a GGUF type with --engine llama.cpp",
        _("AWQ's kernels (AutoAWQ) need compute capability 7.5 or newer; the {gpu} has {cc}: this checkpoint may "
          "not load on it; a GPTQ int4 checkpoint (--quant gptq) or llama.cpp runs there").format(
            gpu=gpu.name, cc=gpu.compute_capability))


def check_soc_count(gpu: GpuSpec, job: Job) -> None:
    """A system on a chip (Apple's M-series, NVIDIA's GB10) is one GPU per machine: two of them in one node do not
    exist; machines are --nodes."""
    if job.gpus > 1 and (gpu.form_factor or "").lower() == "soc":
        raise GpuflyError(f"the {gpu.name} is a system on a chip, one GPU per machine: {job.gpus} of them cannot share "
                          "a node", hint=f"--gpu {gpu.id} alone; for several machines, --nodes {job.gpus} (training)")


def check_job(model: ModelSpec, gpu: GpuSpec, job: Job) -> tuple[str, ...]:
    """Refuse what a real run would refuse; the notes for what it would run with a caveat."""
    check_tensor_parallel(model, job)
    check_soc_count(gpu, job)
    notes = (context_note(model, job), die_note(gpu, job.gpus), check_nodes(job), bf16_note(gpu, job),
             awq_note(gpu, job))
    return tuple(note for note in notes if note)
