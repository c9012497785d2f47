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
from gpufly.estimate.job import DEFAULT_LORA_TARGETS, PAGED_OPTIMIZERS, Job
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec

LLAMA_CPP_BATCH = 512
"""llama.cpp's default n_batch, which sizes its compute buffer."""
LLAMA_CPP_CTX_PAD = 256
VLLM_MAX_BATCHED_TOKENS = 8192
"""vLLM profiles its activation peak at max_num_batched_tokens (8192 with chunked prefill)."""
OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "adamw8bit": 2.0, "paged-adamw": 8.0, "paged-adamw8bit": 2.0, "sgd": 0.0,
                         "sgd-momentum": 4.0}
"""Bytes of optimizer state per trainable parameter: Adam's two fp32 moments; bitsandbytes 8-bit
Adam's two int8 moments (Dettmers et al. 2022, block constants ignored), paged or not; SGD's fp32 momentum.
Adafactor is computed from the matrix shapes (factored second moment, Shazeer and Stern 2018)."""
EIGHT_BIT_OPTIMIZERS = ("adamw8bit", "paged-adamw8bit")
MLP_SAVED_BYTES = {True: 8, False: 4}
"""Bytes per token and MLP channel a training step saves for the MLP's backward in 16 bits, by whether the MLP is
gated: four F-wide tensors (gate, up, activated gate, product) against two (the first projection's output and its
activation's)."""
LOGITS_BYTES = 14
"""Bytes per token and vocabulary entry transformers' causal-LM loss holds at its peak. transformers 4.46-4.47: the
16-bit logits the model returns (2), their fp32 upcast (4), the shifted contiguous copy (4) and log_softmax's fp32
output, kept for backward (4). 4.48+ shifts the labels instead: 10 in forward, and in backward log_softmax's output,
the incoming gradient and its own (12), plus the 16-bit logits (2) where the loop still holds the model's output, as
`out = model(**batch); out.loss.backward()` does: 14. Up to 4.45 the model upcast the logits itself: 12, or 16 where
the loop holds the fp32 logits through backward (fsdp_qlora's train.py). 14 is the common case (``--loss full``);
LOSS_LOGITS_BYTES has the others."""
LOSS_LOGITS_BYTES = {"full": LOGITS_BYTES, "chunked": 4, "fused": 0}
"""Bytes per token and vocabulary entry the loss holds at its peak, by ``Job.loss``. chunked: LitGPT's fine-tuning
scripts run the LM head in chunks of 128 tokens (``model(x, lm_head_chunk_size=128)``) and the cross-entropy chunk by
chunk on the 16-bit logits (``chunked_cross_entropy``: no fp32 upcast); the loop holds the chunks' 16-bit logits (2)
and each chunk's cross-entropy keeps its 16-bit log_softmax for backward (2), while backward's gradients come one
chunk at a time: 4. fused: Liger's LigerFusedLinearCrossEntropyLoss, Unsloth's fused loss and Apple's Cut
Cross-Entropy compute the head, the loss and its gradient a chunk at a time inside one function, so no more than a
chunk's logits ever exist: counted as 0 (one chunk, a few hundred MB at a 128K vocabulary, is left out)."""
SHARDED_ALLOCATOR_SHARE = 0.18
"""The caching allocator's share on top of the allocated peak in multi-GPU training: FSDP all-gathers and
reduce-scatters on CUDA streams of their own, and the allocator keeps each stream's blocks apart (pytorch#117323), so
more is reserved than is ever allocated at once. Measured, not fitted: Answer.AI's fsdp_qlora benchmark gives two
pairs, 10.24 GiB reserved over 8.28 allocated (+24%) and 10.22 over 9.16 (+12%); 0.18 is their mean."""
TRAINING_CUDA_CONTEXT = 500 * 2**20
"""A training process's CUDA context, the transformers engine's: 287 MB with lazy module loading, 667 MB eager
(pytorch#86509, the default LAZY since CUDA 12.2); more where libraries load many kernels. --cuda-context sets it."""
NCCL_CHANNEL_BYTES = 36 * 2**20
"""NCCL buffers per channel: ring and tree, a send and a receive connection each, ~9 MiB per connection (Simple
4 MiB NCCL_BUFFSIZE + LL128 ~4.6 MiB + LL 256 KiB)."""
NCCL_CHANNELS_NVLINK = 32
"""Channels NCCL opens over NVLink on H100-class nodes: 32 x 36 MiB ~ 1.1 GiB, as nccl#1685 measured (1.06 GB).
Used where the job says --link nvlink: the memory estimate does not know the GPU, and a job without a link is
counted at PCIe's few channels (an 8-GPU NVLink node then holds ~1 GiB more than said)."""
NCCL_CHANNELS_PCIE = 4
"""Channels over PCIe, where a few saturate the link (NCCL's memory grows linearly with channels, nccl#986)."""


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
    host_bytes: int = 0
    """Host memory per GPU's process for state the job offloads (--offload); not part of the GPU's total."""

    @property
    def total_bytes(self) -> int:
        return sum(item.bytes for item in self.items)

    def get(self, name: str) -> int:
        return sum(item.bytes for item in self.items if item.name == name)

    def without(self, *names: str) -> int:
        return sum(item.bytes for item in self.items if item.name not in names)

    def to_dict(self) -> dict[str, Any]:
        return {"per_gpu_total_bytes": self.total_bytes, "gpus": self.gpus,
                "items": [item.to_dict() for item in self.items], "notes": list(self.notes),
                "host_bytes": self.host_bytes}


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


