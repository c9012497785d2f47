"""Speed from a roofline with calibrated efficiencies: decode, prefill and training throughput.

Decode is bandwidth-bound: each step reads the active weights and every sequence's KV cache.
Prefill and training are compute-bound: FLOPs over the dense tensor rate of the precision in use.
Each engine's efficiency and per-layer overhead are named constants (estimate/engines.py),
fitted on public measurements (benchmarks/estimate_accuracy.py, docs/calibration.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.estimate.engines import (
    ELEMENTWISE_BANDWIDTH_EFFICIENCY,
    GGUF_BANDWIDTH_FACTOR,
    GGUF_DROP_SHARE,
    TRAINING_ATTENTION_COST,
    TRAINING_BANDWIDTH_EFFICIENCY,
    TRAINING_MFU,
    TRAINING_TRAFFIC_PER_ACTIVATION_BYTE,
    Engine,
    engine,
)
from gpufly.estimate.formats import WeightFormat, kv_bytes, weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import kv_cache_bytes, lm_head_params, training_activation_bytes, weight_bytes
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec

TP_ALLREDUCES_PER_LAYER = 2
"""Tensor parallelism all-reduces each layer's output twice per token: after the attention's output projection and
after the MLP's down projection (Megatron-LM's row-parallel layers; vLLM's RowParallelLinear)."""
ACTIVATION_BYTES = 2
"""Activations travel between GPUs in 16 bits."""
FP16_BYTES = 2
"""A dequantized weight's size."""
ATTENTION_SCORE_BYTES = 20.0
"""Memory traffic per attention score when a prefill materializes the scores (no flash attention), as llama.cpp's
graph does: the QK^T GEMM writes each in fp32 (4 B), the masked softmax reads and writes it (8 B), the cast to fp16
for the PV GEMM reads and writes it (6 B), and that GEMM reads it (2 B). Counted, not fitted: with it, each GPU's
implied llama.cpp matmul rate is the same at pp512 and pp8192 (docs/calibration.md)."""
QLORA_SLOWDOWN = 1.3
"""QLoRA dequantizes every NF4 weight on the fly, forward and backward (bitsandbytes)."""

_RATE_FIELDS = {
    "fp16": ("fp16_tensor_tflops", "bf16_tensor_tflops"),
    "bf16": ("bf16_tensor_tflops", "fp16_tensor_tflops"),
    "fp8": ("fp8_tensor_tflops", "fp16_tensor_tflops", "bf16_tensor_tflops"),
    "tf32": ("tf32_tensor_tflops", "fp32_tflops"),
    "fp32": ("fp32_tflops",),
}


@dataclass(frozen=True)
class StepPart:
    """One item of a step's time: what it is, seconds per step, and how it was counted."""

    name: str
    seconds: float
    note: str = ""
    communication: bool = False


@dataclass(frozen=True)
class Speed:
    """Predicted throughput; a None figure comes with ``why`` saying what is unknown. ``step`` breaks one step
    (a decode step at the end of the context, or a training step) into its items; ``step_s`` is their total."""

    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    time_to_first_token_s: float | None = None
    train_tokens_s: float | None = None
    train_samples_s: float | None = None
    bound: str = ""
    why: str = ""
    step: tuple[StepPart, ...] = ()

    @property
    def step_s(self) -> float:
        return sum(part.seconds for part in self.step)

    @property
    def communication_s(self) -> float:
        return sum(part.seconds for part in self.step if part.communication)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "step_s": self.step_s if self.step else None,
                "communication_s": self.communication_s if self.step else None}


