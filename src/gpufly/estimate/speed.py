"""Speed from a roofline with calibrated efficiencies: decode, prefill and training throughput.

Decode is bandwidth-bound: each step reads the active weights and every sequence's KV cache.
Prefill and training are compute-bound: FLOPs over the dense tensor rate of the precision in use.
Each engine's efficiency and per-layer overhead are named constants (estimate/engines.py),
fitted on public measurements (benchmarks/estimate_accuracy.py, docs/calibration.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.engines import (
    ELEMENTWISE_BANDWIDTH_EFFICIENCY,
    GGUF_BANDWIDTH_FACTOR,
    GGUF_DROP_SHARE,
    TRAINING_BANDWIDTH_EFFICIENCY,
    Engine,
    engine,
)
from gpufly.estimate.formats import WeightFormat, kv_bytes, weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import kv_cache_bytes, lm_head_params, lora_adapter_params, weight_bytes
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
    prompt_tokens: int | None = None
    """The prompt the prefill figures are for: --prompt, else half the context."""

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
    GPU without tensor cores (Pascal), the faster of its FP16 and FP32 rates: cuBLAS computes a 16-bit GEMM in FP32
    where FP16 arithmetic is slower (a GeForce Pascal card's FP16 runs at 1/64 of its FP32 rate), so AMP on a
    GTX 1080 Ti runs at the FP32 rate. ``fp16_accumulate``: GeForce cards run FP16 with FP16 accumulation at twice
    their (catalogued) FP32-accumulate rate. bf16 on an NVIDIA GPU older than Ampere (compute capability under 8.0:
    Volta, Turing) runs at the FP32 rate: bf16 tensor cores arrived with Ampere (A100 whitepaper), and cuBLAS
    computes a bf16 GEMM there on the CUDA cores, not at the card's FP16 tensor rate."""
    if dtype == "bf16" and gpu.lacks_bf16_tensor_cores:
        return gpu.fp32_tflops * 1e12 if gpu.fp32_tflops else None
    for name in _RATE_FIELDS[dtype]:
        rate = getattr(gpu, name)
        if rate is not None:
            doubled = fp16_accumulate and name == "fp16_tensor_tflops" and gpu.segment == "consumer"
            return rate * 1e12 * (2 if doubled and gpu.vendor == "nvidia" else 1)
    if not gpu.has_tensor_cores:
        rates = [gpu.fp32_tflops or 0.0, *([gpu.fp16_tflops or 0.0] if dtype in ("fp16", "bf16") else [])]
        return max(rates) * 1e12 if max(rates) else None
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
    if not quantized:
        return 1.0
    return dict(runtime.kernel_cpu_factor).get(fmt.kernel, runtime.quantized_cpu_factor)


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
    return (max(compute_time + traffic_time, memory_time, host_floor) + fixed
            + _prefill_allreduce_s(spec, gpu, job, tokens) + _prefill_node_sends_s(spec, gpu, job, tokens))


def _prefill_allreduce_s(spec: ModelSpec, gpu: GpuSpec, job: Job, tokens: int) -> float:
    """Tensor parallelism's all-reduces over a whole prompt's activations (tokens x batch x hidden, 16-bit),
    TP_ALLREDUCES_PER_LAYER per layer, not hidden behind the matmuls (vLLM runs them in line)."""
    from gpufly.estimate.comms import collective_s, topology

    if job.gpus == 1 or engine(job.engine).splits_layers:
        return 0.0
    message = tokens * job.batch * (spec.hidden or 0) * ACTIVATION_BYTES
    topo, _said = topology(gpu, job)
    return (spec.layers or 1) * TP_ALLREDUCES_PER_LAYER * collective_s("all-reduce", message, topo, job.gpus)


