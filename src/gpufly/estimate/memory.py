"""Memory breakdowns per GPU for inference and training, term by term, with the formula's source.

Conventions: bytes as int; per GPU. Inference across N GPUs is tensor parallel (weights and KV
heads split); training across N GPUs is data parallel, with ZeRO/FSDP sharding when asked, and
``Job.batch`` is the micro-batch on each GPU. docs/estimates.md gives every formula and source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufly.errors import GpuflyError, unknown_choice
from gpufly.estimate.engines import ALLOCATOR_FRAGMENTATION, ENGINES, GIB, Engine, engine
from gpufly.estimate.formats import WeightFormat, kv_bytes, kv_key, same_format, weight_format
from gpufly.estimate.job import DEFAULT_LORA_TARGETS, Job
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec

LLAMA_CPP_BATCH = 512
"""llama.cpp's default n_batch, which sizes its compute buffer."""
LLAMA_CPP_CTX_PAD = 256
VLLM_MAX_BATCHED_TOKENS = 8192
"""vLLM profiles its activation peak at max_num_batched_tokens (8192 with chunked prefill)."""
OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "adamw8bit": 2.0, "sgd": 0.0, "sgd-momentum": 4.0}
"""Bytes of optimizer state per trainable parameter: Adam's two fp32 moments; bitsandbytes 8-bit
Adam's two int8 moments (Dettmers et al. 2022, block constants ignored); SGD's fp32 momentum.
Adafactor is computed from the matrix shapes (factored second moment, Shazeer and Stern 2018)."""


@dataclass(frozen=True)
class MemoryItem:
    name: str
    bytes: int
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "note": self.note}


@dataclass(frozen=True)
class MemoryBreakdown:
    """What one GPU holds for the job, item by item."""

    items: tuple[MemoryItem, ...]
    gpus: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(item.bytes for item in self.items)

    def get(self, name: str) -> int:
        return sum(item.bytes for item in self.items if item.name == name)

    def without(self, *names: str) -> int:
        return sum(item.bytes for item in self.items if item.name not in names)

    def to_dict(self) -> dict[str, Any]:
        return {"per_gpu_total_bytes": self.total_bytes, "gpus": self.gpus,
                "items": [item.to_dict() for item in self.items], "notes": list(self.notes)}


def lm_head_params(spec: ModelSpec) -> int:
    if spec.tie_embeddings or spec.vocab is None or spec.hidden is None:
        return 0
    return spec.vocab * spec.hidden


def exact_bytes(spec: ModelSpec, fmt: WeightFormat) -> bool:
    """Whether the source states the weights' bytes in ``fmt`` (a GGUF file read in its own format)."""
    return spec.weight_bytes is not None and spec.weight_format is not None and same_format(spec.weight_format,
                                                                                              fmt.name)


def weight_bytes(spec: ModelSpec, fmt: WeightFormat) -> int:
    """Bytes of all weights in ``fmt``; exact from the file when the source is a file in that format."""
    if exact_bytes(spec, fmt):
        assert spec.weight_bytes is not None
        return spec.weight_bytes
    kept = spec.embedding_params + lm_head_params(spec) if fmt.keeps_embeddings_16bit else 0
    return round((spec.params - kept) * fmt.bits_per_weight / 8 + kept * 2)


def kv_cache_bytes(spec: ModelSpec, tokens: int, batch: int, kv_format: str) -> int:
    """KV cache for ``batch`` sequences of ``tokens``: GQA heads, MLA latents, sliding windows.

    MHA/GQA: 2 (K and V) x kv_heads x head_dim x bytes per layer and token. MLA: one latent of
    kv_lora_rank plus a RoPE key of rope_head_dim, no factor 2 (DeepSeek-V2 paper, section 2.1).
    Sliding-window layers hold at most ``sliding_window`` tokens.
    """
    attention = spec.attention
    if attention is None or spec.layers is None or spec.kind not in ("decoder",):
        return 0
    element = kv_bytes(kv_format)
    if attention.kind == "mla":
        per_layer_token = (attention.kv_lora_rank + attention.rope_head_dim) * element
    else:
        per_layer_token = 2 * attention.kv_heads * attention.head_dim * element
    full_layers = spec.layers - attention.sliding_layers
    windowed = min(tokens, attention.sliding_window) if attention.sliding_window else tokens
    token_layers = full_layers * tokens + attention.sliding_layers * windowed
    return round(per_layer_token * token_layers * batch)


