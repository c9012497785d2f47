"""Named constants per inference engine and for training, each with where it comes from.

The efficiency factors (``*_efficiency``, ``*_overhead_s``) are calibrated on public measurements
by benchmarks/estimate_accuracy.py (docs/calibration.md lists the rows); the memory constants come
from the engines' own documentation and issue threads, as cited.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufly.errors import unknown_choice
from gpufly.estimate.formats import WeightFormat

MIB = 2**20
GIB = 2**30

ALL_VENDORS = ("nvidia", "amd", "intel", "gaudi", "apple")
"""Every hardware vendor the catalog has, Intel's Gaudi accelerators apart from its GPUs (Engine.vendors)."""


@dataclass(frozen=True)
class Engine:
    """An inference runtime as the estimators model it.

    A decode step costs ``max(cpu floor, memory time, compute time) + fixed costs``: the host
    launches kernels while the GPU runs earlier ones, so a small model in an eager engine is
    bound by the host (the floor), a large one by memory bandwidth.
    """

    name: str
    context_bytes: int
    """CUDA context plus the runtime's fixed buffers. PyTorch: 287 MB with lazy module loading,
    667 MB eager (pytorch#86509), ~426 MiB seen on torch 2.10 + CUDA 13 (unsloth-zoo#1053);
    llama.cpp/ollama reserve 457 MiB per CUDA GPU (ollama ml/device.go MinimumMemory)."""
    bandwidth_efficiency: float
    """Share of the datasheet bandwidth a decode step's weight reads reach on GDDR cards (MBU)."""
    hbm_bandwidth_factor: float
    """Decode kernels fill HBM cards' bandwidth less well than GDDR ones' (fitted)."""
    cpu_s_per_layer: float
    """Host time per layer and step: the floor of an eager engine's step."""
    step_overhead_s: float
    """Fixed host cost per step that does not overlap the GPU (scheduling, sampling)."""
    layer_overhead_s: float
    """Fixed cost per layer and step (small kernels: norms, RoPE, residuals, and their launches). llama.cpp: 120 us,
    the launch-bound graph of builds before CUDA graphs (the calibration rows' b2824 and PR 6017), fitted with
    bandwidth_efficiency, hbm_bandwidth_factor and GGUF_DROP_SHARE on the fit set's 74 llama-bench tg rows. It is
    what makes a 70B model read its weights at a larger share of the bandwidth than an 8B one (issue 17's pattern 3:
    with 40 us and the README's whole format factor, 70B Q4_K_M was predicted 23% slow and 7B Q4_0 15% fast)."""
    kv_traffic_per_group: float
    """KV-cache bytes moved per byte stored, per query head sharing a KV head: eager attention
    repeats K and V for every query head of a group (transformers' repeat_kv) and its cache grows
    by concatenation; paged and flash kernels read each byte once (0). transformers: 6.5, the least mean
    |log(measured / predicted)| over the fit set's 24 transformers decode rows (0.187 at 3.6, the value fitted
    before the split, 0.092 at 6.5; long prompts were predicted 40-55% fast); it trades off against
    bandwidth_efficiency (5 at 0.70 fits as well), which was kept."""
    prefill_compute_efficiency: float
    """Share of the dense tensor rate a long prefill reaches."""
    unified_bandwidth_factor: float = 1.0
    """Decode kernels fill a system-on-chip's unified memory (Apple silicon) less well than a discrete card's GDDR.
    llama.cpp (Metal): 0.80, the least mean |log(measured / predicted)| over the fit set's 4 Apple tg rows (0.281
    at 1, 0.169 at 0.8; 0.75-0.8 flat), after the CUDA constants were fitted."""
    quantized_cpu_factor: float = 1.0
    """Host-cost multiplier for int8/int4 layers, whose kernels launch more work per matrix."""
    kernel_cpu_factor: tuple[tuple[str, float], ...] = ()
    """(quantizer, factor): the host-cost multiplier for a checkpoint of that quantizer (WeightFormat.kernel),
    in place of ``quantized_cpu_factor``."""
    preallocates_context: bool = False
    """llama.cpp allocates the KV cache for all of n_ctx up front."""
    splits_layers: bool = False
    """Across GPUs the engine splits layers (a pipeline for one sequence: no added bandwidth)
    rather than tensors."""
    prefill_ubatch: int = 0
    """Tokens of a prompt the engine runs through the model at a time (llama.cpp's n_ubatch, 512): each micro-batch
    attends to the keys before it and, with dequantizes_for_prefill, dequantizes the weights again; 0: the whole
    prompt at once."""
    pipelines_prefill: bool = False
    """With its layers split across GPUs, the engine pipelines a long prompt's micro-batches through them (llama.cpp
    since PR 6017); otherwise each GPU waits for the one before."""
    pipeline_efficiency: float = 1.0
    """Share of the ideal pipeline speed-up a layer-split prefill reaches (stage imbalance, copies between GPUs,
    the synchronisation per micro-batch). llama.cpp: 0.45, fitted with LLAMA_CPP_PREFILL_TFLOPS_PER_WATT on the fit
    set's 68 llama-bench pp rows; on its 45 multi-GPU rows alone the mean |log(measured / predicted)| is 0.193 at
    0.45, 0.198 at 0.5, 0.226 at 0.25 and 0.32 at 1 (0.55 was the best before prefill counted attention scores and
    dequantization). Capping the pipeline at llama-bench's n_batch (2048 tokens, 4 micro-batches) fitted worse."""
    dequantizes_for_prefill: bool = False
    """Dequantizes quantized weights to a 16-bit copy for each prompt micro-batch and runs a 16-bit tensor-core GEMM
    on it: llama.cpp's CUDA backend for batches over 32 tokens on Volta and newer (ggml-cuda's cuBLAS path; the
    calibration rows' builds, b2824 and PR 6017's, predate the int8 tensor-core MMQ kernels of mid-2024)."""
    prefill_tflops_per_watt: tuple[tuple[str, float], ...] = ()
    """(chip prefix, TFLOP/s per watt of board power): the most a prefill's matmuls sustain on that chip family,
    fitted; a card's rate is the lower of its tensor rate times ``prefill_compute_efficiency`` and its board power
    times this."""
    quantized_bandwidth_factor: tuple[tuple[str, float], ...] = ()
    """(weight format, factor): the share of the engine's decode bandwidth its kernels for that quantized format
    reach, relative to 16-bit weights (vLLM's Marlin kernels for GPTQ and AWQ); 1 where not listed."""
    fp16_accumulate: bool = False
    """Runs FP16 matmuls with FP16 accumulation, which GeForce cards execute at twice the rate
    of FP32 accumulation (Ampere GA102 and Ada whitepapers)."""
    kv_formats: tuple[str, ...] = ("fp16", "bf16", "fp32")
    """The --kv formats the engine can hold its KV cache in (formats.kv_key's spelling)."""
    label: str = ""
    """The engine's name as its project writes it, for notes."""
    runs_formats: tuple[str, ...] = ()
    """The weight formats the engine runs (a WeightFormat's base name in lower case, "gguf" for every GGUF type); a
    format outside them is refused (``check_format``). Empty: any, with a note where it is not native (the first
    three engines, whose notes predate the refusal)."""
    memory_share: float = 1.0
    """The share of each GPU's memory the engine claims at start (SGLang's --mem-fraction-static, MLC's
    gpu_memory_utilization); vLLM's is the job's --gpu-memory-utilization."""
    share_holds_weights_and_kv: bool = False
    """``memory_share`` bounds the weights and the KV pool only; activations, CUDA graphs and the context take the
    rest of the GPU (SGLang's mem_fraction_static)."""
    kv_free_fraction: float = 0.0
    """The share of the memory left after weights and activations the engine gives its KV cache
    (TensorRT-LLM's kv_cache_free_gpu_memory_fraction); 0: not sized that way."""
    activation_tokens: int = 0
    """The most tokens one forward pass runs (chunked prefill): it bounds the activation peak; 0: the whole
    context."""
    default_quant: str = ""
    """The weight format the engine's users get when they name none (Ollama's library models: Q4_K_M)."""
    flash_attention_default: bool = True
    """Whether the engine runs flash attention unless told otherwise (Ollama: off)."""
    like: str = ""
    """The engine this one is a build of (Ollama: llama.cpp): memory rules and constants are that engine's."""
    runs_quantizers: tuple[str, ...] = ()
    """The quantizers (WeightFormat.kernel) whose int checkpoints the engine loads; empty: any of them."""
    documented_only: bool = False
    """The constants come from the engine's documentation and first principles, with no fitted rows: its ranges
    are widened and say so (estimate/ranges.py)."""
    vendors: tuple[str, ...] = ALL_VENDORS
    """The hardware the engine runs on, as GpuSpec.vendor names it ("nvidia", "amd", "intel", "apple"), with Intel's
    Gaudi accelerators apart as "gaudi" (a separate software stack, Habana's SynapseAI, from Intel's GPUs' oneAPI
    and Vulkan); a GPU of another vendor is refused (checks.check_vendor). Each engine's list and its source:
    ENGINE_VENDORS."""
    attention_choices: tuple[str, ...] = ("flash",)
    """The --attention values the engine has a setting for (Job.attention): transformers' attn_implementation
    (flash_attention_2, sdpa, eager), llama.cpp's flash attention on or off (-fa; eager is off), and for the
    serving engines that run their own fused attention kernels only their default ("flash")."""
    model_kinds: tuple[str, ...] = ("decoder", "encoder")
    """The ModelSpec kinds the engine runs, transformer models only (ModelSpec.is_transformer); empty: any model
    (transformers runs any PyTorch module: CNNs, recommenders, vision transformers)."""

    @property
    def display(self) -> str:
        return self.label or self.name

    @property
    def family(self) -> str:
        """The engine whose memory rules apply: itself, or the one it is a build of."""
        return self.like or self.name

    def runs(self, fmt: WeightFormat) -> bool:
        if not self.runs_formats:
            return fmt.engine_family in ("torch", "gguf")
        key = "gguf" if fmt.engine_family == "gguf" else fmt.name.split("-")[0].lower()
        if fmt.kernel and self.runs_quantizers and fmt.kernel not in self.runs_quantizers:
            return False
        return key in self.runs_formats