def _prefill_node_sends_s(spec: ModelSpec, gpu: GpuSpec, job: Job, tokens: int) -> float:
    """With a pipeline stage per node, the prompt's activations (tokens x batch x hidden, 16-bit) cross each stage
    boundary over the network once, on the critical path: a 2,048-token prompt of an 8B model is 16.8 MB a boundary,
    13 ms over 10 GbE and under 1 ms over 400 Gb/s InfiniBand."""
    from gpufly.estimate.comms import send_s, topology

    if job.nodes == 1:
        return 0.0
    topo, _said = topology(gpu, job)
    if topo.inter is None:
        return 0.0
    message = tokens * job.batch * (spec.hidden or 0) * ACTIVATION_BYTES
    return (job.nodes - 1) * send_s(message, topo.inter)


TRAINING_HOST_S_PER_LAYER_PASS = 2.5e-4
"""Host time to launch one transformer layer's kernels for one pass (forward, backward or recomputed forward) in
eager PyTorch: ~25-45 operators a layer (norms, projections, rotary, attention, MLP, residuals), each dispatched and
launched in 5-10 us. The GPU waits on it only when a micro-batch's kernels are shorter: a small model at batch 1.
Assumed from that count, not fitted (no calibration row is host-bound)."""
GEMM_TILE = 128
"""Rows and columns of the output tile one streaming multiprocessor computes in a cuBLAS/CUTLASS GEMM (128 x 128,
the usual tile for large bf16 GEMMs): a GEMM with fewer tiles than the GPU has SMs leaves SMs idle."""
TRAINING_MATMUL_SHARE = 0.95
"""Share of the measured matmul ceiling (data/matmul_ceilings.json) a training step's GEMMs reach before the
hidden-size and SM-fill factors: the ceiling is the best shape found, while a step runs a mix of shapes (the weight
gradients reduce over the tokens, the LM head is vocabulary-wide) and shares its SMs and memory with the collectives
that overlap it. Fitted with GEMM_K_OVERHEAD and Hopper's sustained share on the fit set's transformer rows (least
mean |log error| over 0.90-1.00 x 256-768 x Hopper 0.75-0.85: 1.0/0.75/512 and 0.95/0.80/512 tie at 0.093-0.094)."""
TF32_MATMUL_SHARE = 0.7
"""Share of the bf16 matmul ceiling a TF32 GEMM reaches, against the TF32 rate: its operands are twice as wide per
FLOP, so the tiles' loads through shared memory and L2 bind before the tensor cores do. Fitted on the fit set's
fp32 BERT rows (the NGC container's TF32 default)."""
GEMM_K_OVERHEAD = 512.0
"""A GEMM tile's fixed cost (loading the first operands, writing the output) in units of its inner-loop steps: a
tile of inner dimension K runs at K / (K + this) of the ceiling, so matmuls of a narrow model (hidden 768) run
further below it than those of a wide one (hidden 8192). Fitted on the fit set's llm-foundry rows (MPT 125M to
30B), where the throughput per FLOP grows with the hidden size."""
ELEMENTWISE_BYTES_PER_HIDDEN = 20
"""Bytes one token moves per layer through the forward's elementwise kernels, per unit of hidden size, in 16 bits:
two norms (read and write: 4 + 4) and two residual additions (read two, write one: 6 + 6)."""
MLP_ACTIVATION_BYTES = {True: 6, False: 4}
"""Bytes per token and MLP channel of the MLP's activation in 16 bits: gated (SiLU(gate) * up: read two, write
one) or plain (GELU: read one, write one)."""
BACKWARD_ELEMENTWISE_PASSES = 2
"""The backward's elementwise kernels move about twice the forward's bytes: each reads the saved input and the
incoming gradient and writes the outgoing one, and the norms' backward reduces over the hidden dimension again."""
TRAINING_SCORE_BYTES = 36
"""Bytes per attention score of a training step whose attention materializes the scores (no flash attention), in
16 bits: the forward's QK^T writes it (2), softmax reads and writes it (4), dropout reads it, writes it and a mask
(5), and the PV GEMM reads it (2); the backward writes the probabilities' gradient (2), reads it with the mask and
writes it (5), reads it with the probabilities and writes the scores' gradient (6), and the two GEMMs read that
(4), and the PV weight gradient reads the probabilities (2): 13 forward, 23 backward (dropout as BERT's p=0.1)."""
LOGIT_BYTES = 34
"""Bytes per token and vocabulary entry of a language model's loss: the LM head writes the 16-bit logits (2),
autocast upcasts them for the cross-entropy (read 2, write 4), log-softmax reads and writes them (8); the backward
reads its incoming gradient and the saved output and writes the logits' gradient (12), and casts it back to 16 bits
(read 4, write 2)."""
OPTIMIZER_BYTES_PER_PARAM = {"adamw": 28, "adamw8bit": 16, "sgd": 12, "sgd-momentum": 20, "adafactor": 20,
                             "paged-adamw": 28, "paged-adamw8bit": 16}