def peak_flops(gpu: GpuSpec, dtype: str, fp16_accumulate: bool = False) -> float | None:
    """Dense FLOP/s at ``dtype`` from the catalog, falling back along the precision chain; for a
    GPU without tensor cores (Pascal), the FP16 or FP32 rate it really has. ``fp16_accumulate``:
    GeForce cards run FP16 with FP16 accumulation at twice their (catalogued) FP32-accumulate rate."""
    for name in _RATE_FIELDS[dtype]:
        rate = getattr(gpu, name)
        if rate is not None:
            doubled = fp16_accumulate and name == "fp16_tensor_tflops" and gpu.segment == "consumer"
            return rate * 1e12 * (2 if doubled and gpu.vendor == "nvidia" else 1)
    if not gpu.has_tensor_cores:
        plain = gpu.fp16_tflops if dtype in ("fp16", "bf16") and gpu.fp16_tflops else gpu.fp32_tflops
        return plain * 1e12 if plain else None
    return None


def _bandwidth(gpu: GpuSpec, runtime: Engine, fmt: WeightFormat, gpus: int) -> float:
    """Bytes per second a decode step's reads reach, across the GPUs that read in parallel."""
    if fmt.engine_family == "gguf":
        factor = 1 - (1 - GGUF_BANDWIDTH_FACTOR.get(fmt.name, 1.0)) * GGUF_DROP_SHARE
    else:
        factor = dict(runtime.quantized_bandwidth_factor).get(fmt.name.split("-")[0], 1.0)
    hbm = runtime.hbm_bandwidth_factor if gpu.memory_type.upper().startswith("HBM") else 1.0
    hbm *= runtime.unified_bandwidth_factor if gpu.segment == "soc" else 1.0
    parallel = 1 if runtime.splits_layers else gpus
    return gpu.memory_bandwidth_gbps * 1e9 * runtime.bandwidth_efficiency * factor * hbm * parallel


def decode_weight_bytes(spec: ModelSpec, fmt: WeightFormat, batch: int) -> float:
    """Weight bytes one decode step reads. MoE: the shared part plus the experts the batch's tokens
    touch, E_eff = E * (1 - (1 - k/E)^B) per layer with uniform routing (B=1 reads k experts)."""
    total = weight_bytes(spec, fmt)
    embedding = spec.embedding_params * (2 if fmt.keeps_embeddings_16bit else fmt.bits_per_weight / 8)
    read = total - embedding + (0 if lm_head_params(spec) else embedding)
    moe = spec.moe
    if moe is None:
        return read
    expert_bytes = moe.expert_params * fmt.bits_per_weight / 8
    touched = moe.experts * (1 - (1 - moe.active / moe.experts) ** batch)
    return read - moe.layers * (moe.experts - touched) * expert_bytes


def _kv_traffic(spec: ModelSpec, runtime: Engine) -> float:
    """KV bytes moved per byte stored in one decode step (1 for kernels that read it once)."""
    attention = spec.attention
    if attention is None or attention.kind != "mha" or not attention.kv_heads or not spec.heads:
        return 1.0
    return 1.0 + runtime.kv_traffic_per_group * spec.heads / attention.kv_heads


def _host_factor(runtime: Engine, fmt: WeightFormat) -> float:
    """How much longer the host takes per layer for these weights than for 16-bit ones."""
    quantized = fmt.bits_per_weight < 16 and fmt.engine_family == "torch"
    return runtime.quantized_cpu_factor if quantized else 1.0


HOST_BOUND = "host (the engine's per-layer launch time)"
"""Speed.bound when a decode step waits on the host, not the GPU: the same tok/s on every GPU fast enough."""


def decode_terms(spec: ModelSpec, gpu: GpuSpec, job: Job, position: int) -> tuple[dict[str, float], float]:
    """The competing times of one decode step at KV position ``position`` (host floor, memory, compute; the step
    takes the largest) and its fixed costs, in seconds."""
    fmt = weight_format(job.quant)
    runtime = engine(job.engine)
    layers = spec.layers or 1
    kv = kv_cache_bytes(spec, position, job.batch, job.kv_format) * _kv_traffic(spec, runtime)
    memory_time = (decode_weight_bytes(spec, fmt, job.batch) + kv) / _bandwidth(gpu, runtime, fmt, job.gpus)
    compute = peak_flops(gpu, fmt.compute_dtype, runtime.fp16_accumulate)
    compute_time = (2 * spec.params_per_token * job.batch / (compute * runtime.prefill_compute_efficiency * job.gpus)
                    if compute else 0.0)
    cpu_floor = layers * runtime.cpu_s_per_layer * _host_factor(runtime, fmt)
    fixed = runtime.step_overhead_s + layers * runtime.layer_overhead_s
    fixed += sum(part.seconds for part in decode_communication(spec, gpu, job))
    terms = {HOST_BOUND: cpu_floor, "memory bandwidth (decode)": memory_time, "compute (decode)": compute_time}
    return terms, fixed