TRANSFORMERS_KERNEL_CPU = (("gptq", 1.0),)
"""transformers runs a GPTQ checkpoint's 4-bit layers through the ExLlama kernel (optimum's GPTQ integration, on
by default for 4 bits on CUDA): one extension call per layer, which costs the host what a 16-bit linear does. Its
8-bit layers (no ExLlama kernel) and AWQ's GEMM layers keep ``quantized_cpu_factor``. Measured in the Qwen2.5
speed rows on an A100 (transformers 4.46): at batch 1 GPTQ-Int4 decodes at 43.1 tokens/s on the 7B where
GPTQ-Int8 gives 31.6, AWQ 32.0 and BF16 38.8; 44.0 against AWQ's 31.9 on the 1.5B. The factor is not fitted: 1 is
a 16-bit layer's."""
ENGINE_VENDORS: dict[str, tuple[str, ...]] = {
    "transformers": ALL_VENDORS,
    "vllm": ("nvidia", "amd", "intel", "gaudi"),
    "sglang": ("nvidia", "amd", "intel", "apple"),
    "tensorrt-llm": ("nvidia",),
    "exllamav2": ("nvidia", "amd"),
    "mlc-llm": ("nvidia", "amd", "intel", "apple"),
    "llama.cpp": ("nvidia", "amd", "intel", "apple"),
    "ollama": ("nvidia", "amd", "intel", "apple"),
}
"""The hardware each engine runs on (Engine.vendors), as each project documents it:

- transformers: every one, through PyTorch's CUDA, ROCm, XPU (Intel GPUs) and MPS (Apple) builds, and Gaudi through
  optimum-habana (https://huggingface.co/docs/optimum/habana).
- vLLM: NVIDIA (CUDA), AMD (ROCm) and Intel GPUs (XPU) in its GPU installation guide
  (https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html), Gaudi through the vllm-gaudi HPU plugin
  (github.com/vllm-project/vllm-gaudi); on macOS it builds for the CPU only (installation/cpu, "Apple silicon"):
  no Apple GPU.
- SGLang: NVIDIA and AMD (docs.sglang.io install and platforms/amd_gpu), Intel GPUs (platforms/xpu: Arc B-series),
  Apple silicon through MLX (hardware-platforms/apple_metal, built from source); no Gaudi backend.
- TensorRT-LLM: NVIDIA only (its engines are CUDA/TensorRT builds per GPU architecture).
- exllamav2: NVIDIA (CUDA) and AMD (ROCm wheels, README "Installation"); its kernels are CUDA/HIP extensions.
- MLC LLM: NVIDIA (CUDA), AMD (ROCm), Intel and other GPUs (Vulkan), Apple (Metal)
  (https://llm.mlc.ai/docs/install/mlc_llm.html); no Gaudi target in TVM.
- llama.cpp: NVIDIA (CUDA), AMD (HIP), Intel (SYCL, Vulkan) and Apple (Metal) backends (README "Supported
  backends"); no Gaudi backend.
- Ollama: NVIDIA, AMD (ROCm), Apple (Metal) and, through its Vulkan backend, Intel GPUs (docs/gpu.mdx, "Vulkan GPU
  Support": "Linux Intel GPU Instructions"); no Gaudi."""