def _mlp_width(spec: ModelSpec) -> int:
    """Intermediate width one token passes through: the dense MLP, or its active experts."""
    if spec.moe is not None and spec.hidden:
        expert_width = spec.moe.expert_params // (3 * spec.hidden)
        return expert_width * (spec.moe.active + spec.moe.shared)
    return spec.intermediate or 4 * (spec.hidden or 0)


def _prefill_activation_bytes(spec: ModelSpec, tokens: int) -> int:
    """Peak of one layer's live tensors in a 16-bit prefill of ``tokens`` (flash attention): the
    gate, up and activated MLP outputs (3F) beside the residual, norm and attention output (4h).
    Calibrated on Qwen2.5's published transformers memory table (docs/calibration.md)."""
    h = spec.hidden or 0
    return tokens * (3 * _mlp_width(spec) + 4 * h) * 2


def _llama_cpp_compute_buffer(spec: ModelSpec, context: int) -> int:
    """llama.cpp's CUDA compute buffer with every layer offloaded, by ollama's GraphSize formula for llama-style
    models (fs/ggml/ggml.go; llm/memory.go sums it per GPU): the attention scores of one n_batch of queries against
    the whole context in fp32, 4 * n_batch * (1 + 4h + n_ctx * (1 + heads)), or the logits of a batch,
    4 * n_batch * (h + vocab), whichever is larger. Llama-3-8B at n_ctx 8192: 560 MiB; without flash attention,
    as llama-bench ran in the calibration rows (-fa 0, its default before 2025), this is the buffer llama.cpp
    reserves."""
    h, heads, vocab = spec.hidden or 0, spec.heads or 0, spec.vocab or 0
    n = LLAMA_CPP_BATCH
    return max(4 * n * (1 + 4 * h + context * (1 + heads)), 4 * n * (h + vocab))


def _context_items(items: list[MemoryItem], context_bytes: int, note: str) -> list[MemoryItem]:
    """A PyTorch process's items: the caching allocator's share on top, then the CUDA context."""
    fragmentation = round(sum(item.bytes for item in items) * ALLOCATOR_FRAGMENTATION)
    return [*items, MemoryItem("allocator", fragmentation, _("{share} rounding and fragmentation").format(
        share=f"{ALLOCATOR_FRAGMENTATION:.0%}")), MemoryItem("runtime", context_bytes, note)]


def host_embedding_bytes(spec: ModelSpec, fmt: WeightFormat) -> int:
    """Bytes of the token embedding llama.cpp keeps in host memory at any -ngl ("there is very little benefit to
    offloading the input layer, so always keep it on the CPU", src/llama-model.cpp, dev_input): the whole table
    when the model has its own LM head; none when the head is tied, since llama.cpp then loads a copy of the table
    on the GPU as the output layer (TENSOR_DUPLICATED). Llama-3-8B F16: 1002 MiB, the "CPU buffer size" its log
    prints."""
    if spec.tie_embeddings or not spec.embedding_params:
        return 0
    if exact_bytes(spec, fmt) and spec.embedding_bytes is not None:
        return spec.embedding_bytes
    bits = 16 if fmt.keeps_embeddings_16bit else fmt.bits_per_weight
    return round(spec.embedding_params * bits / 8)


def _weights_note(spec: ModelSpec, fmt: WeightFormat) -> str:
    if exact_bytes(spec, fmt):
        return _("{params} params at {format}, exact bytes from the file").format(
            params=f"{spec.params:,}", format=fmt.name)
    return _("{params} params at {format} ({bits} bits/weight)").format(
        params=f"{spec.params:,}", format=fmt.name, bits=f"{fmt.bits_per_weight:.3g}")


_GGUF_COUSIN = {8: "q8_0", 4: "q4_k_m"}
"""The GGUF format nearest a PyTorch-side format of that many bits, for the mismatch note."""