def decode_communication(spec: ModelSpec, gpu: GpuSpec, job: Job) -> tuple[StepPart, ...]:
    """What a decode step spends between GPUs, on the critical path (each layer waits for its all-reduce):
    tensor parallelism's TP_ALLREDUCES_PER_LAYER all-reduces of batch x hidden activations per layer over the link
    inside the node, and with a pipeline stage per node, one send of those activations per stage boundary. An
    engine that splits layers within a node (llama.cpp, transformers) hands one small tensor per GPU boundary,
    which its per-layer overhead already covers."""
    from gpufly.estimate.comms import collective_s, send_s, topology

    if job.world == 1:
        return ()
    runtime = engine(job.engine)
    topo, _said = topology(gpu, job)
    message = job.batch * (spec.hidden or 0) * ACTIVATION_BYTES
    parts = []
    if job.gpus > 1 and not runtime.splits_layers:
        count = (spec.layers or 1) * TP_ALLREDUCES_PER_LAYER
        each = collective_s("all-reduce", message, topo, job.gpus)
        parts.append(StepPart("tensor-parallel all-reduce", count * each, _(
            "{count} all-reduces of {size} KiB over {link}, {each} us each (NCCL ring cost model)").format(
                count=count, size=f"{message / 1024:,.0f}", link=topo.intra.label, each=f"{each * 1e6:.1f}"),
            communication=True))
    if job.nodes > 1 and topo.inter is not None:
        hops = job.nodes - 1
        parts.append(StepPart("pipeline sends between nodes", hops * send_s(message, topo.inter), _(
            "{hops} stage boundaries over {link}").format(hops=hops, link=topo.inter.label), communication=True))
    return tuple(parts)


def decode_parts(spec: ModelSpec, gpu: GpuSpec, job: Job, position: int) -> tuple[StepPart, ...]:
    """One decode step at ``position`` item by item: the bound that sets it (the largest of host, memory and
    compute), the engine's fixed costs, and the communication between GPUs."""
    terms, _fixed = decode_terms(spec, gpu, job, position)
    runtime = engine(job.engine)
    bound = max(terms, key=lambda name: terms[name])
    engine_fixed = runtime.step_overhead_s + (spec.layers or 1) * runtime.layer_overhead_s
    parts = [StepPart(bound, terms[bound], _("the largest of host floor, memory and compute"))]
    if engine_fixed:
        parts.append(StepPart("engine overhead", engine_fixed, _("{engine}'s fixed cost per step and layer").format(
            engine=runtime.display)))
    return (*parts, *decode_communication(spec, gpu, job))


def decode_step_s(spec: ModelSpec, gpu: GpuSpec, job: Job, position: int) -> float:
    """Seconds for one decode step of ``job.batch`` sequences at KV position ``position``."""
    terms, fixed = decode_terms(spec, gpu, job, position)
    return max(terms.values()) + fixed


def _attention_flops(spec: ModelSpec, tokens: int) -> float:
    if spec.attention is None or not spec.layers or not spec.heads:
        return 0.0
    head_dim = spec.attention.head_dim or (spec.hidden or 0) // spec.heads
    return 2 * spec.layers * tokens**2 * spec.heads * head_dim