TRANSFORMERS_KV_FORMATS = ("fp16", "bf16", "fp32")
"""transformers' caches hold K and V in the model's dtype; its QuantizedCache (quanto/HQQ, int2/int4
with a residual window kept in 16 bits) has no --kv format here."""
VLLM_KV_FORMATS = ("fp16", "bf16", "fp32", "fp8")
"""vLLM's --kv-cache-dtype: auto (the model's dtype) or fp8 (e4m3/e5m2); no integer KV types."""
LLAMA_CPP_KV_FORMATS = ("fp16", "bf16", "fp32", "q8_0", "q4_0")
"""llama.cpp's --cache-type-k/-v: f32, f16, bf16, q8_0, q4_0 (and q4_1, q5_0, q5_1, iq4_nl, not
modelled here); no fp8. A quantized V cache needs flash attention (-fa)."""
LLAMA_CPP_KV_LADDER = ("q8_0", "q4_0")
"""The smaller KV-cache types the advisor offers for llama.cpp, largest first."""
EXLLAMAV2_KV_FORMATS = ("fp16", "fp8", "q8_0", "q4_0")
"""exllamav2's cache classes (exllamav2/cache.py): ExLlamaV2Cache (fp16), ExLlamaV2Cache_8bit (FP8 e5m2, by
truncation) and the quantized ExLlamaV2Cache_Q8/Q6/Q4, 8/6/4-bit values with fp16 scales per group. q8_0 and q4_0
stand for its Q8 and Q4 caches, whose bytes per value they match (8.5 and 4.5 bits with the scales); Q6 has no
--kv name."""
LLAMA_CPP_ATTENTION = ("flash", "eager")
"""llama.cpp's attention choice: flash attention on (-fa on) or off (-fa off, the plain softmax(QK^T)V graph, which
--attention eager names); Ollama's OLLAMA_FLASH_ATTENTION is the same switch. No SDPA."""
TRANSFORMERS_ATTENTION = ("flash", "sdpa", "eager")
"""transformers' attn_implementation: flash_attention_2, sdpa, eager."""

