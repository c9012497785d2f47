"""What a real run would refuse, checked before any estimate: a context past the model's maximum (or past what
vLLM and SGLang derive from it), a tensor-parallel size the heads do not divide, a multi-die card taken as one
device, an engine on hardware it does not run on or given a model, attention kernel, KV-cache type or weights it
cannot run there, and more GPUs than a node or the engine holds.

A refusal is a GpuflyError (one `error:` line and a hint); what a run would accept with a caveat (a context
stretched by the config's RoPE scaling, one die of a two-die card) comes back as a note for the verdict.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from gpufly.catalog.spec import RATE_FIELDS, GpuSpec, parse_compute_capability
from gpufly.errors import GpuflyError
from gpufly.estimate.engines import ENGINES, Engine, engine
from gpufly.estimate.formats import kv_bytes, kv_key, weight_format
from gpufly.estimate.job import Job
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec

LONG_CONTEXT_OVERRIDES = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
                          "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"}
"""The engines that refuse a context past the one they derive from the config (derived_max_context), and the
environment variable that lets them start anyway: vLLM's _get_and_verify_max_len raises "User-specified
max_model_len ... is greater than the derived max_model_len ... set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1";
SGLang's ModelConfig raises the same for --context-length unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
(python/sglang/srt/configs/model_config.py)."""
_GEMMA3 = re.compile(r"gemma[\s_-]*3(?!\d)", re.IGNORECASE)


def derived_max_context(model: ModelSpec, runtime: str) -> int | None:
    """The longest context vLLM or SGLang (``runtime``) derives from the config, None where it states none.

    vLLM (_get_and_verify_max_len): max_position_embeddings times the RoPE scaling factor, except for the rope types
    su, longrope and llama3, whose max_position_embeddings already is the extended length; yarn multiplies its
    original_max_position_embeddings instead; Gemma 3 (model_type gemma3, told here by the name, as ModelSpec keeps
    no model_type) is already scaled. SGLang (get_context_length): the factor applies unless the scaling states an
    original_max_position_embeddings or is llama3."""
    limit, scaling = model.max_context, model.rope_scaling
    if limit is None or scaling is None:
        return limit
    factor = scaling.factor or 1.0
    if runtime == "sglang":
        return limit if scaling.original_context or scaling.kind == "llama3" else int(limit * factor)
    if scaling.kind in ("su", "longrope", "llama3") or _GEMMA3.search(model.name):
        return limit
    base = scaling.original_context if scaling.kind == "yarn" and scaling.original_context else limit
    return int(base * factor)


def check_derived_context(model: ModelSpec, job: Job) -> None:
    """Refuse a context past the one vLLM or SGLang derives from the config: they stop at start unless told by an
    environment variable (LONG_CONTEXT_OVERRIDES)."""
    runtime = engine(job.engine).family
    if job.training or runtime not in LONG_CONTEXT_OVERRIDES:
        return
    derived = derived_max_context(model, runtime)
    if derived is None or job.context <= derived:
        return
    source = "max_position_embeddings and its RoPE scaling" if model.rope_scaling else "max_position_embeddings"
    raise GpuflyError(f"{engine(job.engine).display} refuses --ctx {job.context:,} for {model.name}: it derives a "
                      f"maximum of {derived:,} tokens from the config ({source})",
                      hint=f"--ctx {derived} or less; to start it anyway, {LONG_CONTEXT_OVERRIDES[runtime]} (quality "
                           "past that length is not the model's)")


def context_note(model: ModelSpec, job: Job) -> str | None:
    """None when the context is within the model's maximum; a warning when it is beyond it and the config declares
    RoPE scaling (the run goes on, quality past the trained length is the scaling's); else a GpuflyError, as the
    model's position embeddings or RoPE tables end there. vLLM's and SGLang's refusal past their derived maximum is
    check_derived_context's, in check_request, which the callers run first."""
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
    other = "" if job.training or size > GGML_MAX_DEVICES else "; or --engine llama.cpp, which splits layers"
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
    if engine(job.engine).name in refusing:
        raise GpuflyError(f"{engine(job.engine).display} refuses {what} on the {gpu.name} (compute capability "
                          f"{gpu.compute_capability}; {why})", hint=hint)
    return note


def bf16_note(gpu: GpuSpec, job: Job) -> str | None:
    """bf16 weights on an NVIDIA GPU older than Ampere (compute capability under 8.0: V100, T4, RTX 20xx): refused where
    the engine refuses them; for transformers, which runs them without tensor cores, a note pointing at fp16."""
    if job.training:
        return _bf16_training_note(gpu, job)
    if weight_format(job.quant).compute_dtype != "bf16" or not _inference_below(gpu, job, (8, 0)):
        return None
    return _refused_or_noted(
        gpu, job, BF16_ENGINES_REFUSE, "bf16", "bf16 needs 8.0 or newer", "use --quant fp16 (vLLM: --dtype half)",
        _("the {gpu} (compute capability {cc}) has no bf16 tensor cores: bf16 matmuls run at its FP32 rate (the "
          "speed below counts that); --quant fp16 runs on its tensor cores").format(
            gpu=gpu.name, cc=gpu.compute_capability))


def _bf16_training_note(gpu: GpuSpec, job: Job) -> str | None:
    """Training on an NVIDIA GPU without bf16 tensor cores: the mixed recipe is counted as fp16 autocast (what runs
    there: the Trainer and accelerate refuse bf16 on it), pure bf16 at the FP32 rate; either way the reader hears it."""
    if not job.mixed_precision or not gpu.lacks_bf16_tensor_cores:
        return None
    if job.master_weights:
        return _("the {gpu} (compute capability {cc}) has no bf16 tensor cores: mixed precision is counted as fp16 "
                 "autocast with a loss scaler (the Trainer's --fp16), as it runs there").format(
            gpu=gpu.name, cc=gpu.compute_capability)
    return _("the {gpu} (compute capability {cc}) has no bf16 tensor cores: pure-bf16 training runs its matmuls at "
             "the FP32 rate (the speed below counts that); --precision mixed runs fp16 autocast on its tensor "
             "cores").format(gpu=gpu.name, cc=gpu.compute_capability)


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


FP8_MIN_CAPABILITY: dict[str, tuple[int, int]] = {"vllm": (8, 0), "sglang": (8, 0), "tensorrt-llm": (8, 9)}
"""The compute capability below which each engine refuses fp8 weights at start: vLLM runs them from Ampere on, as
W8A16 through its fp8 Marlin kernel where the GPU has no fp8 tensor cores (marlin_utils_fp8.is_fp8_marlin_supported:
has_device_capability(80); docs, quantization/fp8: "Ampere GPUs are supported for W8A16 (weight-only FP8) utilizing
Marlin kernels"), natively from Ada/Hopper (8.9); SGLang loads fp8 checkpoints through the same kernels and check;
TensorRT-LLM's FP8 needs Ada or Hopper (8.9; its support matrix lists FP8 for SM89 and SM90 onwards)."""
FP8_NATIVE_CAPABILITY = (8, 9)
"""Ada and Hopper, the first NVIDIA GPUs with fp8 tensor cores."""


def fp8_note(gpu: GpuSpec, job: Job) -> str | None:
    """fp8 weights on an NVIDIA GPU without fp8 tensor cores (under 8.9): refused where the engine stops at start
    (FP8_MIN_CAPABILITY: vLLM and SGLang under 8.0, TensorRT-LLM under 8.9); for transformers a note: its
    fp8 quantizer dequantizes the checkpoint to bf16 there (quantizer_finegrained_fp8.py: "FP8 quantized models is only
    supported on GPUs with compute capability >= 8.9 ... We will default to dequantizing the model to bf16"; versions
    before it refused)."""
    if weight_format(job.quant).name != "fp8":
        return None
    name = engine(job.engine).name
    minimum = FP8_MIN_CAPABILITY.get(name, FP8_NATIVE_CAPABILITY)
    if name not in (*FP8_MIN_CAPABILITY, "transformers") or not _inference_below(gpu, job, minimum):
        return None
    return _refused_or_noted(
        gpu, job, tuple(FP8_MIN_CAPABILITY), "fp8 weights", f"its fp8 kernels need {minimum[0]}.{minimum[1]} or newer",
        "use --quant fp16 or an int8/int4 checkpoint (--quant int8, --quant gptq)" + (
            "; --engine vllm runs fp8 weights from 8.0 on" if not _inference_below(gpu, job, (8, 0)) else ""),
        _("the {gpu} (compute capability {cc}) has no fp8 tensor cores (Ada and Hopper, 8.9, are the first): "
          "transformers dequantizes an fp8 checkpoint to bf16 on it, twice the weights' memory shown, and runs "
          "16-bit matmuls; --quant fp16 or an int8/int4 checkpoint runs there").format(
            gpu=gpu.name, cc=gpu.compute_capability))


VENDOR_LABELS = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel", "gaudi": "Intel Gaudi", "apple": "Apple"}
"""The name of each Engine.vendors value in messages."""


def gpu_vendor(gpu: GpuSpec) -> str:
    """The vendor as engines tell hardware apart (Engine.vendors): GpuSpec.vendor, but Intel's Gaudi accelerators
    (vendor intel, architecture Gaudi 2 or 3) as "gaudi": they run through Habana's stack, not Intel's GPU one."""
    if gpu.vendor == "intel" and gpu.architecture.lower().startswith("gaudi"):
        return "gaudi"
    return gpu.vendor


def check_vendor(gpu: GpuSpec, job: Job) -> None:
    """Refuse inference on an engine that does not run on the GPU's vendor (Engine.vendors: TensorRT-LLM on an AMD
    card, vLLM on an Apple GPU), naming the engines that do."""
    runtime, vendor = engine(job.engine), gpu_vendor(gpu)
    if job.training or vendor not in VENDOR_LABELS or vendor in runtime.vendors:
        return
    able = ", ".join(name for name, other in ENGINES.items() if vendor in other.vendors)
    raise GpuflyError(f"{runtime.display} does not run on {VENDOR_LABELS[vendor]} hardware like the {gpu.name}",
                      hint=f"engines that run there: {able}")


def _runs_model(runtime: Engine, model: ModelSpec) -> bool:
    """Whether the engine runs the model: transformers anything, the others transformer models of their kinds."""
    return not runtime.model_kinds or (model.is_transformer and model.kind in runtime.model_kinds)


def check_model_kind(model: ModelSpec, job: Job) -> None:
    """Refuse a model the engine does not run: every engine but transformers loads transformer language models
    only (a CNN, a recommender or a vision transformer is not one), and exllamav2 and MLC LLM decoders only."""
    runtime = engine(job.engine)
    if job.training or _runs_model(runtime, model):
        return
    able = [name for name, other in ENGINES.items() if _runs_model(other, model)]
    kind = model.kind if model.is_transformer else f"{model.kind}, not a transformer"
    raise GpuflyError(f"{runtime.display} does not run {model.name} ({kind}): it runs "
                      f"{' and '.join(runtime.model_kinds)} transformer models only",
                      hint=f"--engine {' or '.join(able)}, or leave --engine out")


def check_attention(job: Job) -> None:
    """Refuse an --attention the engine has no setting for (Engine.attention_choices): eager or SDPA in an engine
    that runs its own fused kernels, SDPA in llama.cpp. Flash attention off is what the job says only where the user
    asked for it (the engine's own default is on), and SDPA only ever when asked."""
    runtime = engine(job.engine)
    if job.training or job.attention in runtime.attention_choices:
        return
    others = [f"--attention {choice}" for choice in runtime.attention_choices if choice != "flash"]
    own = "" if len(runtime.attention_choices) > 1 else "; it runs its own attention kernels"
    raise GpuflyError(f"{runtime.display} has no {job.attention} attention (its settings: "
                      f"{', '.join(runtime.attention_choices)}{own})",
                      hint=" or ".join(["leave --attention out", *others]))


KV_ENGINES_REFUSE = ("vllm", "sglang", "llama.cpp")
"""Engines that stop at start on a KV-cache type they do not have: vLLM's and SGLang's --kv-cache-dtype take auto
and fp8 variants only (an argparse choice: no integer types), llama.cpp's --cache-type-k/-v throws "Unsupported cache
type" for anything but its ggml types (common/arg.cpp kv_cache_type_from_str). Elsewhere memory.engine_kv_note
says it and the estimate goes on."""
QUANTIZED_KV = ("q8_0", "q4_0")


def check_kv_format(job: Job) -> None:
    """Refuse a --kv the engine would refuse (KV_ENGINES_REFUSE), and a quantized KV cache in llama.cpp or Ollama
    with flash attention off: llama.cpp refuses a quantized V cache without it ("V cache quantization requires
    flash_attn", src/llama-context.cpp), and Ollama ignores OLLAMA_KV_CACHE_TYPE unless OLLAMA_FLASH_ATTENTION=1
    (llm/server.go logs "quantized kv cache requested but flash attention disabled" and keeps f16), so neither holds
    the cache the estimate would count."""
    runtime, kv = engine(job.engine), kv_key(job.kv_format)
    if job.training:
        return
    if runtime.name in KV_ENGINES_REFUSE and kv not in runtime.kv_formats:
        nearest = min(runtime.kv_formats, key=lambda name: abs(kv_bytes(name) - kv_bytes(kv)))
        able = [name for name, other in ENGINES.items() if kv in other.kv_formats]
        elsewhere = f"; {', '.join(able)} hold {kv} (--engine)" if able else ""
        raise GpuflyError(f"{runtime.display} has no {kv} KV cache (its KV formats: {', '.join(runtime.kv_formats)})",
                          hint=f"--kv {nearest} is its nearest{elsewhere}")
    if runtime.family == "llama.cpp" and kv in QUANTIZED_KV and not job.flash_attention:
        raise GpuflyError(f"{runtime.display} holds a {kv} KV cache only with flash attention on, and this job has it "
                          "off", hint="--attention flash (Ollama: OLLAMA_FLASH_ATTENTION=1 with OLLAMA_KV_CACHE_TYPE)")


def check_request(model: ModelSpec, job: Job) -> None:
    """The refusals that hold on any GPU: a model, an attention kernel or a KV-cache type the engine does not run,
    a context past what vLLM or SGLang derive. `recommend` refuses these for the job as a whole."""
    check_model_kind(model, job)
    check_attention(job)
    check_kv_format(job)
    check_derived_context(model, job)


NODE_GPUS = 16
"""The most GPUs one node holds: 8 on HGX/DGX and OAM baseboards, up to 16 on the largest (DGX-2, HGX-2, 16-GPU
PCIe servers). A fabric that joins more (nvlink_domain: GB200 NVL72) is one node here."""
_NVL = re.compile(r"\bNVL(\d+)\b")
GGML_MAX_DEVICES = 16
"""llama.cpp's device limit: GGML_CUDA_MAX_DEVICES is 16 in ggml-cuda.h (the HIP build shares it) and
GGML_VK_MAX_DEVICES 16 in the Vulkan backend; its layer split takes no more."""


def nvlink_domain(gpu: GpuSpec) -> int:
    """The most GPUs the GPU's NVLink fabric joins, where the catalog names a rack-scale domain (GB200's "NVL72",
    GH200's "NVL32") in its interconnect or form factor; 0 where it names none."""
    text = f"{gpu.nvlink or ''} {gpu.form_factor or ''}"
    return max((int(size) for size in _NVL.findall(text)), default=0)


def node_limit(gpu: GpuSpec) -> int:
    """The most devices of ``gpu`` one node holds: NODE_GPUS cards, or the NVLink domain where it is larger; a
    multi-die card's dies each count."""
    return max(NODE_GPUS, nvlink_domain(gpu)) * max(1, gpu.dies)


def check_node_size(gpu: GpuSpec, job: Job) -> None:
    """Refuse more GPUs in one node than a node of them holds (node_limit): more are --nodes."""
    limit = node_limit(gpu)
    if job.gpus <= limit:
        return
    nodes = -(-job.gpus // limit)
    raise GpuflyError(f"{job.gpus:,} {gpu.name} GPUs in one node: a node holds at most {limit}",
                      hint=f"--gpu {limit}x{gpu.id} --nodes {nodes:,} (--gpu counts GPUs per node)")


def check_layer_split(model: ModelSpec, gpu: GpuSpec, job: Job) -> None:
    """Refuse a llama.cpp (or Ollama) layer split over more GPUs than the model has layers, which leaves GPUs with
    nothing to run, or than llama.cpp takes (GGML_MAX_DEVICES)."""
    runtime = engine(job.engine)
    if job.training or runtime.family != "llama.cpp":
        return
    layers = model.layers or GGML_MAX_DEVICES
    most = min(layers, GGML_MAX_DEVICES)
    if job.gpus <= most:
        return
    why = (f"{model.name} has {layers} layers to split" if layers < GGML_MAX_DEVICES
           else f"it takes at most {GGML_MAX_DEVICES} devices (GGML_CUDA_MAX_DEVICES)")
    raise GpuflyError(f"{runtime.display} cannot split {model.name} over {job.gpus} GPUs: {why}",
                      hint=f"--gpu {most}x{gpu.id} or fewer; for more GPUs, --engine vllm (tensor parallel)")


def check_soc_count(gpu: GpuSpec, job: Job) -> None:
    """A system on a chip (Apple's M-series, NVIDIA's GB10) is one GPU per machine: two of them in one node do not
    exist; machines are --nodes."""
    if job.gpus > 1 and (gpu.form_factor or "").lower() == "soc":
        raise GpuflyError(f"the {gpu.name} is a system on a chip, one GPU per machine: {job.gpus} of them cannot share "
                          "a node", hint=f"--gpu {gpu.id} alone; for several machines, --nodes {job.gpus} (training)")


def check_job(model: ModelSpec, gpu: GpuSpec, job: Job) -> tuple[str, ...]:
    """Refuse what a real run would refuse; the notes for what it would run with a caveat."""
    check_request(model, job)
    check_vendor(gpu, job)
    check_soc_count(gpu, job)
    check_layer_split(model, gpu, job)
    check_node_size(gpu, job)
    check_tensor_parallel(model, job)
    notes = (context_note(model, job), die_note(gpu, job.gpus), check_nodes(job), bf16_note(gpu, job),
             awq_note(gpu, job), fp8_note(gpu, job))
    return tuple(note for note in notes if note)