def prefill_flops(spec: ModelSpec, tokens: int) -> float:
    """The FLOPs a prompt's forward pass really runs: the body's matmuls for every token (the embedding is a lookup,
    not a matmul), the LM head for the last token only (engines keep only the logits they sample from), and causal
    attention's 2 * L * s^2 * heads * head_dim."""
    head = lm_head_params(spec) or spec.embedding_params
    body = max(0, spec.params_per_token - spec.embedding_params - lm_head_params(spec))
    return 2 * body * tokens + 2 * head + _attention_flops(spec, tokens)


def attention_scores(spec: ModelSpec, tokens: int, ubatch: int) -> float:
    """Attention scores a prefill of ``tokens`` computes when it materializes them (no flash attention), over all
    layers and heads: in blocks of ``ubatch`` queries, each against every key so far (llama.cpp's micro-batches
    against its KV cache), or the whole s x s matrix at once (``ubatch`` 0: eager attention with a causal mask)."""
    if spec.attention is None or not spec.layers or not spec.heads:
        return 0.0
    if not ubatch or ubatch >= tokens:
        per_head = float(tokens) * tokens
    else:
        full, rest = divmod(tokens, ubatch)
        per_head = ubatch * ubatch * full * (full + 1) / 2 + rest * tokens
    return spec.layers * spec.heads * per_head


def prefill_parallelism(runtime: Engine, gpus: int, tokens: int) -> float:
    """How many GPUs' worth of work a prompt gets: all of them under tensor parallelism. Under a layer split, one
    at a time, unless the engine pipelines the prompt's micro-batches: u of them through N stages take u + N - 1
    stage times instead of u * N (a 512-token prompt, one micro-batch, gains nothing)."""
    if not runtime.splits_layers:
        return gpus
    if gpus == 1 or not runtime.pipelines_prefill:
        return 1
    ubatches = _ubatches(runtime, tokens)
    return 1 + (ubatches * gpus / (ubatches + gpus - 1) - 1) * runtime.pipeline_efficiency


def prefill_rate(gpu: GpuSpec, runtime: Engine, fmt: WeightFormat) -> float | None:
    """FLOP/s a prefill's matmuls reach on one GPU: the dense tensor rate times the engine's kernel efficiency, and
    for an engine calibrated per chip family, never more than the card's board power times the FLOP/s per watt its
    family sustained (a tensor-core GEMM draws more than the board power at full clock: a 300 W RTX 6000 Ada
    prefills at two thirds of a 450 W RTX 4090's rate with the same AD102 chip)."""
    compute = peak_flops(gpu, fmt.compute_dtype, runtime.fp16_accumulate)
    if compute is None:
        return None
    rate = compute * runtime.prefill_compute_efficiency
    per_watt = prefill_flops_per_watt(runtime, gpu)
    if per_watt is not None and gpu.tdp_w:
        rate = min(rate, gpu.tdp_w * per_watt)
    return rate


def prefill_flops_per_watt(runtime: Engine, gpu: GpuSpec) -> float | None:
    """The engine's sustained prefill FLOP/s per watt of board power on this GPU's chip family, if calibrated."""
    chip = (gpu.chip or "").upper()
    for prefix, tflops_per_watt in runtime.prefill_tflops_per_watt:
        if chip.startswith(prefix):
            return tflops_per_watt * 1e12
    return None


def prefill_memory_bytes(spec: ModelSpec, fmt: WeightFormat, runtime: Engine, job: Job, tokens: int) -> float:
    """Bytes a prefill of ``job.batch`` prompts of ``tokens`` moves besides its matmuls' operands: the attention
    scores written, softmaxed and read again when they are materialized (ATTENTION_SCORE_BYTES each), and for an
    engine that dequantizes its weights to 16 bits before a tensor-core GEMM, each micro-batch's read of the
    quantized weights and write of the 16-bit copy (the GEMM's read of it is the same as for 16-bit weights)."""
    moved = 0.0
    if not job.flash_attention:
        moved += attention_scores(spec, tokens, runtime.prefill_ubatch) * ATTENTION_SCORE_BYTES * job.batch
    if runtime.dequantizes_for_prefill and fmt.bits_per_weight < 16:
        body = max(0, spec.params_per_token - spec.embedding_params - lm_head_params(spec))
        moved += _ubatches(runtime, tokens * job.batch) * body * (fmt.bits_per_weight / 8 + FP16_BYTES)
    return moved