"""Bytes the optimizer moves per trainable parameter per step: AdamW reads the fp32 weight, gradient and two moments
(16 B) and writes the weight and moments (12 B); 8-bit AdamW keeps 1-byte moments; SGD reads weight and gradient and
writes the weight; momentum adds its buffer; Adafactor's factored second moment is small, its update is not. A paged
optimizer moves what its unpaged twin does while its states stay resident. Pure bf16 (``--precision bf16``) holds
every one of these in 2 bytes instead of 4: half the traffic."""
HOST_OPTIMIZER_GBPS = 50.0
"""Host memory bandwidth a CPU optimizer step sustains under ``--offload`` (DeepSpeed's CPU Adam is bound by it; a
two-socket DDR4/DDR5 server streams 100-300 GB/s, one desktop socket 40-80 GB/s): an assumption, said in the item,
not a fitted figure (no published offload throughput row was found)."""
OFFLOAD_LINK_BYTES_PER_PARAM = 4
"""Under ``--offload``, each step moves every trainable parameter's 16-bit gradient to the host and its updated 16-bit
weight back: 2 + 2 bytes over PCIe."""
GRAD_CLIP_BYTES_PER_PARAM = 12
"""Gradient clipping before each step (the HF Trainer's max_grad_norm=1.0 and llm-foundry's recipes clip): read
every fp32 gradient for the norm (4 B), then scale it in place (read and write, 8 B)."""
AMP_PARAM_BYTES_PER_MICROBATCH = 16
"""Full training in mixed precision, per trainable parameter and micro-batch: autocast casts each fp32 weight to 16
bits (read 4, write 2) and the 16-bit weight gradient is added to the fp32 .grad (read 2, read 4, write 4)."""
NF4_DEQUANT_BYTES = 2.5
"""QLoRA, per weight and pass: bitsandbytes reads the NF4 weight (0.5 B) and writes a 16-bit copy (2 B) for the GEMM
(the forward, the backward's input gradient, and the recomputed forward under checkpointing)."""
CONV_TRAFFIC_PER_ACTIVATION_BYTE = 14.0
"""Bytes moved per byte of saved activations in a convolutional network's training step: batch norm reads each
convolution's output twice (statistics, then normalization) and writes it, ReLU reads and writes it, and the backward
of each reads the saved tensor and the incoming gradient and writes the outgoing one, unfused in eager PyTorch.
Fitted on the fit set's ResNet-50 rows (least mean |log error| over 12-32 with the convolutions' share 0.2-1.0
of the matmul ceiling: 14 with the convolutions at the ceiling; a lower share fits worse): at 16 bits on fast tensor
cores these passes, not the convolutions, set the step time, which is why a faster tensor core barely speeds up a
ResNet while more bandwidth does. A first-principles count gives about 10 (38 bytes per convolution output element
over the 4 bytes of it saved); the rest is kernels that reach less than the bandwidth share assumed here."""

ATTENTION_KERNEL = "flash-attention-2"
"""The flash-attention kernel a training job runs unless told otherwise (PyTorch's SDPA and the flash_attn package
both run FlashAttention-2)."""
WEIGHT_TRAFFIC = "weight casts and gradient accumulation"
"""The step item of full mixed-precision training's per-micro-batch traffic over the weights."""
MATMUL_CEILINGS_FILE = Path(__file__).parent / "data" / "matmul_ceilings.json"


