"""Job: what the user wants to do with a model, validated once, in one frozen dataclass."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError, unknown_choice
from gpufly.estimate.formats import WeightFormat, kv_bytes, weight_format
from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.estimate.engines import Engine
    from gpufly.models.spec import ModelSpec

TASKS = ("infer", "lora", "qlora", "full")
OPTIMIZERS = ("adamw", "adamw8bit", "paged-adamw", "paged-adamw8bit", "sgd", "sgd-momentum", "adafactor")
PAGED_OPTIMIZERS = ("paged-adamw", "paged-adamw8bit")
"""bitsandbytes' paged optimizers: states in CUDA unified memory, evicted to host memory under pressure."""
PRECISIONS = ("mixed", "bf16", "fp32")
"""Training precision recipes: mixed (16-bit compute, fp32 master weights and optimizer states), bf16 (pure bf16
weights, gradients and optimizer states, torchtune's full fine-tune default) and fp32."""
CHECKPOINTING_MODES = ("none", "selective", "full")
"""Activation checkpointing: none, selective (every other transformer layer, torchtitan's selective_ac_option 2),
full (every layer)."""
SELECTIVE_RECOMPUTE_SHARE = 0.5
"""Share of the layers' forward that selective checkpointing recomputes: every other layer."""
ATTENTIONS = ("flash", "sdpa", "eager")
"""Attention kernels in training: flash-attn, torch SDPA (flash or memory-efficient kernels on CUDA), eager."""
OFFLOADS = ("none", "optimizer", "params")
"""CPU offload: none; optimizer (ZeRO-Offload: gradients, fp32 master weights and optimizer states in host memory);
params (also the weights, as FSDP's CPUOffload(offload_params=True) and ZeRO-3 offload_param do)."""
LOSSES = ("full", "chunked", "fused")
"""How the training loss meets the vocabulary (memory.LOSS_LOGITS_BYTES): full (transformers' loss over the whole
logits, upcast to fp32), chunked (LitGPT's lm_head and cross-entropy in 16-bit chunks) or fused (Liger's fused
linear cross-entropy, Unsloth's, Apple's Cut Cross-Entropy: the logits are never whole)."""
MAX_CUDA_CONTEXT_GIB = 64.0
DEFAULT_LORA_RANK = 16
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FSDP_STAGES = {"full_shard": 3, "shard_grad_op": 2, "no_shard": 0}
"""FSDP sharding strategies and the ZeRO stage each equals in memory (llm-analysis README)."""
RECIPE_CHECKPOINTING: dict[str, bool] = {"qlora": True, "lora": True, "full": False}
"""Gradient checkpointing as each task's usual recipe sets it, the default of --checkpointing (who sets it:
_recipe_reason)."""
CHECKPOINTING_FLAGS = {"full": "--checkpointing", "none": "--no-checkpointing",
                       "selective": "--checkpointing-mode selective"}
"""The option that sets each checkpointing mode, named where a job's mode came from no option the user gave (a
change `fit` suggests)."""
SIXTEEN_BIT = ("bf16", "fp16", "fp32")
"""--quant values that say the weights are unquantized: full training trains them, QLoRA quantizes them to NF4."""
VLLM_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's gpu_memory_utilization default, the default of --gpu-memory-utilization."""
INFERENCE_FAMILIES = {"gguf": "llama.cpp and Ollama", "exl2": "ExLlamaV2", "mlc": "MLC LLM"}
"""The engines that run each inference-only weight family (WeightFormat.engine_family), for a refused LoRA base."""
ENGINE_SHARE_SETTINGS = {"sglang": "--mem-fraction-static", "mlc-llm": "gpu_memory_utilization (--overrides)",
                         "tensorrt-llm": "kv_cache_free_gpu_memory_fraction"}
"""The setting of each engine that plays the part of vLLM's gpu_memory_utilization, which gpufly holds at the
engine's documented default (Engine.memory_share, Engine.kv_free_fraction)."""