def _ubatches(runtime: Engine, tokens: int) -> int:
    return math.ceil(tokens / runtime.prefill_ubatch) if runtime.prefill_ubatch else 1


def prefill_s(spec: ModelSpec, gpu: GpuSpec, job: Job, tokens: int) -> float | None:
    """Seconds to prefill ``tokens`` per sequence: the matmuls at the prefill rate plus the memory traffic around
    them (materialized attention scores, dequantized weights), never faster than one weight read nor than the host
    can launch the layers; plus the engine's fixed costs of a step (its per-layer launches hide behind the long
    kernels of every micro-batch but the first)."""
    fmt = weight_format(job.quant)
    runtime = engine(job.engine)
    rate = prefill_rate(gpu, runtime, fmt)
    if rate is None:
        return None
    parallel = prefill_parallelism(runtime, job.gpus, tokens)
    bandwidth = gpu.memory_bandwidth_gbps * 1e9 * parallel
    compute_time = prefill_flops(spec, tokens) * job.batch / (rate * parallel)
    traffic = prefill_memory_bytes(spec, fmt, runtime, job, tokens)
    traffic_time = traffic / (bandwidth * ELEMENTWISE_BANDWIDTH_EFFICIENCY)
    memory_time = weight_bytes(spec, fmt) / bandwidth
    layers = spec.layers or 1
    host_floor = layers * runtime.cpu_s_per_layer * _host_factor(runtime, fmt)
    fixed = runtime.step_overhead_s + layers * runtime.layer_overhead_s
    return max(compute_time + traffic_time, memory_time, host_floor) + fixed + _prefill_allreduce_s(
        spec, gpu, job, tokens)


def _prefill_allreduce_s(spec: ModelSpec, gpu: GpuSpec, job: Job, tokens: int) -> float:
    """Tensor parallelism's all-reduces over a whole prompt's activations (tokens x batch x hidden, 16-bit),
    TP_ALLREDUCES_PER_LAYER per layer, not hidden behind the matmuls (vLLM runs them in line)."""
    from gpufly.estimate.comms import collective_s, topology

    if job.gpus == 1 or engine(job.engine).splits_layers:
        return 0.0
    message = tokens * job.batch * (spec.hidden or 0) * ACTIVATION_BYTES
    topo, _said = topology(gpu, job)
    return (spec.layers or 1) * TP_ALLREDUCES_PER_LAYER * collective_s("all-reduce", message, topo, job.gpus)


def training_flops_per_token(spec: ModelSpec, job: Job) -> float:
    """6 * active params (forward 2, backward 4) + causal attention 6 * L * s * heads * head_dim;
    LoRA skips the frozen weights' gradients (4 * P); full recomputation adds one forward."""
    return _param_factor(job) * spec.params_per_token + _training_attention_flops(spec, job)


def _param_factor(job: Job) -> int:
    return (6 if job.task == "full" else 4) + (2 if job.checkpointing else 0)


def _training_attention_flops(spec: ModelSpec, job: Job) -> float:
    """Causal attention's FLOPs per token in a training step: 6 * L * s * heads * head_dim, scaled as the matmuls."""
    if spec.attention is None or not spec.layers or not spec.heads:
        return 0.0
    head_dim = spec.attention.head_dim or (spec.hidden or 0) // spec.heads
    return (_param_factor(job) / 6) * 6 * spec.layers * job.context * spec.heads * head_dim


def _training_dtype(job: Job) -> str:
    return "bf16" if job.mixed_precision else "tf32"