VLLM_QUANTIZED_BANDWIDTH = (("int4", 0.70), ("int8", 0.85))
"""vLLM's decode bandwidth on GPTQ/AWQ weights relative to bf16: its Marlin kernels (gptq_marlin, awq_marlin; vLLM
picks them for GPTQ and AWQ checkpoints on Ampere and newer) stream 4-bit weights at 0.70 of the share bf16 GEMVs
reach, 8-bit at 0.85 (unpacking, scales and zero points per group, and a tile shape built for batches, not one
token). Fitted on the fit set's 30 vLLM 0.6.3 decode rows (Qwen2.5 0.5B-72B on A100 80GB) by the least mean
|log(measured / predicted)|: 0.126 with no slowdown, 0.070 with it (int4 flat from 0.65 to 0.75)."""

LLAMA_CPP_PREFILL_TFLOPS_PER_WATT = (("AD10", 0.42), ("GA100", 0.40), ("GH100", 0.55))
"""The FLOP/s per watt of board power llama.cpp's prompt matmuls sustained per chip family (Ada AD10x, Ampere
GA100, Hopper GH100), fitted with its prefill_compute_efficiency (0.50) and pipeline_efficiency (0.45) on the fit
set's llama-bench pp rows (68, one GPU and several) by the least mean |log(measured / predicted)| (0.144; flat
within 0.003 for Ada 0.40-0.45, GA100 0.40-0.46, Hopper 0.50-0.60): 0.42 TFLOP/s/W caps a 300 W RTX 6000 Ada at
126 TFLOP/s, while a 450 W RTX 4090 stays at half its FP16-accumulate rate, as measured. Ampere's GA10x cards never
reach theirs (the fit is flat from 0.26 up): their FP16 rate binds first. A family not listed is bound by its
tensor rate alone."""