EAGER_SCORE_BYTES = 6
"""Bytes per head and query-key pair eager attention holds in a 16-bit prefill, one layer at a time: the 16-bit
scores (with the mask added) beside their fp32 softmax (softmax(dtype=float32)), then that softmax beside its
16-bit copy (transformers' eager_attention_forward): 2 + 4 at the softmax, 4 + 2 after it."""
OLD_PROMPT_LOGITS_BYTES = 6
"""Bytes per prompt token and vocabulary entry a transformers generate before 4.45 holds after the prefill: the
model returns the whole prompt's 16-bit logits and upcasts them to fp32 (logits.float()). 4.45 computes only the last
token's (num_logits_to_keep, huggingface/transformers#31292, from #30860; logits_to_keep since 4.50)."""
OLD_LOGITS_NOTE_BYTES = GIB
"""Where the logits of an older transformers would add this much or more, the breakdown says so."""


def _prefill_activation_bytes(spec: ModelSpec, tokens: int, attention: str = "flash", sequence: int = 0) -> int:
    """Peak of one layer's live tensors in a 16-bit prefill of ``tokens`` (``sequence`` per prompt): the larger of
    its MLP phase and its attention phase.

    MLP: the gate, up and activated outputs (3F) beside the residual, norm and attention output (4h); calibrated on
    Qwen2.5's published transformers memory table (docs/calibration.md). Attention: the residual and norm output (2h),
    q and the three RoPE temporaries of q (q*cos, rotate_half(q)*sin, their sum: 4Q, Q = heads x head_dim, which
    Qwen3 makes wider than h), k and v (2K); SDPA's copies of K and V repeated to every head (transformers'
    repeat_kv) come after RoPE's temporaries are freed and peak no higher. Eager attention adds one layer's scores,
    EAGER_SCORE_BYTES per head and query-key pair, and the 16-bit causal mask built once (2 bytes per pair)."""
    h = spec.hidden or 0
    heads = spec.heads or 0
    head_dim = spec.attention.head_dim if spec.attention is not None and spec.attention.head_dim else (
        h // heads if heads else 0)
    kv_heads = spec.attention.kv_heads if spec.attention is not None and spec.attention.kv_heads else heads
    mlp = 3 * _mlp_width(spec) + 4 * h
    attend = 2 * h + 4 * heads * head_dim + 2 * kv_heads * head_dim
    peak = tokens * max(mlp, attend) * 2
    if attention == "eager":
        peak += tokens * sequence * (EAGER_SCORE_BYTES * heads + 2)
    return peak


def _prefill_item(spec: ModelSpec, job: Job, runtime: Engine, context: int) -> tuple[int, str]:
    """A PyTorch engine's activation peak per GPU and its note: the prefill of the prompt (transformers runs a prompt
    whole; ``job.prompt``, or the whole context when not given) or of the engine's token budget (vLLM profiles at
    max_num_batched_tokens, the chunked engines at their chunk), plus the last token's fp32 logits."""
    if runtime.name == "transformers":
        sequence = job.prompt or context
        tokens = sequence * job.batch
        attention = job.attention
    else:
        tokens = min(context * job.batch, VLLM_MAX_BATCHED_TOKENS if runtime.name == "vllm"
                     else runtime.activation_tokens or context * job.batch)
        sequence, attention = min(context, tokens), "flash"
    activations = (_prefill_activation_bytes(spec, tokens, attention, sequence) // job.gpus
                   + job.batch * (spec.vocab or 0) * 4)
    kernel = {"flash": _("flash attention"), "sdpa": _("SDPA attention"),
              "eager": _("eager attention: one layer's s x s scores")}[attention]
    return activations, _("prefill peak for {tokens} prompt tokens ({kernel}) + fp32 logits of the last token").format(
        tokens=f"{tokens:,}", kernel=kernel)


def _transformers_notes(spec: ModelSpec, job: Job, runtime: Engine, fmt: WeightFormat) -> list[str]:
    """What the transformers estimate assumes of the stack where another choice would change it by much: the logits
    of the prompt (transformers before 4.45 keeps them all) and a quantized checkpoint's LM head (tied or not)."""
    if runtime.name != "transformers":
        return []
    notes = []
    old_logits = OLD_PROMPT_LOGITS_BYTES * (job.prompt or job.context) * job.batch * (spec.vocab or 0) // job.gpus
    if old_logits >= OLD_LOGITS_NOTE_BYTES:
        notes.append(_("assumes transformers 4.45 or newer, whose generate computes only the last token's logits "
                       "(num_logits_to_keep); an older one holds the whole prompt's logits in 16 and 32 bits: "
                       "{size} GiB more per GPU").format(size=f"{old_logits / GIB:.1f}"))
    if spec.tie_embeddings and fmt.keeps_embeddings_16bit and fmt.bits_per_weight < 16 and spec.embedding_params:
        head = 2 * spec.embedding_params // job.gpus
        notes.append(_("the LM head shares the token embedding (tied), as the model's config says; some quantized "
                       "checkpoints store it apart (Qwen2.5-1.5B-Instruct-AWQ, whose config.json then says "
                       "tie_word_embeddings: false): {size} GiB more per GPU for one").format(
            size=f"{head / GIB:.2f}"))
    return notes


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
        params=f"{spec.params:,}", format=fmt.label, bits=f"{fmt.bits_per_weight:.3g}")