@dataclass(frozen=True)
class Ceiling:
    """A share of the dense tensor rate a kind of kernel reaches on a GPU, and where that figure comes from."""

    share: float
    sources: tuple[str, ...]


@cache
def _ceilings() -> dict[str, dict[str, Ceiling]]:
    """data/matmul_ceilings.json, validated once: every share within (0, 1], every entry with a source."""
    try:
        data = json.loads(MATMUL_CEILINGS_FILE.read_text())
        tables = {"matmul": dict(data["matmul"]), "attention": dict(data["attention"]),
                  "kernels": dict(data["attention_kernels"]), "sustained": dict(data["sustained"])}
        tables["sustained"][""] = data["sustained_default"]
        tables["matmul"][""] = data["matmul_default"]
        tables["attention"][""] = data["attention_default"]
    except (OSError, ValueError, KeyError) as exc:
        raise GpuflyError(f"cannot read the kernel ceilings {MATMUL_CEILINGS_FILE}: {exc}",
                          hint="reinstall gpufly; the file ships with it") from exc
    checked: dict[str, dict[str, Ceiling]] = {}
    for kind, rows in tables.items():
        checked[kind] = {}
        for name, row in rows.items():
            share = float(row.get("share", 0))
            if not 0 < share <= 1 or not row.get("sources"):
                raise GpuflyError(f"{kind} ceiling '{name or 'default'}' in {MATMUL_CEILINGS_FILE} needs a share in "
                                  "(0, 1] and a source", hint="each entry lists share and sources")
            checked[kind][name] = Ceiling(share, tuple(row["sources"]))
    return checked


def matmul_ceiling(gpu: GpuSpec) -> Ceiling:
    """The share of the dense tensor rate the best-shaped GEMM reaches on ``gpu`` (its measured MAMF), or the
    default for a GPU not measured. Cards without tensor cores run their matmuls on the vector units at the same
    default share."""
    table = _ceilings()["matmul"]
    return table.get(gpu.id, table[""])


def measured_matmul_share(gpu: GpuSpec) -> float | None:
    """``gpu``'s own measured matmul ceiling (a share of its dense tensor rate), None where none is published."""
    found = _ceilings()["matmul"].get(gpu.id)
    return found.share if found is not None else None


def sustained_share(gpu: GpuSpec) -> Ceiling:
    """The share of the matmul ceiling ``gpu``'s architecture holds through a training run (1 unless a run says
    otherwise)."""
    table = _ceilings()["sustained"]
    return table.get(gpu.architecture, table[""])


def attention_ceiling(gpu: GpuSpec, kernel: str = ATTENTION_KERNEL) -> float:
    """The share of the dense tensor rate a flash-attention kernel's forward and backward reach on ``gpu``:
    FlashAttention-2's share on the GPU's architecture, times the kernel's speed relative to it."""
    table = _ceilings()["attention"]
    kernels = _ceilings()["kernels"]
    if kernel not in kernels:
        raise GpuflyError(f"unknown attention kernel {kernel!r}", hint="one of " + ", ".join(sorted(kernels)))
    return table.get(gpu.architecture, table[""]).share * kernels[kernel].share


def _matmul_params(spec: ModelSpec) -> int:
    """Parameters a token meets in a matmul: the body and the LM head (a tied head reuses the embedding); the
    embedding itself is a lookup."""
    untied = 0 if spec.tie_embeddings else spec.embedding_params
    return max(0, spec.params_per_token - untied)


def _param_factor(job: Job) -> float:
    """FLOPs per parameter and token: forward 2, backward 4 (2 without the frozen weights' gradients), and the
    recomputed share of the forward again under checkpointing (all of it full, half selective)."""
    return (6 if job.task == "full" else 4) + 2 * job.recompute_forward_fraction