FULL_CUDA_GRAPH_STEP_S = 1.0e-3
"""The fixed host cost of a decode step in an engine that replays the whole step as a CUDA graph and overlaps its
scheduling with the GPU (SGLang, TensorRT-LLM, MLC): sampling, detokenization and the graph launch, not fitted.
vLLM 0.6.3's fitted 3.2 ms predates its own overlap of scheduling (v0.6.0 release notes: CPU overhead was what
limited it); an engine that overlaps it keeps about a third. From first principles, not from measurements: the
ranges of these engines say so."""

_LLAMA_CPP = Engine("llama.cpp", 457 * MIB, bandwidth_efficiency=0.95, hbm_bandwidth_factor=0.65,
                    unified_bandwidth_factor=0.80, cpu_s_per_layer=0.0,
                    step_overhead_s=0.0, layer_overhead_s=1.2e-4, kv_traffic_per_group=0.0,
                    prefill_compute_efficiency=0.50, preallocates_context=True, splits_layers=True,
                    prefill_ubatch=512, pipelines_prefill=True, pipeline_efficiency=0.45,
                    dequantizes_for_prefill=True, prefill_tflops_per_watt=LLAMA_CPP_PREFILL_TFLOPS_PER_WATT,
                    fp16_accumulate=True, kv_formats=LLAMA_CPP_KV_FORMATS, vendors=ENGINE_VENDORS["llama.cpp"],
                    attention_choices=LLAMA_CPP_ATTENTION)

SGLANG_MEM_FRACTION_STATIC = 0.88
"""SGLang's --mem-fraction-static: "the fraction of the memory used for static allocation (model weights and KV
cache memory pool)"; activations and CUDA graph buffers live outside it
(https://docs.sglang.io/advanced_features/server_arguments.html). Unset, the server picks it from the GPU's memory
(python/sglang/srt/server_args.py), 0.88 on the large cards SGLang is usually served from."""
SGLANG_CHUNKED_PREFILL = 8192
"""SGLang's --chunked-prefill-size on 80 GB-class GPUs (server_args.py picks it from the GPU's memory, as above):
the most prompt tokens one forward runs."""
TRTLLM_KV_FREE_FRACTION = 0.9
"""TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction default: the KV cache takes 90% of the memory free after
the engine is loaded (https://nvidia.github.io/TensorRT-LLM/reference/memory.html, "KV cache")."""
TRTLLM_MAX_NUM_TOKENS = 8192
"""TensorRT-LLM's max_num_tokens default (BuildConfig, https://nvidia.github.io/TensorRT-LLM/performance/
performance-tuning-guide/tuning-max-batch-size-and-max-num-tokens.html): it sizes the activation buffers."""
EXLLAMAV2_MAX_INPUT_LEN = 2048
"""ExLlamaV2Config.max_input_len default: the longest chunk a forward pass takes, which sizes its scratch buffers
(https://github.com/turboderp-org/exllamav2/blob/master/exllamav2/config.py). Its cache, ExLlamaV2Cache, is
allocated for max_seq_len x batch at start (exllamav2/cache.py)."""
MLC_GPU_MEMORY_UTILIZATION = 0.85
"""MLC LLM's EngineConfig gpu_memory_utilization default: weights, KV cache and buffers take 85% of the GPU's
memory (https://llm.mlc.ai/docs/deploy/rest.html, "--overrides gpu_memory_utilization")."""
MLC_PREFILL_CHUNK = 2048
"""MLC LLM's prefill_chunk_size for server use (https://llm.mlc.ai/docs/deploy/rest.html): tokens per prefill
forward."""