_GGUF_COUSIN = {8: "q8_0", 4: "q4_k_m"}
"""The GGUF format nearest a PyTorch-side format of that many bits, for the mismatch note."""


def check_format(runtime: Engine, fmt: WeightFormat) -> None:
    """Refuse weights the engine cannot run, naming the engines that can."""
    if runtime.runs(fmt):
        return
    able = [other.name for other in ENGINES.values() if other.runs(fmt)
            and (fmt.engine_family == "gguf") == (other.family == "llama.cpp")]
    raise GpuflyError(_("{engine} does not run {format} weights").format(engine=runtime.display, format=fmt.label),
                      hint=_("engines that run {format}: {engines}").format(format=fmt.label, engines=", ".join(able)))


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
                 "format").format(format=fmt.label, nearest=cousin)
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
        activations, act_note = _prefill_item(spec, job, runtime, context)
        notes += _transformers_notes(spec, job, runtime, fmt)
    else:
        activations = round((spec.activation_bytes_per_sample or 0) * job.batch)
        act_note = _("upper bound: the activations a training step saves, per sample x batch")
    split = (_(", split over {count} GPUs").format(count=tp) if tp > 1 else "") + (
        _(", a pipeline stage per node ({stages})").format(stages=stages) if stages > 1 else "")
    items = [
        MemoryItem("weights", weights // (tp * stages), weights_note + split),
        *([MemoryItem("kv_cache", kv // (kv_split * stages), _("{batch} x {context} tokens at {format}").format(
            batch=job.batch, context=f"{context:,}", format=job.kv_format))]
          if spec.is_transformer else []),  # a CNN has no KV cache and no context
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
    """Optimizer state for ``trainable`` parameters; the pure-bf16 recipe keeps 32-bit states in bf16 (half), and
    8-bit states stay 8-bit."""
    if job.optimizer == "adafactor":
        states = _adafactor_state_bytes(spec) if job.task == "full" else 4 * trainable
    else:
        states = round(OPTIMIZER_STATE_BYTES[job.optimizer] * trainable)
    return states // 2 if job.precision == "bf16" and job.optimizer not in EIGHT_BIT_OPTIMIZERS else states


def _targets(name: str, target: str) -> bool:
    """PEFT's rule: a target names a module whose name is it or ends with ``.target``."""
    return name == target or name.endswith("." + target)


def lora_adapter_params(spec: ModelSpec, job: Job) -> int:
    """r x (in + out) per adapted matrix, over the target modules the model has."""
    return sum(job.lora_rank * (rows + cols) * count for name, (rows, cols, count) in spec.linear_shapes.items()
               if any(_targets(name, target) for target in job.lora_targets))


def _largest_adapter(spec: ModelSpec, job: Job) -> int:
    """Parameters of the largest LoRA matrix (A is r x in, B is out x r)."""
    return max((job.lora_rank * max(rows, cols) for name, (rows, cols, _count) in spec.linear_shapes.items()
                if any(_targets(name, target) for target in job.lora_targets)), default=0)


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


def _quant_state_bytes(spec: ModelSpec, fmt: WeightFormat) -> int:
    """Bytes of a 4-bit format's block constants over the linear layers (NF4 with double quantization: 0.127 bits a
    weight): bitsandbytes keeps them in each Params4bit's quant_state, beside the parameter, not in it."""
    linear = spec.params - _unquantized_params(spec)
    return round(linear * max(0.0, fmt.bits_per_weight - 4) / 8) if fmt.bits_per_weight < 8 else 0


def _unquantized_params(spec: ModelSpec) -> int:
    """Parameters outside the linear layers (embeddings, LM head, norms): what bitsandbytes leaves in 16 bits."""
    return max(0, spec.params - sum(rows * cols * count for rows, cols, count in spec.linear_shapes.values()))


def peft_upcast(job: Job) -> bool:
    """Whether the job is PEFT's QLoRA recipe: prepare_model_for_kbit_training casts every parameter that is not
    4-bit (embeddings, LM head, norms) to fp32 (peft/utils/other.py, "cast all non INT8 parameters to fp32"), so
    the embedding's output, and the residual stream after it, are fp32 too. The mixed recipe only: pure-bf16
    QLoRA (fsdp_qlora's default, Unsloth) keeps them in bf16."""
    return job.task == "qlora" and job.precision == "mixed"


def _attention_bytes(spec: ModelSpec, job: Job) -> tuple[int, int]:
    """(Bytes one layer saves for attention's backward, bytes held once for all layers).

    flash and SDPA (CUDA picks its flash or memory-efficient kernel, neither of which stores the scores): the fp32
    log-sum-exp per head and token, 4*a*s*b. Eager (transformers' eager_attention_forward): the softmax output in
    fp32 (softmax(dtype=float32), kept for its backward) and its 16-bit copy (the input of the product with V),
    6*a*s^2*b; in fp32 training the two are one tensor, 4*a*s^2*b. Korthikanti et al. 2022 count 5*a*s^2*b for a
    16-bit softmax with dropout; fine-tunes run without attention dropout. The 4-D causal mask transformers builds
    for eager attention, b*s^2 in the compute dtype, is held once."""
    s, b, heads = job.context, job.batch, spec.heads or 1
    if job.flash_attention:
        return 4 * heads * s * b, 0
    element = 2 if job.mixed_precision else 4
    softmax = (4 + 2) if job.mixed_precision else 4
    return softmax * heads * s * s * b, element * b * s * s


def training_activation_bytes(spec: ModelSpec, job: Job) -> tuple[int, str]:
    """Activations saved for backward on one GPU at the step's peak, and how they were counted.

    Transformers: per layer s*b*(12h + 2*kv + M) bytes at 16-bit (the Korthikanti et al. 2022 accounting
    generalised to RMSNorm, GQA and gated MLPs, no dropout) plus attention's (_attention_bytes). M is the MLP's
    saved tensors (MLP_SAVED_BYTES): a gated MLP keeps its gate, its up projection, the activated gate and their
    product, 8F; a plain one (GELU: GPT-NeoX, Phi, GPT-2) its first projection's output and the activation's, 4F,
    as Korthikanti et al. count it. A checkpointed
    layer keeps only its input, 2*s*b*h (fp32 in PEFT's QLoRA recipe: 4*s*b*h); full checkpointing checkpoints every
    layer, selective every other one. The peak is at the loss: every layer's saved tensors plus the loss's logits
    (LOGITS_BYTES*b*s*V), or, later, plus one checkpointed layer recomputed, whichever is larger (the logits are
    freed before the first recompute). Other models: the fake-tensor count per sample.
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
    s, b, h = job.context, job.batch, spec.hidden
    kv_width = (2 * spec.attention.kv_heads * spec.attention.head_dim if spec.attention.kind == "mha"
                else spec.attention.kv_lora_rank + spec.attention.rope_head_dim)
    attention, once = _attention_bytes(spec, job)
    mlp = MLP_SAVED_BYTES[spec.gated_mlp] * _mlp_width(spec)
    per_layer = s * b * (12 * h + 2 * kv_width + mlp) * scale + attention
    kept_input = 2 * s * b * h * scale
    if peft_upcast(job):
        per_layer += 4 * s * b * h
        kept_input = 4 * s * b * h
    checkpointed = {"none": 0, "selective": -(-spec.layers // 2), "full": spec.layers}[job.checkpointing_mode]
    body = (spec.layers - checkpointed) * per_layer + checkpointed * kept_input + once
    logits_bytes = LOSS_LOGITS_BYTES[job.loss]
    logits = logits_bytes * b * s * (spec.vocab or 0) if spec.kind == "decoder" else 0
    how = {"none": _("all layers' activations"),
           "selective": _("selective checkpointing: every other layer's input kept, the rest stored"),
           "full": _("full checkpointing: layer inputs kept, one layer recomputed")}[job.checkpointing_mode]
    how += {"flash": _(", flash attention"), "sdpa": _(", SDPA attention (flash or memory-efficient kernel: no s x s "
                                                        "scores)"),
            "eager": _(", eager attention (s x s softmax in fp32 and 16 bits per head)")}[job.attention]
    if logits:
        how += _(", {share} B/token x vocab of loss logits").format(share=logits_bytes)
    if job.loss != "full" and spec.kind == "decoder":
        how += {"chunked": _(" (chunked loss: 16-bit logits and log-softmax)"),
                "fused": _(", fused linear cross-entropy: no whole logits")}[job.loss]
    return body + max(logits, per_layer if checkpointed else 0), how


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


def _layer_params(spec: ModelSpec) -> int:
    """Parameters of one transformer layer (the unit FSDP wraps and gathers); the largest matrix otherwise."""
    if spec.layers:
        return max(0, spec.params - _unquantized_params(spec)) // spec.layers
    return _largest_param(spec)


def _largest_param(spec: ModelSpec) -> int:
    """Parameters of the model's largest tensor: its gradient is all optimizer-in-backward keeps at once."""
    return max([*(rows * cols for rows, cols, _count in spec.linear_shapes.values()), spec.embedding_params or 0,
                lm_head_params(spec)], default=0) or spec.params


def _gathered(spec: ModelSpec, job: Job, bytes_per_param: float) -> MemoryItem | None:
    """ZeRO-3/FSDP full sharding (or parameter offload) gathers whole units before it computes them: the root unit
    (embeddings and LM head, kept gathered from forward to backward) and two transformer layers, the one computing
    and the one prefetched (FSDP's limit_all_gathers keeps two in flight; DeepSpeed's prefetch bucket is alike)."""
    if not (job.zero >= 3 and job.data_parallel > 1) and job.offload != "params":
        return None
    root = (spec.embedding_params or 0) + lm_head_params(spec)
    layers = 2 * _layer_params(spec) if spec.layers else _largest_param(spec)
    tp, pp, _dp = job.layout
    return MemoryItem("gathered", round((root + layers) * bytes_per_param) // (tp * pp),
                      _("units gathered whole to compute (ZeRO-3/FSDP): embeddings and LM head, plus 2 layers "
                        "(computing and prefetched)"))


def _state_items(spec: ModelSpec, job: Job, host: list[int]) -> list[MemoryItem]:
    """Full training's weights, gradients and optimizer state (ZeRO accounting, Rajbhandari et al. 2020) for the
    precision recipe; offloaded state is added to ``host`` instead."""
    params = spec.params
    weight_b = 4 if job.precision == "fp32" else 2
    master = 4 * params if job.precision == "mixed" else 0
    states = _optimizer_state_bytes(spec, job, params)
    shard = _shards(job)
    zero_note, split = _zero_note(job), _model_parallel_note(job)
    recipe = {"mixed": _("mixed precision: 16-bit weights and gradients, fp32 master weights"),
              "bf16": _("pure bf16: weights, gradients and optimizer states in bf16, no fp32 master"),
              "fp32": _("fp32 weights and gradients")}[job.precision]
    weights = MemoryItem("weights", weight_b * params // shard["weights"],
                         _("{params} params at {size} B").format(params=f"{params:,}", size=weight_b)
                         + split + (zero_note if job.zero >= 3 else "") + f" ({recipe})")
    if job.offload == "params":
        host.append(weights.bytes)
        weights = MemoryItem("weights", 0, _("in host memory (--offload params); the GPU holds the gathered units"))
    grads = _gradient_item(spec, job, params, weight_b, shard["gradients"],
                           split + (zero_note if job.zero >= 2 else ""), host)
    optimizer = MemoryItem("optimizer", (master + states) // shard["optimizer"],
                           (_("fp32 master weights + {optimizer} states") if master else
                            _("{optimizer} states")).format(optimizer=job.optimizer)
                           + (_(" in bf16") if job.precision == "bf16" and job.optimizer not in EIGHT_BIT_OPTIMIZERS
                              else "") + split + (zero_note if job.zero >= 1 else ""))
    if job.offload != "none":
        host.append(optimizer.bytes)
        optimizer = MemoryItem("optimizer", 0, _("{optimizer} states and fp32 master weights in host memory "
                                                 "(--offload {offload}); the step runs on the CPU").format(
            optimizer=job.optimizer, offload=job.offload))
    items = [weights, grads, optimizer]
    gathered = _gathered(spec, job, weight_b)
    return items + ([gathered] if gathered else [])


def _gradient_item(spec: ModelSpec, job: Job, trainable: int, grad_b: int, shards: int, note: str,
                   host: list[int], largest: int | None = None) -> MemoryItem:
    """Gradients on the GPU: all of them; with optimizer-in-backward only the largest parameter's (each is stepped
    and freed as soon as backward produces it, torchtune's optimizer_in_bwd); with offload, one layer's in flight
    to host memory, where the rest go."""
    largest = _largest_param(spec) if largest is None else largest
    if job.offload != "none":
        host.append(grad_b * trainable // shards)
        unit = min(trainable, _layer_params(spec) if job.task == "full" else largest)
        return MemoryItem("gradients", grad_b * unit, _("one layer's gradients on their way to host memory "
                                                       "(--offload {offload})").format(offload=job.offload))
    if job.optimizer_in_backward:
        return MemoryItem("gradients", grad_b * min(largest, trainable) // shards,
                          _("optimizer in backward: only the largest parameter's gradient ({params} params) is live, "
                            "each is stepped and freed as backward makes it").format(params=f"{largest:,}") + note)
    return MemoryItem("gradients", grad_b * trainable // shards, _("{size} B per param").format(size=grad_b) + note)


def _lora_items(spec: ModelSpec, job: Job, host: list[int]) -> list[MemoryItem]:
    """LoRA and QLoRA: the frozen base (sharded at ZeRO-3, as FSDP-QLoRA does), and adapters whose gradients
    (ZeRO-2) and optimizer states (ZeRO-1) shard like a full model's: fp32 in the mixed and fp32 recipes, bf16 in
    the pure-bf16 one. PEFT's QLoRA recipe holds the base's unquantized parameters in fp32 (peft_upcast)."""
    shard = _shards(job)
    base = weight_format("nf4" if job.task == "qlora" else job.quant)
    adapters = lora_adapter_params(spec, job)
    zero_note, split = _zero_note(job), _model_parallel_note(job)
    adapter_b = 2 if job.precision == "bf16" else 4
    base_bytes = weight_bytes(spec, base)
    base_note = _("frozen base at {format}").format(format=base.label)  # "AWQ int4": its quantizer, where known
    if peft_upcast(job):
        upcast = 2 * _unquantized_params(spec)
        base_bytes += upcast
        base_note += _("; PEFT's prepare_model_for_kbit_training casts the {params} unquantized params (embeddings, "
                       "LM head, norms) to fp32").format(params=f"{_unquantized_params(spec):,}")
    elif job.task == "qlora" and job.precision == "fp32":
        base_bytes += 2 * _unquantized_params(spec)
        base_note += _("; the {params} unquantized params (embeddings, LM head, norms) in fp32 (--precision "
                       "fp32)").format(params=f"{_unquantized_params(spec):,}")
    constants = _quant_state_bytes(spec, base) if job.task == "qlora" else 0
    if constants and ((job.zero >= 3 and job.data_parallel > 1) or job.offload == "params"):
        base_note += _("; its quantization constants ({size} GiB) stay whole on every GPU: they are no parameter "
                       "for FSDP to shard or offload").format(size=f"{constants / GIB:.2f}")
    tp, pp, _dp = job.layout
    weights = MemoryItem("weights", (base_bytes - constants) // shard["weights"] + constants // (tp * pp),
                         base_note + split + (zero_note if job.zero >= 3 else ""))
    if job.offload == "params":
        host.append(weights.bytes - constants // (tp * pp))
        weights = MemoryItem("weights", constants // (tp * pp), _(
            "in host memory (--offload params) but for the quantization constants; the GPU holds the gathered "
            "units"))
    grads = _gradient_item(spec, job, adapters, adapter_b, shard["gradients"], "", host,
                           largest=_largest_adapter(spec, job))
    adapter_weights = adapter_b * adapters // shard["weights"]
    if job.offload == "params":
        host.append(adapter_weights)
        adapter_weights = 0
    items = [
        weights,
        MemoryItem("lora_adapters", adapter_weights + grads.bytes,
                   _("rank {rank} on {targets}: {params} params, {size} B weights; gradients: {grads}").format(
                       rank=job.lora_rank, targets=", ".join(job.lora_targets), params=f"{adapters:,}",
                       size=adapter_b, grads=grads.note)
                   + split + (zero_note if job.zero >= 2 else "")),
    ]
    optimizer = MemoryItem("optimizer", _optimizer_state_bytes(spec, job, adapters) // shard["optimizer"],
                           _("{optimizer} states").format(optimizer=job.optimizer) + split
                           + (zero_note if job.zero >= 1 else ""))
    if job.offload != "none":
        host.append(optimizer.bytes)
        optimizer = MemoryItem("optimizer", 0, _("{optimizer} states in host memory (--offload {offload})").format(
            optimizer=job.optimizer, offload=job.offload))
    gathered = _gathered(spec, job, base_bytes / max(1, spec.params))
    return [*items, optimizer, *([gathered] if gathered else [])]


def _runtime_items(job: Job) -> list[MemoryItem]:
    """The training process's memory outside PyTorch's caching allocator: the CUDA context, and NCCL's buffers
    when GPUs talk."""
    context = job.cuda_context_bytes or TRAINING_CUDA_CONTEXT
    said = (_("CUDA context, {size} GiB by --cuda-context") if job.cuda_context_bytes else
            _("PyTorch CUDA context, {size} GiB by default (287 MB with lazy module loading to 667 MB eager, "
              "pytorch#86509; over 1 GB where many libraries' kernels load): set --cuda-context to what nvidia-smi "
              "shows")).format(size=f"{context / GIB:.2f}")
    items = [MemoryItem("runtime", context, said)]
    if job.world > 1:
        channels = NCCL_CHANNELS_NVLINK if job.link == "nvlink" else NCCL_CHANNELS_PCIE
        items.append(MemoryItem("nccl", channels * NCCL_CHANNEL_BYTES, _(
            "NCCL buffers: {channels} channels x ring and tree, send and receive ({link}; over NVLink NCCL opens 32, "
            "~1.1 GiB, nccl#1685)").format(channels=channels, link=job.link or _("link not given: PCIe assumed"))))
    return items


def _training_notes(spec: ModelSpec, job: Job, host_bytes: int) -> list[str]:
    notes = [job.checkpointing_reason] if spec.is_transformer else []
    if job.optimizer in PAGED_OPTIMIZERS:
        notes.append(_("{optimizer}: bitsandbytes pages its states to host memory under pressure, so the optimizer "
                       "item is the resident peak when all fits; past the GPU's memory the step slows instead of "
                       "failing").format(optimizer=job.optimizer))
    if host_bytes:
        notes.append(_("host memory for --offload {offload}: {per_gpu} GiB per GPU, {per_node} GiB per node of "
                       "{gpus} (pinned)").format(offload=job.offload, per_gpu=f"{host_bytes / GIB:.1f}",
                                                 per_node=f"{host_bytes * job.gpus / GIB:.1f}", gpus=job.gpus))
    if job.optimizer_in_backward:
        notes.append(_("optimizer in backward steps each parameter during backward: no gradient accumulation, and "
                       "gradient clipping over all parameters is unavailable"))
    return notes


def training_memory(spec: ModelSpec, job: Job) -> MemoryBreakdown:
    """Memory per GPU to train ``spec`` as ``job`` says (ZeRO accounting, Rajbhandari et al. 2020), item by item,
    with what --offload puts in host memory."""
    host: list[int] = []
    items = _state_items(spec, job, host) if job.task == "full" else _lora_items(spec, job, host)
    activations, how = training_activation_bytes(spec, job)
    tp = job.layout[0]
    if tp > 1:
        activations //= tp
        how += _("; / {tp}: tensor parallel with sequence parallelism (Korthikanti et al. 2022)").format(tp=tp)
    shape = (_("micro-batch {batch} x {context}: {how}") if spec.is_transformer else
             _("micro-batch {batch}: {how}"))  # a CNN or MLP has no sequence: --ctx means nothing to it
    items.append(MemoryItem("activations", activations, shape.format(batch=job.batch, context=f"{job.context:,}",
                                                                     how=how)))
    share = SHARDED_ALLOCATOR_SHARE if job.world > 1 else ALLOCATOR_FRAGMENTATION
    fragmentation = round(sum(item.bytes for item in items) * share)
    items.append(MemoryItem("allocator", fragmentation, (
        _("{share} rounding and fragmentation") if job.world == 1 else
        _("{share} rounding and fragmentation: collectives run on their own CUDA streams, whose blocks the caching "
          "allocator keeps apart")).format(share=f"{share:.0%}")))
    return MemoryBreakdown((*items, *_runtime_items(job)), gpus=job.gpus,
                           notes=tuple(_training_notes(spec, job, sum(host))), host_bytes=sum(host))


def memory(spec: ModelSpec, job: Job) -> MemoryBreakdown:
    """The memory one GPU needs for the job, item by item in bytes (weights, KV cache, activations, ...)."""
    return training_memory(spec, job) if job.training else inference_memory(spec, job)