def _attention_forward_flops(spec: ModelSpec, context: int) -> float:
    """Attention's forward FLOPs per token: QK^T and PV over the keys it sees, 2 * 2 * s * heads * head_dim per
    layer over the whole sequence, halved for a causal decoder."""
    if spec.attention is None or not spec.layers or not spec.heads:
        return 0.0
    head_dim = spec.attention.head_dim or (spec.hidden or 0) // spec.heads
    causal = 0.5 if spec.kind == "decoder" else 1.0
    return 4 * causal * spec.layers * context * spec.heads * head_dim


def _training_dtype(job: Job, gpu: GpuSpec | None = None) -> str:
    """The matmuls' dtype: tf32 for fp32 training; bf16 for mixed and pure-bf16 training, except the mixed recipe
    on a GPU without bf16 tensor cores (before Ampere), which runs fp16 autocast (the Trainer and accelerate refuse
    bf16 there; fp16 is what such a run uses). Pure bf16 has no such fallback: it runs at the FP32 rate."""
    if not job.mixed_precision:
        return "tf32"
    if gpu is not None and job.master_weights and gpu.lacks_bf16_tensor_cores:
        return "fp16"
    return "bf16"


def _ceiling_share(gpu: GpuSpec, job: Job) -> float:
    """The measured matmul ceiling, held through a run (sustained_share), and for fp32 jobs on tensor cores at
    TF32_MATMUL_SHARE of it."""
    tf32 = not job.mixed_precision and gpu.tf32_tensor_tflops is not None
    return matmul_ceiling(gpu).share * sustained_share(gpu).share * (TF32_MATMUL_SHARE if tf32 else 1.0)


def _gemm_fill(gpu: GpuSpec, tokens: int, width: int) -> float:
    """Share of the SMs a GEMM of ``tokens`` rows and ``width`` output columns keeps busy: one GEMM_TILE x GEMM_TILE
    tile per SM, so fewer tiles than SMs leave the rest idle (a short sequence at batch 1). ``width`` is the MLP's,
    whose GEMMs carry most of the FLOPs."""
    if not gpu.sm_count:
        return 1.0
    tiles = math.ceil(tokens / GEMM_TILE) * math.ceil(width / GEMM_TILE)
    return min(1.0, tiles / gpu.sm_count)


def matmul_efficiency(spec: ModelSpec, gpu: GpuSpec, job: Job) -> float:
    """Share of the dense tensor rate a transformer's training matmuls reach: the GPU's measured ceiling, times the
    tile's fixed cost over its inner loop (hidden / (hidden + GEMM_K_OVERHEAD)), times the SMs a micro-batch's
    tiles keep busy."""
    hidden = spec.hidden or 0
    tokens = job.batch * job.context
    return (_ceiling_share(gpu, job) * TRAINING_MATMUL_SHARE
            * hidden / (hidden + GEMM_K_OVERHEAD)
            * _gemm_fill(gpu, tokens, _mlp_channels(spec)))


def _elementwise_bytes_per_token(spec: ModelSpec, job: Job) -> float:
    """Bytes a token moves through a training micro-batch's elementwise kernels: per layer and pass the norms'
    and residuals' ELEMENTWISE_BYTES_PER_HIDDEN * hidden and the MLP activation's bytes per channel, forward (again
    when recomputed) and BACKWARD_ELEMENTWISE_PASSES times in the backward; the loss's LOGIT_BYTES per vocabulary
    entry; and without flash attention, each materialized score's TRAINING_SCORE_BYTES."""
    hidden = spec.hidden or 0
    mlp = _mlp_channels(spec)
    forward = (spec.layers or 0) * (ELEMENTWISE_BYTES_PER_HIDDEN * hidden + MLP_ACTIVATION_BYTES[spec.gated_mlp] * mlp)
    passes = 1 + BACKWARD_ELEMENTWISE_PASSES + job.recompute_forward_fraction
    scores = 0.0 if job.flash_attention else attention_scores(spec, job.context, 0) / job.context
    moved = (forward * passes + TRAINING_SCORE_BYTES * scores) * (1 if job.mixed_precision else 2)
    if spec.kind == "decoder":
        moved += LOGIT_BYTES * (spec.vocab or 0)
    return moved