OLLAMA_DEFAULT_QUANT = "q4_k_m"
"""The weight format of Ollama library models' default tags (https://ollama.com/library/llama3.1 tags: the
"latest" tag is Q4_K_M)."""
OLLAMA_CONTEXT_BY_VRAM = ((24, 4096), (48, 32768))
"""Ollama's default context length by GPU memory: under 24 GiB 4k, 24-48 GiB 32k, 48 GiB and more 256k
(https://docs.ollama.com/context-length; github.com/ollama/ollama docs/context-length.mdx). Before 2025 it was a
fixed num_ctx of 2048, later 4096: --ctx gives any other."""
OLLAMA_CONTEXT_LARGE = 262144


def ollama_context(vram_gib: float) -> int:
    """Ollama's default context length on a GPU of ``vram_gib`` GiB (OLLAMA_CONTEXT_BY_VRAM)."""
    for below, tokens in OLLAMA_CONTEXT_BY_VRAM:
        if vram_gib < below:
            return tokens
    return OLLAMA_CONTEXT_LARGE


ENGINES: dict[str, Engine] = {
    "transformers": Engine("transformers", 500 * MIB, bandwidth_efficiency=0.85, hbm_bandwidth_factor=1.0,
                           cpu_s_per_layer=8.5e-4, step_overhead_s=0.0, layer_overhead_s=0.0,
                           kv_traffic_per_group=6.5, prefill_compute_efficiency=0.45, quantized_cpu_factor=1.35,
                           kernel_cpu_factor=TRANSFORMERS_KERNEL_CPU, splits_layers=True,
                           kv_formats=TRANSFORMERS_KV_FORMATS, vendors=ENGINE_VENDORS["transformers"],
                           attention_choices=TRANSFORMERS_ATTENTION, model_kinds=()),
    "vllm": Engine("vllm", 1024 * MIB, bandwidth_efficiency=0.80, hbm_bandwidth_factor=1.0, cpu_s_per_layer=0.0,
                   step_overhead_s=3.2e-3, layer_overhead_s=0.0, kv_traffic_per_group=0.0,
                   prefill_compute_efficiency=0.60, quantized_bandwidth_factor=VLLM_QUANTIZED_BANDWIDTH,
                   kv_formats=VLLM_KV_FORMATS, label="vLLM", vendors=ENGINE_VENDORS["vllm"]),
    "llama.cpp": _LLAMA_CPP,
    # SGLang: paged KV (RadixAttention's token pool), CUDA graphs for decode, FlashInfer/FlashAttention kernels and
    # the same Marlin kernels as vLLM for GPTQ/AWQ: vLLM's bandwidth, prefill and quantized factors, with the
    # overlapped scheduler's smaller step cost (https://lmsys.org/blog/2024-12-04-sglang-v0-4/, "zero-overhead
    # batch scheduler"). CUDA context plus captured graphs as vLLM's.
    "sglang": Engine("sglang", 1024 * MIB, bandwidth_efficiency=0.80, hbm_bandwidth_factor=1.0, cpu_s_per_layer=0.0,
                     step_overhead_s=FULL_CUDA_GRAPH_STEP_S, layer_overhead_s=0.0, kv_traffic_per_group=0.0,
                     prefill_compute_efficiency=0.60, quantized_bandwidth_factor=VLLM_QUANTIZED_BANDWIDTH,
                     kv_formats=VLLM_KV_FORMATS, label="SGLang",
                     runs_formats=("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nf4"),
                     memory_share=SGLANG_MEM_FRACTION_STATIC, share_holds_weights_and_kv=True,
                     activation_tokens=SGLANG_CHUNKED_PREFILL, vendors=ENGINE_VENDORS["sglang"],
                     documented_only=True),
    # TensorRT-LLM: paged KV, fused attention and GEMM plugins compiled per GPU, the C++ executor with CUDA graphs:
    # a higher share of the bandwidth than vLLM's Python-driven kernels and the graph engines' small step cost.
    # Its W4A16 (AWQ/GPTQ) and W8A16 kernels are GEMV-shaped for batch 1 and pay less for unpacking than Marlin.
    "tensorrt-llm": Engine("tensorrt-llm", 1024 * MIB, bandwidth_efficiency=0.85, hbm_bandwidth_factor=1.0,
                           cpu_s_per_layer=0.0, step_overhead_s=FULL_CUDA_GRAPH_STEP_S, layer_overhead_s=0.0,
                           kv_traffic_per_group=0.0, prefill_compute_efficiency=0.65,
                           quantized_bandwidth_factor=(("int4", 0.85), ("int8", 0.92)),
                           kv_formats=("fp16", "bf16", "fp8"), label="TensorRT-LLM",
                           runs_formats=("fp32", "fp16", "bf16", "fp8", "int8", "int4"),
                           kv_free_fraction=TRTLLM_KV_FREE_FRACTION, activation_tokens=TRTLLM_MAX_NUM_TOKENS,
                           vendors=ENGINE_VENDORS["tensorrt-llm"], documented_only=True),
    # exllamav2: its own CUDA kernels for EXL2 and GPTQ (a matmul per layer that dequantizes in registers), a
    # Python loop per step without CUDA graphs: a small host cost per layer that a large model hides.
    "exllamav2": Engine("exllamav2", 500 * MIB, bandwidth_efficiency=0.80, hbm_bandwidth_factor=1.0,
                        cpu_s_per_layer=1.0e-4, step_overhead_s=1.0e-3, layer_overhead_s=0.0,
                        kv_traffic_per_group=0.0, prefill_compute_efficiency=0.50, kv_formats=EXLLAMAV2_KV_FORMATS,
                        splits_layers=True, label="ExLlamaV2", runs_formats=("fp16", "bf16", "int4", "exl2"),
                        runs_quantizers=("gptq",), activation_tokens=EXLLAMAV2_MAX_INPUT_LEN,
                        vendors=ENGINE_VENDORS["exllamav2"], model_kinds=("decoder",), documented_only=True),
    # MLC LLM: the model compiled by TVM into fused kernels, a paged KV cache of its own, no PyTorch (a bare CUDA
    # context and TVM's workspace). Its q4f16_1 weights: 4 bits with an fp16 scale per 32.
    "mlc-llm": Engine("mlc-llm", 512 * MIB, bandwidth_efficiency=0.80, hbm_bandwidth_factor=1.0, cpu_s_per_layer=0.0,
                      step_overhead_s=FULL_CUDA_GRAPH_STEP_S, layer_overhead_s=0.0, kv_traffic_per_group=0.0,
                      prefill_compute_efficiency=0.50, kv_formats=("fp16",), label="MLC LLM",
                      runs_formats=("fp32", "fp16", "int4", "q4f16_1", "fp8"), memory_share=MLC_GPU_MEMORY_UTILIZATION,
                      activation_tokens=MLC_PREFILL_CHUNK, default_quant="q4f16_1", vendors=ENGINE_VENDORS["mlc-llm"],
                      model_kinds=("decoder",), documented_only=True),
    # Ollama runs llama.cpp (its ggml backend): llama.cpp's constants and memory rules, its own defaults. Flash
    # attention is off unless OLLAMA_FLASH_ATTENTION=1 (https://docs.ollama.com/faq, "How can I enable Flash
    # Attention?"); GGUF weights only.
    "ollama": replace(_LLAMA_CPP, name="ollama", label="Ollama", runs_formats=("gguf",),
                      default_quant=OLLAMA_DEFAULT_QUANT, flash_attention_default=False, like="llama.cpp",
                      vendors=ENGINE_VENDORS["ollama"], documented_only=True),
}
_ENGINE_ALIASES = {"hf": "transformers", "huggingface": "transformers", "llamacpp": "llama.cpp",
                   "llama-cpp": "llama.cpp", "gguf": "llama.cpp", "trtllm": "tensorrt-llm", "trt-llm": "tensorrt-llm",
                   "tensorrt_llm": "tensorrt-llm", "exllama": "exllamav2", "exl2": "exllamav2", "mlc": "mlc-llm",
                   "mlc_llm": "mlc-llm"}