def check_format(runtime: Engine, fmt: WeightFormat) -> None:
    """Refuse weights the engine cannot run, naming the engines that can."""
    if runtime.runs(fmt):
        return
    able = [other.name for other in ENGINES.values() if other.runs(fmt)
            and (fmt.engine_family == "gguf") == (other.family == "llama.cpp")]
    raise GpuflyError(_("{engine} does not run {format} weights").format(engine=runtime.display, format=fmt.name),
                      hint=_("engines that run {format}: {engines}").format(format=fmt.name, engines=", ".join(able)))


def engine_format_note(runtime: Engine, fmt: WeightFormat) -> str | None:
    """A warning where the engine does not run the format natively (the estimate goes on with the
    format's size): GGUF types outside llama.cpp, bitsandbytes/GPTQ/AWQ/fp8 inside it."""
    if fmt.engine_family == "gguf" and runtime.name == "transformers":
        return _("transformers does not run GGUF {format} weights: it dequantizes a GGUF file to 16-bit when it "
                 "loads it (the estimate keeps {format}'s size); use --engine llama.cpp").format(format=fmt.name)
    if fmt.engine_family == "gguf" and runtime.name == "vllm":
        return _("vLLM's GGUF support is experimental and it runs its own formats (fp8, int8, int4 AWQ/GPTQ) "
                 "better than {format}: use --engine llama.cpp for a GGUF model, or --quant int4 with vLLM").format(
            format=fmt.name)
    if fmt.engine_family == "torch" and runtime.name == "llama.cpp" and fmt.bits_per_weight < 16:
        cousin = _GGUF_COUSIN.get(round(fmt.bits_per_weight), "q4_k_m")
        return _("llama.cpp does not run {format} weights (it runs GGUF types): --quant {nearest} is its nearest "
                 "format").format(format=fmt.name, nearest=cousin)
    return None


def engine_kv_note(runtime: Engine, kv_format: str) -> str | None:
    """A warning where the engine cannot hold its KV cache in ``kv_format`` (the estimate goes on with
    that format's size): fp8 in llama.cpp, q8_0/q4_0 in vLLM, anything but the model's dtype in transformers."""
    kv = kv_key(kv_format)
    if kv in runtime.kv_formats:
        return None
    size = kv_bytes(kv)
    nearest = min(runtime.kv_formats, key=lambda name: abs(kv_bytes(name) - size))
    others = [other.name for other in ENGINES.values() if kv in other.kv_formats]
    elsewhere = _(", or --engine {engine} runs it").format(engine=others[0]) if others else ""
    return _("{engine} has no {kv} KV cache (its KV formats: {formats}): --kv {nearest} is its nearest{elsewhere} "
             "(the estimate keeps {kv}'s size)").format(engine=runtime.display, kv=kv,
                                                        formats=", ".join(runtime.kv_formats), nearest=nearest,
                                                        elsewhere=elsewhere)