def _mlp_channels(spec: ModelSpec) -> int:
    """The MLP width a token passes through: the dense MLP's, or its active and shared experts'."""
    if spec.moe is not None and spec.hidden:
        return spec.moe.expert_params // (3 * spec.hidden) * (spec.moe.active + spec.moe.shared)
    return spec.intermediate or 4 * (spec.hidden or 0)


def _bandwidth_s(gpu: GpuSpec, moved: float) -> float:
    return moved / (gpu.memory_bandwidth_gbps * 1e9 * TRAINING_BANDWIDTH_EFFICIENCY)


def training_micro_parts(spec: ModelSpec, gpu: GpuSpec, job: Job,
                         attention_kernel: str = ATTENTION_KERNEL) -> tuple[StepPart, ...] | None:
    """One micro-batch of ``job.batch`` samples on one GPU holding the whole model, item by item: matmuls at their
    reachable rate ("compute"), flash attention, the elementwise kernels' memory traffic, the weights' casts and
    gradient accumulation (or QLoRA's dequantization), and the host's launch time where the GPU would wait on it.
    None when the GPU has no usable rate or the model no FLOP count."""
    peak = peak_flops(gpu, _training_dtype(job, gpu))
    if peak is None:
        return None
    if not spec.is_transformer:
        return _cnn_micro_parts(spec, gpu, job, peak)
    tokens = job.batch * job.context
    efficiency = matmul_efficiency(spec, gpu, job)
    matmul_flops = _param_factor(job) * _matmul_params(spec) * tokens
    attention = _attention_forward_flops(spec, job.context) * tokens * (3.5 + job.recompute_forward_fraction)
    attention_share = attention_ceiling(gpu, attention_kernel) if job.flash_attention else efficiency
    parts = [
        StepPart("compute", matmul_flops / (peak * efficiency), _(
            "matmuls at {share} of the {rate} TFLOP/s peak: the {ceiling} the GPU sustains x the hidden size's and "
            "the micro-batch's factors").format(share=f"{efficiency:.0%}", rate=f"{peak / 1e12:,.0f}",
                                                ceiling=f"{_ceiling_share(gpu, job):.0%}")),
        StepPart("attention", attention / (peak * attention_share), _(
            "{kernel} forward and backward (2.5 forwards) at {share} of peak").format(
                kernel=attention_kernel if job.flash_attention else _("attention as GEMMs"),
                share=f"{attention_share:.0%}")),
        StepPart("elementwise memory traffic", _bandwidth_s(gpu, _elementwise_bytes_per_token(spec, job) * tokens), _(
            "norms, residuals, activations and the loss at {share} of the memory bandwidth").format(
                share=f"{TRAINING_BANDWIDTH_EFFICIENCY:.0%}")),
    ]
    weights = _weight_traffic_part(spec, gpu, job)
    if weights is not None:
        parts.append(weights)
    gpu_s = sum(part.seconds for part in parts)
    passes = 2 + job.recompute_forward_fraction
    host = (spec.layers or 1) * passes * TRAINING_HOST_S_PER_LAYER_PASS
    if host > gpu_s:
        parts.append(StepPart("host launch floor", host - gpu_s, _(
            "the GPU waits on the host: {passes} passes x {layers} layers x {us} us of kernel launches").format(
                passes=passes, layers=spec.layers or 1, us=f"{TRAINING_HOST_S_PER_LAYER_PASS * 1e6:.0f}")))
    return tuple(parts)


def _weight_traffic_part(spec: ModelSpec, gpu: GpuSpec, job: Job) -> StepPart | None:
    """The per-micro-batch traffic over the weights themselves: QLoRA's NF4 dequantization in each pass, or full
    mixed-precision training's weight casts and gradient accumulation."""
    if job.task == "qlora":
        passes = 2 + job.recompute_forward_fraction
        return StepPart("NF4 dequantization", _bandwidth_s(gpu, passes * _matmul_params(spec) * NF4_DEQUANT_BYTES), _(
            "{passes} passes read NF4 weights and write 16-bit copies").format(passes=passes))
    if job.task == "full" and job.precision == "mixed":
        return StepPart(WEIGHT_TRAFFIC, _bandwidth_s(
            gpu, spec.params * AMP_PARAM_BYTES_PER_MICROBATCH), _(
            "{bytes} B per parameter: fp32 weights cast to 16 bits, 16-bit gradients added to fp32").format(
                bytes=AMP_PARAM_BYTES_PER_MICROBATCH))
    return None