GGUF_BANDWIDTH_FACTOR: dict[str, float] = {
    "F16": 1.0, "Q8_0": 0.93, "Q6_K": 0.85, "Q5_K_M": 0.80, "Q5_K_S": 0.80, "Q4_K_M": 0.76,
    "Q4_K_S": 0.76, "Q3_K_L": 0.65, "Q3_K_S": 0.62, "Q2_K": 0.55,
}
"""Dequantization cost: llama.cpp's decode bandwidth per quant type relative to F16, as its tools/quantize/README.md
table for Llama-3.1-8B gives it (size x t/s: 436 GiB/s at F16, 405 at Q8_0, 329 at Q4_K_M, 236 at Q2_K). Those
whole-token figures include the fixed launch cost per layer, which weighs more the smaller the file; with that cost
counted apart (llama.cpp's layer_overhead_s), its kernels pay only GGUF_DROP_SHARE of each drop."""

GGUF_DROP_SHARE = 0.15
"""The share of GGUF_BANDWIDTH_FACTOR's drop llama.cpp's kernels pay: the least mean |log(measured / predicted)|
over the fit set's 74 llama-bench tg rows (RTX 30/40, RTX A6000/Ada, A40, A100, H100 and Apple M1 Max/M2 Ultra;
F16 and Q4_K_M, 8B and 70B), fitted with layer_overhead_s (120 us), bandwidth_efficiency (0.95) and
hbm_bandwidth_factor (0.65): 0.167 with the whole drop and 40 us per layer, 0.087 now; flat from 0 to 0.3. The
four Apple fit rows alone wanted more of the drop on Metal (1.5 times it, at 0.85 of the bandwidth share), a
second constant on four rows that did worse on the check set's M3 Max rows and was not kept; Apple takes the same
share, with its own unified_bandwidth_factor."""