def training_step_s_per_sample(spec: ModelSpec, gpu: GpuSpec, job: Job) -> float | None:
    """Seconds per sample on one GPU: matmul FLOPs at the tensor rate times an MFU (attention's FLOPs at
    TRAINING_ATTENTION_COST times a matmul FLOP's time), plus the memory traffic of the elementwise work (norms,
    activations, softmax, optimizer), which runs between the matmuls at the memory bandwidth and does not overlap
    them."""
    peak = peak_flops(gpu, _training_dtype(job))
    if peak is None:
        return None
    if spec.is_transformer:
        attention = _training_attention_flops(spec, job)
        flops = (training_flops_per_token(spec, job) + (TRAINING_ATTENTION_COST - 1) * attention) * job.context
    elif spec.forward_flops_per_sample:
        flops = 3 * spec.forward_flops_per_sample
    else:
        return None
    activations, _how = training_activation_bytes(spec, job.with_(batch=1))
    traffic = activations * TRAINING_TRAFFIC_PER_ACTIVATION_BYTE
    compute = flops / (peak * TRAINING_MFU) * (QLORA_SLOWDOWN if job.task == "qlora" else 1.0)
    return compute + traffic / (gpu.memory_bandwidth_gbps * 1e9 * TRAINING_BANDWIDTH_EFFICIENCY)


def training_speed(spec: ModelSpec, gpu: GpuSpec, job: Job) -> Speed:
    """Training throughput on ``job.world`` GPUs, from the seconds per sample on one; on several, one step's
    compute and communication as estimate/parallel.py splits them."""
    from gpufly.estimate.parallel import training_step

    per_sample = training_step_s_per_sample(spec, gpu, job)
    if per_sample is None:
        if peak_flops(gpu, _training_dtype(job)) is None:
            return Speed(why=_("{vendor} publishes no dense tensor rate for the {gpu}").format(
                vendor=gpu.vendor.upper(), gpu=gpu.name))
        return Speed(why=_("no FLOP count for this model"))
    step = training_step(spec, gpu, job) if job.world > 1 else None
    samples = step.samples_s if step is not None else 1 / per_sample
    parts = step.parts if step is not None else (
        StepPart("compute", per_sample * job.batch, _("one GPU, micro-batch {batch}").format(batch=job.batch)),)
    bound = "compute and communication" if step is not None and any(p.communication for p in parts) else (
        "compute and memory")
    if spec.is_transformer:
        return Speed(train_tokens_s=samples * job.context, train_samples_s=samples, bound=bound, step=parts)
    return Speed(train_samples_s=samples, bound=bound, step=parts)


def inference_speed(spec: ModelSpec, gpu: GpuSpec, job: Job, prompt_tokens: int | None = None) -> Speed:
    """Decode tok/s at the end of the context (the slowest point), prefill tok/s for the prompt."""
    kv_bytes(job.kv_format)
    if not spec.is_transformer or spec.kind != "decoder":
        return Speed(why=_("token speeds apply to decoder language models"))
    prompt = prompt_tokens if prompt_tokens is not None else max(1, job.context // 2)
    terms, fixed = decode_terms(spec, gpu, job, job.context)
    prefill = prefill_s(spec, gpu, job, prompt)
    return Speed(
        step=decode_parts(spec, gpu, job, job.context),
        decode_tok_s=job.batch / (max(terms.values()) + fixed),
        prefill_tok_s=prompt * job.batch / prefill if prefill else None,
        time_to_first_token_s=prefill,
        bound=max(terms, key=lambda name: terms[name]),
        why="" if prefill else _("no published dense tensor rate for the {gpu}: prefill unknown").format(
            gpu=gpu.name),
    )


def speed(spec: ModelSpec, gpu: GpuSpec, job: Job) -> Speed:
    """Predicted decode and prefill tokens/s for inference, or training tokens (samples)/s."""
    return training_speed(spec, gpu, job) if job.training else inference_speed(spec, gpu, job)