def _cnn_micro_parts(spec: ModelSpec, gpu: GpuSpec, job: Job, peak: float) -> tuple[StepPart, ...] | None:
    """A non-transformer's micro-batch: its measured forward FLOPs three times (forward and backward) at the
    matmul ceiling, and CONV_TRAFFIC_PER_ACTIVATION_BYTE bytes per saved activation byte at the memory bandwidth
    (batch norm, ReLU and their gradients, unfused)."""
    if not spec.forward_flops_per_sample:
        return None
    share = _ceiling_share(gpu, job)
    parts = [StepPart("compute", 3 * spec.forward_flops_per_sample * job.batch / (peak * share), _(
        "convolutions and matmuls at {share} of the {rate} TFLOP/s peak").format(
            share=f"{share:.0%}", rate=f"{peak / 1e12:,.0f}"))]
    saved = (spec.activation_bytes_per_sample or 0) * (0.5 if job.mixed_precision else 1.0) * job.batch
    if saved:
        parts.append(StepPart("elementwise memory traffic", _bandwidth_s(gpu, saved * CONV_TRAFFIC_PER_ACTIVATION_BYTE),
                              _("batch norm, activations and their gradients: {factor} B per saved activation "
                                "byte").format(factor=f"{CONV_TRAFFIC_PER_ACTIVATION_BYTE:g}")))
    return tuple(parts)


def trainable_params(spec: ModelSpec, job: Job) -> int:
    """Parameters the optimizer updates: all of them for full training, the adapters for LoRA and QLoRA."""
    return spec.params if job.task == "full" else lora_adapter_params(spec, job)


def optimizer_step_part(spec: ModelSpec, gpu: GpuSpec, job: Job) -> StepPart:
    """The optimizer step, once per step whatever the batch: OPTIMIZER_BYTES_PER_PARAM plus gradient clipping's
    GRAD_CLIP_BYTES_PER_PARAM per trainable parameter this GPU holds (tensor and pipeline parallelism split them,
    ZeRO-1 and up split the optimizer over the data-parallel GPUs), at the memory bandwidth."""
    tp, pp, dp = job.layout
    shard = tp * pp * (dp if job.zero >= 1 else 1)
    per_param = OPTIMIZER_BYTES_PER_PARAM[job.optimizer] + GRAD_CLIP_BYTES_PER_PARAM
    if job.precision == "bf16":
        per_param //= 2
    params = trainable_params(spec, job) / shard
    if job.offload != "none":
        return _host_optimizer_step(gpu, job, params, per_param)
    return StepPart("optimizer step", _bandwidth_s(gpu, params * per_param), _(
        "{optimizer}: {bytes} B per trainable parameter ({params}M on this GPU) once per step").format(
            optimizer=job.optimizer, bytes=per_param, params=f"{params / 1e6:,.1f}"))


def _host_optimizer_step(gpu: GpuSpec, job: Job, params: float, per_param: int) -> StepPart:
    """The step under ``--offload``: gradients down and weights up over PCIe, and the optimizer on the CPU at
    HOST_OPTIMIZER_GBPS (an assumption, said in the item); neither overlaps the GPU's work in this model."""
    from gpufly.estimate.comms import intra_link

    link = intra_link(gpu, "pcie", 1)
    seconds = params * OFFLOAD_LINK_BYTES_PER_PARAM / (link.bus_gbps * 1e9) + params * per_param / (
        HOST_OPTIMIZER_GBPS * 1e9)
    return StepPart("optimizer step", seconds, _(
        "{optimizer} on the CPU (--offload {offload}): {bytes} B per parameter ({params}M) at an assumed {host} GB/s "
        "of host memory bandwidth, and {link} B per parameter over {pcie}").format(
            optimizer=job.optimizer, offload=job.offload, bytes=per_param, params=f"{params / 1e6:,.1f}",
            host=f"{HOST_OPTIMIZER_GBPS:g}", link=OFFLOAD_LINK_BYTES_PER_PARAM, pcie=link.label))