ELEMENTWISE_BANDWIDTH_EFFICIENCY = 0.8
"""Share of the datasheet bandwidth streaming kernels reach (norms, softmax, casts, dequantization): a prefill's
traffic besides its matmuls, and a training step's elementwise work."""
TRAINING_BANDWIDTH_EFFICIENCY = ELEMENTWISE_BANDWIDTH_EFFICIENCY
"""Share of the datasheet bandwidth elementwise training kernels reach."""
ALLOCATOR_FRAGMENTATION = 0.05
"""Share added for the caching allocator's rounding and fragmentation (PyTorch rounds large
blocks to 2 MiB; ROCm-Megatron models fragmentation as 7%). PyTorch engines only: llama.cpp
allocates its weights, KV cache and compute buffer as fixed ggml backend buffers, sized up front."""

VRAM_MEDIAN_ERROR = 0.015
"""Median error of the memory estimate against measured peaks (docs/calibration.md: 1.5% over the
Qwen2.5 rows). A fit with less room than this share of its total is within the estimate's error."""
SPEED_MEDIAN_ERROR: dict[str, float] = {"transformers": 0.06, "vllm": 0.11, "llama.cpp": 0.08, "training": 0.07}
"""Median error of a speed prediction, per engine (decode tok/s on one GPU) and for training (samples/s), from
`python benchmarks/estimate_accuracy.py` (docs/calibration.md). Each prediction carries its own 80% range
(estimate/ranges.py); `recommend` still calls two setups a near-tie when they are within +-this share, a
comparison between setups on the same engine, whose shared bias cancels."""
UNCALIBRATED_SPEED_ERROR = 0.20
"""The near-tie share for an engine with no fitted rows (SGLang, TensorRT-LLM, exllamav2, MLC LLM): wider than
any calibrated engine's median error, since its constants come from documentation alone."""


def engine(name: str) -> Engine:
    key = _ENGINE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key in ENGINES:
        return ENGINES[key]
    raise unknown_choice("engine", name, [*ENGINES, *_ENGINE_ALIASES], hint="engines: " + ", ".join(ENGINES))