@dataclass(frozen=True)
class Job:
    """One way of running a model. Defaults describe a common case that runs.

    ``context`` is tokens per sequence (prompt plus generated tokens for inference, the training
    sequence length otherwise); ``gpus`` is the data/tensor-parallel degree.
    """

    task: str = "infer"
    quant: str = "bf16"
    context: int = 4096
    batch: int = 1
    kv_format: str = "fp16"
    engine: str = "transformers"
    optimizer: str = "adamw"
    mixed_precision: bool = True
    zero: int = 0
    gpus: int = 1
    checkpointing: bool = False
    flash_attention: bool = True
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    gpu_memory_utilization: float = 0.9
    nodes: int = 1
    link: str = ""
    internode: str = ""
    nics: int = 0
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    microbatches: int = 0
    global_batch: int = 0
    master_weights: bool = True
    """Mixed precision keeps fp32 master weights and optimizer states; False is pure bf16 (moot in fp32)."""
    selective: bool = False
    """Checkpointing, when on, covers every other layer instead of every layer."""
    sdpa: bool = False
    """Flash attention, when on, comes from torch SDPA rather than the flash-attn package."""
    optimizer_in_backward: bool = False
    offload: str = "none"
    cuda_context_bytes: int = 0
    """The runtime's CUDA context; 0 is the stack's default (memory.TRAINING_CUDA_CONTEXT)."""
    loss: str = "full"
    """Training: how the loss holds the logits (LOSSES)."""
    prompt: int = 0
    """Inference: tokens of each prompt, the part of ``context`` a transformers prefill runs at once; 0: the whole
    context (the largest prefill it allows)."""
    checkpointing_option: str = field(default="", compare=False)
    """The option the user set checkpointing with (``--checkpointing-mode selective``), for checkpointing_reason to
    name; empty: none given. Not part of what the job is: it only says who chose."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            _bad("task", self.task, TASKS)
        if self.optimizer not in OPTIMIZERS:
            _bad("optimizer", self.optimizer, OPTIMIZERS)
        for name, flag, example in (("context", "--ctx", "--ctx 4096"), ("batch", "--batch", "--batch 8"),
                                    ("gpus", "--gpu COUNTx", "--gpu 2xH100"),
                                    ("lora_rank", "--lora-rank", "--lora-rank 16"), ("nodes", "--nodes", "--nodes 2"),
                                    ("tensor_parallel", "--tp", "--tp 8"), ("pipeline_parallel", "--pp", "--pp 2")):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise GpuflyError(f"{flag} must be a positive whole number, got {value}", hint=f"e.g. {example}")
        for name, flag in (("nics", "--nics"), ("microbatches", "--microbatches"),
                           ("global_batch", "--global-batch")):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise GpuflyError(f"{flag} must be a positive whole number, got {value}", hint=f"e.g. {flag} 8")
        self._check_layout()
        if not isinstance(self.prompt, int) or not 0 <= self.prompt <= self.context:
            raise GpuflyError(f"the prompt must be within 0..{self.context} tokens (--ctx), got {self.prompt}",
                              hint="the context holds the prompt and the generated tokens")
        if self.offload not in OFFLOADS:
            _bad("offload", self.offload, OFFLOADS)
        if self.loss not in LOSSES:
            _bad("loss", self.loss, LOSSES)
        if not isinstance(self.cuda_context_bytes, int) or not 0 <= self.cuda_context_bytes <= \
                MAX_CUDA_CONTEXT_GIB * 2**30:
            raise GpuflyError(f"--cuda-context must be within 0..{MAX_CUDA_CONTEXT_GIB:g} GiB, got "
                              f"{self.cuda_context_bytes / 2**30:g}", hint="e.g. --cuda-context 1.3")
        if self.zero not in (0, 1, 2, 3):
            raise GpuflyError(f"--zero must be 0, 1, 2 or 3, got {self.zero}",
                              hint="ZeRO-1 shards optimizer states, 2 also gradients, 3 also weights")
        if not 0.05 <= self.gpu_memory_utilization <= 1.0:
            raise GpuflyError(f"--gpu-memory-utilization must be within 0.05..1, got {self.gpu_memory_utilization}",
                              hint="e.g. --gpu-memory-utilization 0.9 (vLLM's default)")

    @classmethod
    def from_options(cls, spec: ModelSpec, *, task: str = "infer", quant: str | None = None, context: int = 4096,
                     batch: int = 1, kv_format: str = "fp16", engine: str | None = None, optimizer: str = "adamw",
                     zero: int = 0, checkpointing: bool | None = None, lora_rank: int | None = None,
                     fp32: bool = False, lora_targets: str | None = None, fsdp: str | None = None,
                     gpu_memory_utilization: float | None = None, gpus: int = 1, nodes: int = 1,
                     link: str | None = None, internode: str | None = None, nics: int | None = None,
                     tensor_parallel: int = 1,
                     pipeline_parallel: int = 1, microbatches: int | None = None, global_batch: int | None = None,
                     precision: str | None = None, checkpointing_mode: str | None = None,
                     attention: str | None = None, optimizer_in_backward: bool = False, offload: str | None = None,
                     cuda_context_gib: float | None = None, prompt: int | None = None, loss: str | None = None,
                     note: Callable[[str], None] | None = None) -> Job:
        """The Job a person's options describe for ``spec``, as `gpufly fit` and `recommend` take them.

        A GGUF file brings its own format (and llama.cpp for inference) as the defaults, and options the user gave
        win; ``fp32`` turns the default bf16 into fp32 and mixed precision off; an FSDP strategy is the ZeRO stage
        it equals in memory; ``lora_targets`` is a comma-separated list, checked against the model's own linear
        layers (the default: those of DEFAULT_LORA_TARGETS the model has); ``checkpointing`` None is the task's
        recipe default (RECIPE_CHECKPOINTING: on for LoRA and QLoRA, off for full training); ``lora_rank`` None is 16.

        ``link`` (nvlink or pcie) and ``internode`` (a data/internode.json name) are resolved here; None is the
        GPU's default, chosen where the GPU is known (estimate/comms.py).

        ``precision`` (mixed, bf16, fp32) is the training recipe; ``fp32`` is its alias ``precision="fp32"``.
        ``checkpointing_mode`` (none, selective, full) refines ``checkpointing``; ``attention`` (flash, sdpa, eager)
        is the attention kernel (in inference the engine's default when None); ``offload`` (none, optimizer, params)
        puts training state in host memory; ``cuda_context_gib`` replaces the stack's default CUDA context; ``loss``
        (full, chunked, fused) is how the loss holds the logits.
        ``prompt`` (inference) is the tokens of each prompt, the part of ``context`` a prefill runs at once; None:
        the whole context, the largest prefill the context allows. ``gpu_memory_utilization`` is vLLM's share of
        each GPU (None: its default, 0.9); other engines and training do not read it, which a note says.

        A training task takes a quantized checkpoint's stored format (config.json's quantization_config) as its
        weights' format when --quant is not given: LoRA trains adapters over it (PEFT wraps GPTQ, AWQ and
        bitsandbytes layers), full training and QLoRA (which quantizes a 16-bit base) cannot start from it and are
        refused; a GGUF file is dequantized to 16-bit by transformers to be trained. A LoRA base PEFT cannot train
        (GGUF, EXL2, MLC or FP8 weights) is refused. --optimizer-in-backward with gradient accumulation or a
        pipeline is refused: each gradient is applied and freed as backward makes it.

        Options that contradict each other (`--fsdp full_shard --zero 2`, `--fp32 --precision bf16`) are refused;
        options the task does not use (`--zero` for inference, `--lora-rank` for full training) are said, one
        sentence each, through ``note``: a person who gave them expects them to count, and silence would let them
        believe they did.
        """
        from gpufly.estimate.comms import internode as resolve_internode
        from gpufly.estimate.comms import link_kind
        from gpufly.estimate.engines import engine as check_engine
        from gpufly.estimate.memory import lora_targets as resolve_targets

        given_precision = precision
        precision = _precision(precision if task != "infer" else None, fp32)  # inference: --quant sets the weights
        mode = _checkpointing_mode(checkpointing, checkpointing_mode)
        attention = _choice("attention", attention, ATTENTIONS)
        offload = _choice("offload", offload, OFFLOADS)
        given_loss = _choice("loss", loss, LOSSES)
        unused = _unused_options(task, zero=zero, fsdp=fsdp, lora_rank=lora_rank, lora_targets=lora_targets,
                                 checkpointing=checkpointing, fp32=fp32, quant=quant)
        unused += _unused_training_options(task, precision=given_precision,
                                           checkpointing_mode=checkpointing_mode,
                                           optimizer_in_backward=optimizer_in_backward, offload=offload,
                                           cuda_context_gib=cuda_context_gib, loss=given_loss)
        if prompt is not None and (not isinstance(prompt, int) or prompt <= 0):
            raise GpuflyError(f"--prompt must be a positive whole number, got {prompt}", hint="e.g. --prompt 2048")
        if prompt is not None and task != "infer":
            unused.append(_("--prompt sizes an inference prefill; training runs --ctx tokens a sequence (ignored)"))
            prompt = None
        if prompt is not None and prompt > context:
            raise GpuflyError(f"--prompt {prompt} is longer than the context ({context} tokens, --ctx)",
                              hint=f"the context holds the prompt and the output: --ctx {prompt + 512} or more")
        fp32 = precision == "fp32"
        unused += _unused_by_training(task, engine=engine, quant=quant)
        given_quant = quant
        if _quant_unused(task, quant):
            quant = None  # said to be ignored: the task's own weights' format applies
        if task != "infer":
            if engine is not None:
                check_engine(engine)  # a misspelt name is still an error, not a silent note
            engine = None  # training is modelled as PyTorch runs it, whatever inference engine was named
        unused += _unused_scale_options(task, nodes=nodes, internode=internode, nics=nics,
                                        pipeline_parallel=pipeline_parallel, microbatches=microbatches,
                                        global_batch=global_batch, gpus=gpus, link=link)
        if _microbatches_unused(task, pipeline_parallel, microbatches, global_batch):
            microbatches = None  # said to be ignored: a step without a pipeline is one micro-batch per GPU
        link = link_kind(link) if link is not None else ""
        internode = resolve_internode(internode).name if internode is not None else ""
        from_file = spec.weight_format if spec.source.startswith("gguf:") else None
        runtime = check_engine(engine) if engine is not None and task == "infer" else None
        # A GGUF file's type, or the quantization a checkpoint's config.json states (an AWQ or GPTQ repository).
        if task == "infer":
            stored = from_file or spec.weight_format
            if not quant and not stored and spec.unread_quantization:
                raise _unread_quantization(spec)
        else:
            stored = _training_stored_format(spec, task, given_quant, unused)
        quant = quant or (stored.lower() if stored else (runtime.default_quant if runtime else "") or "bf16")
        fmt = weight_format(quant)
        kv_bytes(kv_format)
        if task == "lora":
            _check_lora_base(fmt, quant, from_checkpoint=stored is not None)
        if engine is None:
            gguf = from_file or fmt.engine_family == "gguf"
            engine = "llama.cpp" if gguf and task == "infer" else "transformers"
        runtime = check_engine(engine)
        if task == "infer":
            from gpufly.estimate.memory import check_format

            check_format(runtime, fmt)
        unused += _unused_memory_share(runtime, task, gpu_memory_utilization)
        if fp32 and quant == "bf16":
            quant = "fp32"
        if fsdp is not None:
            zero = _fsdp_stage(fsdp, zero)
        for value, flag in ((nics, "--nics"), (microbatches, "--microbatches"), (global_batch, "--global-batch")):
            if value is not None and value <= 0:  # 0 inside a Job means "the default", never a user's 0
                raise GpuflyError(f"{flag} must be a positive whole number, got {value}", hint=f"e.g. {flag} 8")
        checkpointing = RECIPE_CHECKPOINTING.get(task, False) if mode is None else mode != "none"
        context_bytes = _context_bytes(cuda_context_gib)
        targets = _target_list(lora_targets)
        if task in ("lora", "qlora"):
            targets = resolve_targets(spec, targets if lora_targets is not None else None)
        job = cls(task=task, quant=quant, context=context, batch=batch, kv_format=kv_format, engine=engine,
                  optimizer=optimizer, zero=zero, checkpointing=checkpointing,
                  lora_rank=DEFAULT_LORA_RANK if lora_rank is None else lora_rank,
                  mixed_precision=not fp32, lora_targets=targets,
                  gpu_memory_utilization=VLLM_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
                  else gpu_memory_utilization,
                  gpus=gpus, nodes=nodes, link=link, internode=internode, nics=nics or 0,
                  tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, microbatches=microbatches or 0,
                  global_batch=global_batch or 0,
                  flash_attention=_flash(runtime.flash_attention_default, task, attention),
                  master_weights=precision != "bf16", selective=mode == "selective",
                  sdpa=attention == "sdpa", optimizer_in_backward=optimizer_in_backward,
                  offload=offload or "none", cuda_context_bytes=context_bytes, prompt=prompt or 0,
                  loss=given_loss if given_loss and task != "infer" else "full",
                  checkpointing_option=_checkpointing_flag(checkpointing, checkpointing_mode))
        check_optimizer_in_backward(job)
        if job.training and job.zero and job.data_parallel == 1:
            unused.append(_("--zero {zero} shards training state across data-parallel ranks; this job has one "
                            "(one GPU, or --tp x --pp take them all): nothing is sharded").format(zero=job.zero))
        for sentence in unused:  # once the options are known to be valid: a refused run needs no notes
            (note or _ignore)(sentence)
        return job

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["checkpointing_option"]  # who chose, not what runs: the JSON keeps its schema
        return {**data, "precision": self.precision, "checkpointing_mode": self.checkpointing_mode,
                "attention": self.attention, "recompute_forward_fraction": self.recompute_forward_fraction}

    @property
    def precision(self) -> str:
        """The training precision recipe: mixed, bf16 (pure bf16) or fp32."""
        if not self.mixed_precision:
            return "fp32"
        return "mixed" if self.master_weights else "bf16"

    @property
    def checkpointing_mode(self) -> str:
        """none, selective (every other layer) or full (every layer)."""
        if not self.checkpointing:
            return "none"
        return "selective" if self.selective else "full"

    @property
    def recompute_forward_fraction(self) -> float:
        """Share of the transformer layers' forward pass that backward runs again: 0 without checkpointing, 1 with
        full checkpointing, SELECTIVE_RECOMPUTE_SHARE with selective (every other layer)."""
        return {"none": 0.0, "selective": SELECTIVE_RECOMPUTE_SHARE, "full": 1.0}[self.checkpointing_mode]

    @property
    def attention(self) -> str:
        """The attention kernel: flash, sdpa or eager."""
        if not self.flash_attention:
            return "eager"
        return "sdpa" if self.sdpa else "flash"

    @property
    def training(self) -> bool:
        return self.task != "infer"

    @property
    def world(self) -> int:
        """Every GPU of the job: ``gpus`` per node times ``nodes``."""
        return self.gpus * self.nodes

    @property
    def layout(self) -> tuple[int, int, int]:
        """(tensor, pipeline, data) parallel sizes. Training: --tp and --pp as given, data parallel over the rest.
        Inference: tensor parallel inside a node, a pipeline stage per node (vLLM's multi-node layout)."""
        if not self.training:
            return self.gpus, self.nodes, 1
        tp, pp = self.tensor_parallel, self.pipeline_parallel
        return tp, pp, self.world // (tp * pp)

    @property
    def data_parallel(self) -> int:
        return self.layout[2]

    @property
    def accumulates(self) -> bool:
        """Whether a data-parallel rank runs several micro-batches before each optimizer step (gradient
        accumulation): --global-batch larger than --batch on every data-parallel rank. A pipeline's micro-batches
        (--pp 2 or more) accumulate too, which ``pipeline_parallel`` says."""
        return self.training and self.global_batch > self.batch * self.data_parallel

    def _check_layout(self) -> None:
        """Refuse a split the launcher would refuse: --tp x --pp must divide the GPUs; tensor parallelism past a node
        spans whole nodes; inference takes its layout from --gpu and --nodes."""
        tp, pp = self.tensor_parallel, self.pipeline_parallel
        if not self.training:
            if tp > 1 or pp > 1:
                raise GpuflyError("--tp and --pp set a training layout; inference splits tensors over --gpu COUNT and "
                                  "pipeline stages over --nodes", hint="drop --tp/--pp, or give --task full, lora or "
                                                                       "qlora")
            return
        if self.world % (tp * pp):
            raise GpuflyError(f"--tp {tp} x --pp {pp} = {tp * pp} does not divide the {self.world} GPUs "
                              f"({self.gpus} per node x {self.nodes} nodes)",
                              hint="the data-parallel size is GPUs / (tp x pp), a whole number")
        if tp > self.gpus and tp % self.gpus:
            raise GpuflyError(f"--tp {tp} spans nodes of {self.gpus} GPUs without filling them",
                              hint=f"--tp {self.gpus} or less keeps tensor parallelism inside a node")

    def with_(self, **changes: Any) -> Job:
        """This job with ``changes``; a shorter context (as ``--max-ctx`` tries) shortens a prompt past its end."""
        if "context" in changes and "prompt" not in changes and self.prompt > changes["context"]:
            changes["prompt"] = changes["context"]
        return replace(self, **changes)

    @property
    def checkpointing_reason(self) -> str:
        """Whether gradient checkpointing applies and why: the task's recipe default, or the option that overrode it."""
        default, who = RECIPE_CHECKPOINTING[self.task], _recipe_reason(self.task)
        if self.checkpointing == default:
            said = (_("checkpointing on, the {task} recipe's default: {who}") if self.checkpointing
                    else _("checkpointing off, the {task} recipe's default: {who}"))
            return said.format(task=self.task, who=who) + self._selective_reason()
        option = self._checkpointing_option()
        said = (_("checkpointing on by {option}; the {task} recipe's default is off: {who}")
                if self.checkpointing else
                _("checkpointing off by {option}; the {task} recipe's default is on: {who}"))
        return said.format(option=option, task=self.task, who=who) + self._selective_reason(option)

    def _checkpointing_option(self) -> str:
        """The option that set this job's checkpointing: the one the user gave while the job still has the mode it
        set, else (a change `fit` suggests) the option that sets the mode the job has."""
        given = self.checkpointing_option
        if given and _flag_mode(given) == self.checkpointing_mode:
            return given
        return CHECKPOINTING_FLAGS[self.checkpointing_mode]

    def _selective_reason(self, option: str = "") -> str:
        """What selective means; the option that chose it, unless the sentence already named it."""
        if not (self.selective and self.checkpointing):
            return ""
        if "selective" in option:
            return _("; selective: every other layer")
        return _("; selective: every other layer (--checkpointing-mode selective)")


def _choice(kind: str, value: str | None, choices: tuple[str, ...]) -> str | None:
    """``value`` as one of ``choices`` (any case), None when not given; anything else is refused with the choices."""
    if value is None:
        return None
    if value.strip().lower() not in choices:
        _bad(kind, value, choices)
    return value.strip().lower()


def _precision(precision: str | None, fp32: bool) -> str:
    """The precision recipe: --precision, or --fp32 (its alias for fp32), or mixed; the two disagreeing is refused."""
    chosen = _choice("precision", precision, PRECISIONS)
    if fp32 and chosen not in (None, "fp32"):
        raise GpuflyError(f"--fp32 and --precision {chosen} contradict each other",
                          hint="--fp32 is --precision fp32; give one of them")
    return "fp32" if fp32 else chosen or "mixed"


def _checkpointing_mode(checkpointing: bool | None, mode: str | None) -> str | None:
    """none, selective or full from --checkpointing/--no-checkpointing and --checkpointing-mode; None is the task's
    recipe default. --checkpointing with a mode of none, or --no-checkpointing with selective or full, is refused."""
    chosen = _choice("checkpointing mode", mode, CHECKPOINTING_MODES)
    if chosen is None:
        return None if checkpointing is None else "full" if checkpointing else "none"
    if checkpointing is not None and checkpointing != (chosen != "none"):
        flag = "--checkpointing" if checkpointing else "--no-checkpointing"
        raise GpuflyError(f"{flag} and --checkpointing-mode {chosen} contradict each other",
                          hint="give --checkpointing-mode none, selective or full alone")
    return chosen


def _checkpointing_flag(checkpointing: bool | None, mode: str | None) -> str:
    """The option the user set checkpointing with, as checkpointing_reason names it: --checkpointing-mode (the more
    precise, when both are given), --checkpointing or --no-checkpointing; empty when neither is given."""
    if mode is not None:
        return f"--checkpointing-mode {mode.strip().lower()}"
    if checkpointing is None:
        return ""
    return CHECKPOINTING_FLAGS["full" if checkpointing else "none"]


def _flag_mode(option: str) -> str:
    """The checkpointing mode an option sets: --checkpointing full, --no-checkpointing none, --checkpointing-mode
    its value."""
    if option.startswith("--checkpointing-mode "):
        return option.split(" ", 1)[1]
    return "full" if option == CHECKPOINTING_FLAGS["full"] else "none"


def check_optimizer_in_backward(job: Job) -> None:
    """Refuse --optimizer-in-backward where the step would accumulate gradients. Stepping inside backward applies
    and frees each parameter's gradient as soon as backward makes it, so nothing is left to add the next
    micro-batch's gradient to: torchtune's recipes raise on optimizer_in_bwd with gradient_accumulation_steps > 1,
    and torchtitan's build_optimizers raises on optimizers in backward with pipeline parallelism, whose
    micro-batches accumulate. `fit` would otherwise price a step no run can take."""
    if not (job.training and job.optimizer_in_backward):
        return
    if job.pipeline_parallel > 1:
        raise GpuflyError(f"--optimizer-in-backward cannot run a pipeline (--pp {job.pipeline_parallel}): its "
                          "micro-batches add their gradients together, and stepping in backward frees each gradient "
                          "as backward makes it (torchtitan refuses optimizers in backward with pipeline parallelism)",
                          hint="drop --pp (and --microbatches), or drop --optimizer-in-backward")
    if job.accumulates:
        per_step = job.batch * job.data_parallel
        raise GpuflyError(f"--optimizer-in-backward cannot accumulate gradients: --global-batch {job.global_batch} "
                          f"is more than --batch {job.batch} on {job.data_parallel} data-parallel rank(s) "
                          f"({per_step} samples), and stepping in backward applies and frees each gradient as "
                          "backward makes it (torchtune refuses optimizer_in_bwd with gradient accumulation)",
                          hint=f"drop --global-batch (or make it {per_step}), or drop --optimizer-in-backward")


def _unread_quantization(spec: ModelSpec) -> GpuflyError:
    """The error for a checkpoint whose config.json states a quantization gpufly cannot map to a format: counted at
    16 bits its weights would be 2-4x too large, with nothing said."""
    return GpuflyError(f"{spec.name}: its config.json states a quantization gpufly cannot read "
                       f"({spec.unread_quantization}), so the weights' size is unknown",
                       hint="say how the weights are stored with --quant, e.g. --quant int4 (4-bit) or --quant int8; "
                            "without it they would be counted at 16 bits")


def _training_stored_format(spec: ModelSpec, task: str, quant: str | None, notes: list[str]) -> str | None:
    """The format a training task takes from the model's files as its weights' format; None: the task's own.

    A quantized checkpoint (config.json's quantization_config) loads as it is stored: LoRA trains adapters over it
    (PEFT wraps GPTQ, AWQ and bitsandbytes layers), so its format is the base's; full training cannot update
    integer weights, and QLoRA, which quantizes a 16-bit base to NF4, cannot start from another quantization:
    both are refused unless --quant says the weights are 16-bit after all. A GGUF file is dequantized to 16-bit
    by transformers to be trained (from_pretrained(gguf_file=...)), which a note says. --quant, when given, says
    how the weights are stored and wins (as in inference)."""
    if spec.source.startswith("gguf:"):
        if quant is None and task != "qlora":
            notes.append(_("{model} is a GGUF file ({format}): transformers dequantizes its weights to 16-bit to "
                           "train them, so they are counted at bf16").format(model=spec.name,
                                                                            format=spec.weight_format))
        return None
    stated = spec.weight_format or spec.unread_quantization
    if not stated:
        return None
    given = quant.strip().lower() if quant else None
    if task == "full" and given not in SIXTEEN_BIT:
        raise GpuflyError(f"{spec.name} is a quantized checkpoint ({stated}, config.json's quantization_config): "
                          "its quantized weights cannot be fully fine-tuned",
                          hint="fully fine-tune the 16-bit original checkpoint, or --task lora to train adapters "
                               "over the quantized base")
    if task == "qlora" and spec.weight_format != "nf4" and given not in (*SIXTEEN_BIT, "nf4"):
        lora = spec.weight_format is not None and _lora_base_problem(weight_format(spec.weight_format)) is None
        raise GpuflyError(f"{spec.name} is a quantized checkpoint ({stated}, config.json's quantization_config): "
                          "QLoRA quantizes a 16-bit base to NF4, and transformers loads this one as it is stored",
                          hint=("--task lora trains adapters over its stored layers; or QLoRA the 16-bit original "
                                "checkpoint") if lora else "QLoRA or LoRA the 16-bit original checkpoint")
    if given is not None:
        return None
    if spec.weight_format is None:
        raise _unread_quantization(spec)
    return spec.weight_format


def _lora_base_problem(fmt: WeightFormat) -> str | None:
    """Why PEFT cannot train LoRA adapters over weights in ``fmt``; None where it can (16-bit, bitsandbytes int8 and
    NF4, GPTQ and AWQ int4). GGUF, EXL2 and MLC weights are an inference engine's own format, never a PyTorch layer;
    transformers' FP8 quantizers are not trainable (its Trainer refuses a model quantized with them)."""
    if fmt.engine_family != "torch":
        engines = INFERENCE_FAMILIES.get(fmt.engine_family, fmt.engine_family)
        return (f"{fmt.label} weights run only in {engines}; PEFT adds adapters to PyTorch layers and cannot train "
                "over them")
    if fmt.name == "fp8":
        return ("transformers does not fine-tune FP8-quantized weights: its Trainer refuses a model whose quantization "
                "method is not trainable")
    return None


def _check_lora_base(fmt: WeightFormat, quant: str, *, from_checkpoint: bool) -> None:
    """Refuse a LoRA base PEFT cannot train over (``_lora_base_problem``): `fit` would otherwise price adapters over
    weights no LoRA run can load."""
    problem = _lora_base_problem(fmt)
    if problem is None:
        return
    if from_checkpoint:
        raise GpuflyError(f"LoRA cannot train over a {fmt.label} base (as the checkpoint stores it): {problem}",
                          hint="LoRA or QLoRA the 16-bit original checkpoint")
    raise GpuflyError(f"LoRA cannot train over a {fmt.label} base (--quant {quant}): {problem}",
                      hint="--task qlora for a 4-bit base (NF4), or a 16-bit base: --quant bf16")


def _flash(engine_default: bool, task: str, attention: str | None) -> bool:
    """Whether attention runs a flash-style kernel (no s x s scores): --attention, flash by default in training and
    the engine's default in inference."""
    if task == "infer" and attention is None:
        return engine_default
    return attention != "eager"


def _context_bytes(gib: float | None) -> int:
    """--cuda-context in GiB as bytes (0: the stack's default); NaN, infinities and sizes past any GPU are refused."""
    if gib is None:
        return 0
    if not math.isfinite(gib) or not 0 <= gib <= MAX_CUDA_CONTEXT_GIB:
        raise GpuflyError(f"--cuda-context must be within 0..{MAX_CUDA_CONTEXT_GIB:g} GiB, got {gib}",
                          hint="e.g. --cuda-context 1.3 (what nvidia-smi shows for an idle torch process)")
    return round(gib * 2**30)


def _fsdp_stage(fsdp: str, zero: int) -> int:
    """The ZeRO stage an FSDP strategy equals in memory; a --zero that says otherwise is a contradiction."""
    if fsdp.lower() not in FSDP_STAGES:
        raise unknown_choice("FSDP strategy", fsdp, FSDP_STAGES)
    stage = FSDP_STAGES[fsdp.lower()]
    if zero not in (0, stage):
        raise GpuflyError(f"--fsdp {fsdp} is ZeRO-{stage} in memory, but --zero says {zero}",
                          hint=f"give one of them: --fsdp {fsdp}, or --zero {zero}")
    return stage


def _unused_options(task: str, *, zero: int, fsdp: str | None, lora_rank: int | None, lora_targets: str | None,
                    checkpointing: bool | None, fp32: bool, quant: str | None) -> list[str]:
    """A sentence for each option given that ``task`` (or another option given) does not use."""
    unused = []
    if fp32 and task == "infer" and quant is not None and quant.lower() not in ("fp32", "bf16"):
        unused.append(_("--fp32 sets fp32 weights only where --quant is not given; the weights are --quant {quant} "
                        "(ignored)").format(quant=quant))
    if task == "infer":
        if fsdp is not None:
            unused.append(_("--fsdp {fsdp} shards training state; inference does not use it (ignored)").format(
                fsdp=fsdp))
        elif zero:
            unused.append(_("--zero {zero} shards training state; inference does not use it (ignored)").format(
                zero=zero))
        if checkpointing:
            unused.append(_("--checkpointing saves training activations; inference does not use it (ignored)"))
    if task not in ("lora", "qlora"):
        work = _("inference") if task == "infer" else _("full training")
        if lora_rank is not None:
            unused.append(_("--lora-rank applies to --task lora or qlora; {work} does not use it (ignored)").format(
                work=work))
        if lora_targets is not None:
            unused.append(_("--lora-targets applies to --task lora or qlora; {work} does not use it (ignored)").format(
                work=work))
    return unused


def _unused_by_training(task: str, *, engine: str | None, quant: str | None) -> list[str]:
    """A sentence for each inference option a training task does not use: the engine (training is modelled as
    PyTorch runs it), and --quant where the task fixes the weights' format (full training trains 16-bit weights,
    QLoRA's frozen base is NF4)."""
    unused: list[str] = []
    if task == "infer":
        return unused
    if engine is not None:
        unused.append(_("--engine {engine} serves inference; training is modelled as PyTorch runs it "
                        "(ignored)").format(engine=engine))
    if _quant_unused(task, quant) and task == "full":
        unused.append(_("--quant {quant} sets inference weights or a LoRA base; full training trains 16-bit "
                        "weights (--precision sets the recipe; ignored)").format(quant=quant))
    if _quant_unused(task, quant) and task == "qlora":
        unused.append(_("--quant {quant}: QLoRA's frozen base is NF4 (ignored)").format(quant=quant))
    return unused


def _quant_unused(task: str, quant: str | None) -> bool:
    """Whether --quant has no effect on ``task``: full training trains 16-bit weights (--precision sets them), QLoRA's
    frozen base is NF4. from_options drops such a --quant, so the ranges and the job read the task's own format."""
    if quant is None:
        return False
    given = quant.strip().lower()
    return (task == "full" and given not in SIXTEEN_BIT) or (task == "qlora" and given != "nf4")


def _unused_memory_share(runtime: Engine, task: str, share: float | None) -> list[str]:
    """A sentence when --gpu-memory-utilization is given where nothing reads it: it is vLLM's share of each GPU
    (Fit.capacity_bytes); other engines hold their own documented share or none, and training uses the whole GPU.

    None: the option was not given."""
    if share is None or (task == "infer" and runtime.name == "vllm"):
        return []
    option = f"--gpu-memory-utilization {share:g}"
    if task != "infer":
        return [_("{option} sets vLLM's share of each GPU; training uses the whole GPU (ignored)").format(
            option=option)]
    setting = ENGINE_SHARE_SETTINGS.get(runtime.name)
    if setting is not None and runtime.kv_free_fraction:
        return [_("{option} sets vLLM's share of each GPU; {engine} does not read it: its KV cache takes {setting} "
                  "of the memory left after loading, which gpufly holds at its default {share} (ignored)").format(
            option=option, engine=runtime.display, setting=setting, share=f"{runtime.kv_free_fraction:.0%}")]
    if setting is not None:
        return [_("{option} sets vLLM's share of each GPU; {engine} does not read it: its share is {setting}, which "
                  "gpufly holds at its default {share} (ignored)").format(
            option=option, engine=runtime.display, setting=setting, share=f"{runtime.memory_share:.0%}")]
    return [_("{option} sets vLLM's share of each GPU; {engine} claims no share up front, it allocates what the "
              "weights, cache and buffers need (ignored)").format(option=option, engine=runtime.display)]


def _unused_training_options(task: str, *, precision: str | None, checkpointing_mode: str | None,
                             optimizer_in_backward: bool, offload: str | None,
                             cuda_context_gib: float | None, loss: str | None = None) -> list[str]:
    """A sentence for each training-memory option given to inference, which does not use it."""
    if task != "infer":
        return []
    given = [flag for flag, value in (("--precision", precision), ("--checkpointing-mode", checkpointing_mode),
                                      ("--optimizer-in-backward", optimizer_in_backward),
                                      ("--offload", offload), ("--cuda-context", cuda_context_gib),
                                      ("--loss", loss))
             if value not in (None, False)]
    return [_("{option} shapes a training step; inference does not use it (ignored)").format(option=flag)
            for flag in given]


def _unused_scale_options(task: str, *, nodes: int, internode: str | None, nics: int | None,
                          pipeline_parallel: int, microbatches: int | None, global_batch: int | None,
                          gpus: int = 1, link: str | None = None) -> list[str]:
    """A sentence for each option of a multi-GPU or multi-node job that this job does not use."""
    unused = []
    if gpus == 1 and nodes == 1 and link is not None:
        unused.append(_("--link {link} joins GPUs; one GPU does not use it (ignored)").format(link=link))
    if nodes == 1:
        if internode is not None:
            unused.append(_("--internode {link} joins nodes; one node does not use it (ignored)").format(
                link=internode))
        if nics is not None:
            unused.append(_("--nics counts a node's network cards; one node does not use them (ignored)"))
    if task == "infer" and (microbatches is not None or global_batch is not None):
        unused.append(_("--microbatches and --global-batch shape a training step; inference does not use them "
                        "(ignored)"))
    elif _microbatches_unused(task, pipeline_parallel, microbatches, global_batch):
        unused.append(_("--microbatches feeds a pipeline (--pp 2 or more); without one each step is one "
                        "micro-batch per GPU (ignored)"))
    return unused


def _microbatches_unused(task: str, pipeline_parallel: int, microbatches: int | None,
                         global_batch: int | None) -> bool:
    """Whether --microbatches has no effect: it counts a pipeline's micro-batches, and without a pipeline (or with
    --global-batch, which sets the count) a training step is one micro-batch per GPU. from_options drops it then,
    so the step is priced as the note says."""
    return task != "infer" and microbatches is not None and pipeline_parallel == 1 and global_batch is None


def _recipe_reason(task: str) -> str:
    """Who sets each task's checkpointing default (RECIPE_CHECKPOINTING's sentences), in the user's language."""
    return {"qlora": _("PEFT's prepare_model_for_kbit_training turns it on (use_gradient_checkpointing=True, "
                       "peft/utils/other.py), as the QLoRA recipe does"),
            "lora": _("TRL's SFTConfig turns it on (gradient_checkpointing defaults to True in TRL 1.x, "
                      "trl/trainer/sft_config.py)"),
            "full": _("transformers' TrainingArguments leave it off (gradient_checkpointing=False)")}[task]


def _ignore(_: str) -> None:
    """The default ``note``: a caller that shows no notes (a library call) loses nothing it asked for."""


def _target_list(option: str | None) -> tuple[str, ...]:
    """The modules ``--lora-targets a,b`` names; the defaults when it is not given."""
    if option is None:
        return DEFAULT_LORA_TARGETS
    targets = tuple(t.strip() for t in option.split(",") if t.strip())
    if not targets:
        example = ",".join(DEFAULT_LORA_TARGETS)
        raise GpuflyError("--lora-targets names no module", hint=f"e.g. --lora-targets {example}")
    return targets


def _bad(kind: str, value: str, choices: tuple[str, ...]) -> None:
    raise unknown_choice(kind, value, choices, hint=f"{_plural(kind)}: {', '.join(choices)}", cutoff=0.4)


def _plural(kind: str) -> str:
    """``kind`` in the plural, for the hint that lists the choices: "losses", not "losss"."""
    return kind + ("es" if kind.endswith(("s", "x", "sh", "ch")) else "s")