def inference_memory(spec: ModelSpec, job: Job) -> MemoryBreakdown:
    """Memory per GPU to serve ``spec`` as ``job`` says, tensor parallel across ``job.gpus``."""
    fmt = weight_format(job.quant)
    runtime = engine(job.engine)
    check_format(runtime, fmt)
    tp, stages = job.gpus, job.nodes
    weights = weight_bytes(spec, fmt)
    context = job.context
    if runtime.preallocates_context:
        context = -(-context // LLAMA_CPP_CTX_PAD) * LLAMA_CPP_CTX_PAD
    kv = kv_cache_bytes(spec, context, job.batch, job.kv_format)
    kv_split = 1 if spec.attention is None or spec.attention.kind == "mla" else min(tp, spec.attention.kv_heads or 1)
    notes: list[str] = []
    weights_note = _weights_note(spec, fmt)
    if runtime.family == "llama.cpp":
        activations = _llama_cpp_compute_buffer(spec, context)
        act_note = _("compute buffer at n_ctx {context}, n_batch {batch} (ollama's GraphSize formula)").format(
            context=f"{context:,}", batch=LLAMA_CPP_BATCH)
        on_host = host_embedding_bytes(spec, fmt)
        if on_host:
            weights -= on_host
            weights_note += _("; the token embedding ({size} GiB) stays in host memory").format(
                size=f"{on_host / GIB:.2f}")
    elif spec.is_transformer:
        tokens = context * job.batch
        if runtime.name == "vllm":
            tokens = min(tokens, VLLM_MAX_BATCHED_TOKENS)
        elif runtime.activation_tokens:
            tokens = min(tokens, runtime.activation_tokens)
        activations = _prefill_activation_bytes(spec, tokens) // tp + job.batch * (spec.vocab or 0) * 4
        act_note = _("prefill peak for {tokens} tokens (flash attention) + fp32 logits of the last token").format(
            tokens=f"{tokens:,}")
    else:
        activations = round((spec.activation_bytes_per_sample or 0) * job.batch)
        act_note = _("upper bound: the activations a training step saves, per sample x batch")
    split = (_(", split over {count} GPUs").format(count=tp) if tp > 1 else "") + (
        _(", a pipeline stage per node ({stages})").format(stages=stages) if stages > 1 else "")
    items = [
        MemoryItem("weights", weights // (tp * stages), weights_note + split),
        MemoryItem("kv_cache", kv // (kv_split * stages), _("{batch} x {context} tokens at {format}").format(
            batch=job.batch, context=f"{context:,}", format=job.kv_format)),
        MemoryItem("activations", activations, act_note),
    ]
    notes += [note for note in (engine_format_note(runtime, fmt), engine_kv_note(runtime, job.kv_format)) if note]
    if runtime.name == "vllm":
        notes.append(_("vLLM takes gpu_memory_utilization x VRAM ({share}) at start and fills what is left with KV "
                       "cache blocks").format(share=f"{job.gpu_memory_utilization:.0%}"))
    elif runtime.share_holds_weights_and_kv:
        notes.append(_("{engine} holds its weights and KV cache pool in {share} of each GPU's memory (its documented "
                       "default) and fills what the weights leave of it with KV cache").format(
            engine=runtime.display, share=f"{runtime.memory_share:.0%}"))
    elif runtime.memory_share < 1:
        notes.append(_("{engine} takes {share} of each GPU's memory at start and fills what is left with KV cache "
                       "(its documented default)").format(engine=runtime.display, share=f"{runtime.memory_share:.0%}"))
    if runtime.kv_free_fraction:
        notes.append(_("{engine} gives {share} of the memory left after weights and buffers to its KV cache (its "
                       "documented default)").format(engine=runtime.display, share=f"{runtime.kv_free_fraction:.0%}"))
    runtime_note = _("{engine} CUDA context and buffers").format(engine=runtime.name)
    if runtime.family == "llama.cpp":
        return MemoryBreakdown((*items, MemoryItem("runtime", runtime.context_bytes, runtime_note)), gpus=tp,
                               notes=tuple(notes))
    return MemoryBreakdown(tuple(_context_items(items, runtime.context_bytes, runtime_note)), gpus=tp,
                           notes=tuple(notes))


def _adafactor_state_bytes(spec: ModelSpec) -> int:
    matrices = sum(count * (rows + cols) for rows, cols, count in spec.linear_shapes.values())
    in_matrices = sum(count * rows * cols for rows, cols, count in spec.linear_shapes.values())
    return 4 * (matrices + (spec.params - in_matrices))


def _optimizer_state_bytes(spec: ModelSpec, job: Job, trainable: int) -> int:
    if job.optimizer == "adafactor":
        return _adafactor_state_bytes(spec) if job.task == "full" else 4 * trainable
    return round(OPTIMIZER_STATE_BYTES[job.optimizer] * trainable)


def _targets(name: str, target: str) -> bool:
    """PEFT's rule: a target names a module whose name is it or ends with ``.target``."""
    return name == target or name.endswith("." + target)


def lora_adapter_params(spec: ModelSpec, job: Job) -> int:
    """r x (in + out) per adapted matrix, over the target modules the model has."""
    return sum(job.lora_rank * (rows + cols) * count for name, (rows, cols, count) in spec.linear_shapes.items()
               if any(_targets(name, target) for target in job.lora_targets))


def lora_targets(spec: ModelSpec, targets: tuple[str, ...] | None) -> tuple[str, ...]:
    """The modules LoRA adapts: ``targets`` as the user named them, each one a linear layer of the
    model, or (None) the default projections the model has. A name it lacks is refused with the
    closest ones; a model with none of the defaults is refused with its own layer names."""
    names = sorted(spec.linear_shapes)
    choices = sorted({*names, *(name.rsplit(".", 1)[-1] for name in names)})
    if not names:
        raise GpuflyError(f"{spec.name} has no linear layers for LoRA to adapt",
                          hint="LoRA adds adapters to nn.Linear layers; use --task full for this model")
    shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
    if targets is None:
        found = tuple(t for t in DEFAULT_LORA_TARGETS if any(_targets(name, t) for name in names))
        if not found:
            raise GpuflyError(f"{spec.name} has none of the default LoRA targets ({', '.join(DEFAULT_LORA_TARGETS)})",
                              hint=f"name its linear layers with --lora-targets (it has: {shown})")
        return found
    for target in targets:
        if not any(_targets(name, target) for name in names):
            raise unknown_choice("LoRA target module", target, choices,
                                 hint=f"{spec.name}'s linear layers: {shown}")
    return targets


def training_activation_bytes(spec: ModelSpec, job: Job) -> tuple[int, str]:
    """Activations saved for backward on one GPU, and how they were counted.

    Transformers: per layer s*b*(12h + 4*k*d + 8F) bytes at 16-bit (the Korthikanti et al. 2022
    accounting generalised to RMSNorm, GQA and gated MLPs, no dropout) plus flash attention's fp32
    log-sum-exp (4*a*s*b), or eager attention's score and softmax matrices (4*a*s^2*b); full
    checkpointing keeps 2*s*b*h per layer plus one layer being recomputed. Logits: 16-bit logits,
    their fp32 upcast and its gradient, 10*b*s*V. Other models: the fake-tensor count per sample.
    """
    scale = 1 if job.mixed_precision else 2
    if not spec.is_transformer:
        per_sample = spec.activation_bytes_per_sample
        if per_sample is None:
            return 0, _("unknown: no activation measurement for this model")
        factor = 0.5 if job.mixed_precision else 1.0
        return round(per_sample * job.batch * factor), (
            _("fake-tensor count of saved tensors, halved for 16-bit autocast") if job.mixed_precision
            else _("fake-tensor count of saved tensors"))
    assert spec.attention is not None and spec.layers is not None and spec.hidden is not None
    s, b, h, heads = job.context, job.batch, spec.hidden, spec.heads or 1
    kv_width = (2 * spec.attention.kv_heads * spec.attention.head_dim if spec.attention.kind == "mha"
                else spec.attention.kv_lora_rank + spec.attention.rope_head_dim)
    per_layer = s * b * (12 * h + 2 * kv_width + 8 * _mlp_width(spec)) * scale
    per_layer += 4 * heads * s * b if job.flash_attention else 4 * heads * s * s * b * scale
    if job.checkpointing:
        body = spec.layers * 2 * s * b * h * scale + per_layer
        how = _("full checkpointing: layer inputs kept, one layer recomputed")
    else:
        body = spec.layers * per_layer
        how = (_("all layers' activations (flash attention)") if job.flash_attention
               else _("all layers' activations (eager attention)"))
    logits = 10 * b * s * (spec.vocab or 0) if spec.kind == "decoder" else 0
    return body + logits, how


def _shards(job: Job) -> dict[str, int]:
    """How many ways each kind of state is split: tensor x pipeline parallelism splits all of it (each GPU holds its
    layers' slices); ZeRO then splits over the data-parallel GPUs, stage 1 the optimizer, 2 the gradients, 3 the
    weights."""
    tp, pp, dp = job.layout
    return {name: tp * pp * (dp if job.zero >= stage else 1) for name, stage in
            (("optimizer", 1), ("gradients", 2), ("weights", 3))}


def _zero_note(job: Job) -> str:
    """`` / 4 (ZeRO-3)``: a state split across the data-parallel GPUs by the job's ZeRO stage (empty on one GPU)."""
    dp = job.data_parallel
    return f" / {dp} (ZeRO-{job.zero})" if job.zero and dp > 1 else ""


def _model_parallel_note(job: Job) -> str:
    """`` / 8 (tp 8 x pp 2)``... : what tensor and pipeline parallelism split before ZeRO does."""
    tp, pp, _dp = job.layout
    return f" / {tp * pp} (tp {tp} x pp {pp})" if tp * pp > 1 else ""


def _lora_items(spec: ModelSpec, job: Job) -> list[MemoryItem]:
    """LoRA and QLoRA: the frozen base (sharded at ZeRO-3, as FSDP-QLoRA does), and fp32 adapters whose
    gradients (ZeRO-2) and optimizer states (ZeRO-1) shard like a full model's."""
    shard = _shards(job)
    base = weight_format("nf4" if job.task == "qlora" else job.quant)
    adapters = lora_adapter_params(spec, job)
    zero_note, split = _zero_note(job), _model_parallel_note(job)
    adapter_bytes = 4 * adapters // shard["weights"] + 4 * adapters // shard["gradients"]
    return [
        MemoryItem("weights", weight_bytes(spec, base) // shard["weights"],
                   _("frozen base at {format}").format(format=base.name) + split
                   + (zero_note if job.zero >= 3 else "")),
        MemoryItem("lora_adapters", adapter_bytes,
                   _("rank {rank} on {targets}: {params} params, fp32 weights and gradients").format(
                       rank=job.lora_rank, targets=", ".join(job.lora_targets), params=f"{adapters:,}")
                   + split + (zero_note if job.zero >= 2 else "")),
        MemoryItem("optimizer", _optimizer_state_bytes(spec, job, adapters) // shard["optimizer"],
                   _("{optimizer} states").format(optimizer=job.optimizer) + split
                   + (zero_note if job.zero >= 1 else "")),
    ]


def training_memory(spec: ModelSpec, job: Job) -> MemoryBreakdown:
    """Memory per GPU to train ``spec`` as ``job`` says (ZeRO accounting, Rajbhandari et al. 2020)."""
    n = job.gpus
    items: list[MemoryItem] = []
    if job.task == "full":
        params = spec.params
        weight_b, grad_b = (2, 2) if job.mixed_precision else (4, 4)
        master = 4 * params if job.mixed_precision else 0
        states = _optimizer_state_bytes(spec, job, params)
        shard = _shards(job)
        zero_note, split = _zero_note(job), _model_parallel_note(job)
        items += [
            MemoryItem("weights", weight_b * params // shard["weights"],
                       _("{params} params at {size} B").format(params=f"{params:,}", size=weight_b)
                       + split + (zero_note if job.zero >= 3 else "")),
            MemoryItem("gradients", grad_b * params // shard["gradients"],
                       _("{size} B per param").format(size=grad_b) + split + (zero_note if job.zero >= 2 else "")),
            MemoryItem("optimizer", (master + states) // shard["optimizer"],
                       (_("fp32 master weights + {optimizer} states") if master else _("{optimizer} states")).format(
                           optimizer=job.optimizer) + split + (zero_note if job.zero >= 1 else "")),
        ]
    else:
        items += _lora_items(spec, job)
    activations, how = training_activation_bytes(spec, job)
    tp = job.layout[0]
    if tp > 1:
        activations //= tp
        how += _("; / {tp}: tensor parallel with sequence parallelism (Korthikanti et al. 2022)").format(tp=tp)
    items.append(MemoryItem("activations", activations, _("micro-batch {batch} x {context}: {how}").format(
        batch=job.batch, context=f"{job.context:,}", how=how)))
    notes = (job.checkpointing_reason,) if spec.is_transformer else ()
    return MemoryBreakdown(tuple(_context_items(items, engine("transformers").context_bytes,
                                                _("PyTorch CUDA context"))), gpus=n, notes=notes)


def memory(spec: ModelSpec, job: Job) -> MemoryBreakdown:
    """The memory one GPU needs for the job, item by item in bytes (weights, KV cache, activations, ...)."""
    return training_memory(spec, job) if job.training else inference_memory(spec, job)
