"""Job: what the user wants to do with a model, validated once, in one frozen dataclass."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError, unknown_choice
from gpufly.i18n import gettext as _

if TYPE_CHECKING:
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
                     gpu_memory_utilization: float = 0.9, gpus: int = 1, nodes: int = 1, link: str | None = None,
                     internode: str | None = None, nics: int | None = None, tensor_parallel: int = 1,
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
        the whole context, the largest prefill the context allows.

        Options that contradict each other (`--fsdp full_shard --zero 2`, `--fp32 --precision bf16`) are refused;
        options the task does not use (`--zero` for inference, `--lora-rank` for full training) are said, one
        sentence each, through ``note``: a person who gave them expects them to count, and silence would let them
        believe they did.
        """
        from gpufly.estimate.comms import internode as resolve_internode
        from gpufly.estimate.comms import link_kind
        from gpufly.estimate.engines import engine as check_engine
        from gpufly.estimate.formats import kv_bytes, weight_format
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
        if task != "infer":
            if engine is not None:
                check_engine(engine)  # a misspelt name is still an error, not a silent note
            engine = None  # training is modelled as PyTorch runs it, whatever inference engine was named
        unused += _unused_scale_options(task, nodes=nodes, internode=internode, nics=nics,
                                        pipeline_parallel=pipeline_parallel, microbatches=microbatches,
                                        global_batch=global_batch)
        link = link_kind(link) if link is not None else ""
        internode = resolve_internode(internode).name if internode is not None else ""
        from_file = spec.weight_format if spec.source.startswith("gguf:") else None
        runtime = check_engine(engine) if engine is not None and task == "infer" else None
        # A GGUF file's type, or the quantization a checkpoint's config.json states (an AWQ or GPTQ repository).
        stored = from_file or (spec.weight_format if task == "infer" else None)
        if task == "infer" and not quant and not stored and spec.unread_quantization:
            raise GpuflyError(f"{spec.name}: its config.json states a quantization gpufly cannot read "
                              f"({spec.unread_quantization}), so the weights' size is unknown",
                              hint="say how the weights are stored with --quant, e.g. --quant int4 (4-bit) or "
                                   "--quant int8; without it they would be counted at 16 bits")
        quant = quant or (stored.lower() if stored else (runtime.default_quant if runtime else "") or "bf16")
        fmt = weight_format(quant)
        kv_bytes(kv_format)
        if engine is None:
            gguf = from_file or fmt.engine_family == "gguf"
            engine = "llama.cpp" if gguf and task == "infer" else "transformers"
        runtime = check_engine(engine)
        if task == "infer":
            from gpufly.estimate.memory import check_format

            check_format(runtime, fmt)
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
                  mixed_precision=not fp32, lora_targets=targets, gpu_memory_utilization=gpu_memory_utilization,
                  gpus=gpus, nodes=nodes, link=link, internode=internode, nics=nics or 0,
                  tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, microbatches=microbatches or 0,
                  global_batch=global_batch or 0,
                  flash_attention=_flash(runtime.flash_attention_default, task, attention),
                  master_weights=precision != "bf16", selective=mode == "selective",
                  sdpa=attention == "sdpa", optimizer_in_backward=optimizer_in_backward,
                  offload=offload or "none", cuda_context_bytes=context_bytes, prompt=prompt or 0,
                  loss=given_loss if given_loss and task != "infer" else "full")
        if job.training and job.zero and job.data_parallel == 1:
            unused.append(_("--zero {zero} shards training state across data-parallel ranks; this job has one "
                            "(one GPU, or --tp x --pp take them all): nothing is sharded").format(zero=job.zero))
        for sentence in unused:  # once the options are known to be valid: a refused run needs no notes
            (note or _ignore)(sentence)
        return job

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "precision": self.precision, "checkpointing_mode": self.checkpointing_mode,
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
        said = (_("checkpointing on by --checkpointing; the {task} recipe's default is off: {who}")
                if self.checkpointing else
                _("checkpointing off by --no-checkpointing; the {task} recipe's default is on: {who}"))
        return said.format(task=self.task, who=who) + self._selective_reason()

    def _selective_reason(self) -> str:
        return _("; selective: every other layer (--checkpointing-mode selective)") if self.selective and \
            self.checkpointing else ""


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
    if quant is not None and task == "full" and quant.lower() not in ("bf16", "fp16", "fp32"):
        unused.append(_("--quant {quant} sets inference weights or a LoRA base; full training trains 16-bit "
                        "weights (--precision sets the recipe; ignored)").format(quant=quant))
    if quant is not None and task == "qlora" and quant.lower() != "nf4":
        unused.append(_("--quant {quant}: QLoRA's frozen base is NF4 (ignored)").format(quant=quant))
    return unused


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
                          pipeline_parallel: int, microbatches: int | None, global_batch: int | None) -> list[str]:
    """A sentence for each option of a multi-node job that this job does not use."""
    unused = []
    if nodes == 1:
        if internode is not None:
            unused.append(_("--internode {link} joins nodes; one node does not use it (ignored)").format(
                link=internode))
        if nics is not None:
            unused.append(_("--nics counts a node's network cards; one node does not use them (ignored)"))
    if task == "infer" and (microbatches is not None or global_batch is not None):
        unused.append(_("--microbatches and --global-batch shape a training step; inference does not use them "
                        "(ignored)"))
    elif microbatches is not None and pipeline_parallel == 1 and global_batch is None:
        unused.append(_("--microbatches feeds a pipeline (--pp 2 or more); without one each step is one "
                        "micro-batch per GPU (ignored)"))
    return unused


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
    raise unknown_choice(kind, value, choices, hint=f"{kind}s: {', '.join(choices)}", cutoff=0.4)