def _one_gpu_microbatches(job: Job) -> int:
    return job.global_batch // job.batch if job.global_batch and job.global_batch % job.batch == 0 else 1


def training_step_s_per_sample(spec: ModelSpec, gpu: GpuSpec, job: Job,
                               attention_kernel: str = ATTENTION_KERNEL) -> float | None:
    """Seconds per sample on one GPU holding the whole model: a micro-batch's items (training_micro_parts) over its
    samples, plus the optimizer step spread over the step's samples (more micro-batches or a bigger batch make it
    cheaper per sample)."""
    parts = training_micro_parts(spec, gpu, job, attention_kernel)
    if parts is None:
        return None
    m = _one_gpu_microbatches(job)
    micro = sum(part.seconds for part in parts)
    return (micro + optimizer_step_part(spec, gpu, job).seconds / m) / job.batch


def training_speed(spec: ModelSpec, gpu: GpuSpec, job: Job, attention_kernel: str = ATTENTION_KERNEL) -> Speed:
    """Training throughput on ``job.world`` GPUs: one step item by item (its micro-batches' matmuls, attention,
    memory traffic and host floor, the optimizer step, and on several GPUs the communication as
    estimate/parallel.py splits it)."""
    from gpufly.estimate.parallel import training_step

    parts = training_micro_parts(spec, gpu, job, attention_kernel)
    if parts is None:
        if peak_flops(gpu, _training_dtype(job, gpu)) is None:
            return Speed(why=_("{vendor} publishes no dense tensor rate for the {gpu}").format(
                vendor=gpu.vendor.upper(), gpu=gpu.name))
        return Speed(why=_("no FLOP count for this model"))
    if job.world > 1:
        step = training_step(spec, gpu, job, attention_kernel)
        assert step is not None
        samples, steps = step.samples_s, step.parts
    else:
        m = _one_gpu_microbatches(job)
        how = _("one GPU, micro-batch {batch}").format(batch=job.batch) + (f" x {m}" if m > 1 else "")
        first, *rest = parts
        steps = (StepPart(first.name, first.seconds * m, f"{first.note}; {how}"),
                 *(StepPart(part.name, part.seconds * m, part.note) for part in rest),
                 optimizer_step_part(spec, gpu, job))
        samples = job.batch * m / sum(part.seconds for part in steps)
    bound = "compute and communication" if any(p.communication for p in steps) else "compute and memory"
    if spec.is_transformer:
        return Speed(train_tokens_s=samples * job.context, train_samples_s=samples, bound=bound, step=steps)
    return Speed(train_samples_s=samples, bound=bound, step=steps)


def inference_speed(spec: ModelSpec, gpu: GpuSpec, job: Job, prompt_tokens: int | None = None) -> Speed:
    """Decode tok/s at the end of the context (the slowest point), prefill tok/s for the prompt: ``prompt_tokens``,
    else the job's --prompt, else half the context (a prompt and an answer of the same length)."""
    kv_bytes(job.kv_format)
    if not spec.is_transformer or spec.kind != "decoder":
        return Speed(why=_("token speeds apply to decoder language models"))
    prompt = prompt_tokens if prompt_tokens is not None else job.prompt or max(1, job.context // 2)
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
        prompt_tokens=prompt,
    )


def speed(spec: ModelSpec, gpu: GpuSpec, job: Job) -> Speed:
    """Predicted decode and prefill tokens/s for inference, or training tokens (samples)/s."""
    return training_speed(spec, gpu, job) if job.training else inference_speed(spec, gpu, job)
