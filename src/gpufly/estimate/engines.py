"""Named constants per inference engine and for training, each with where it comes from.

The efficiency factors (``*_efficiency``, ``*_overhead_s``) are calibrated on public measurements
by benchmarks/estimate_accuracy.py (docs/calibration.md lists the rows); the memory constants come
from the engines' own documentation and issue threads, as cited.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufly.errors import unknown_choice

MIB = 2**20
GIB = 2**30


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
    """Fixed GPU cost per layer and step (small kernels: norms, RoPE, residuals)."""
    kv_traffic_per_group: float
    """KV-cache bytes moved per byte stored, per query head sharing a KV head: eager attention
    repeats K and V for every query head of a group (transformers' repeat_kv) and its cache grows
    by concatenation; paged and flash kernels read each byte once (0)."""
    prefill_compute_efficiency: float
    """Share of the dense tensor rate a long prefill reaches."""
    quantized_cpu_factor: float = 1.0
    """Host-cost multiplier for int8/int4 layers, whose kernels launch more work per matrix."""
    quantized_prefill_factor: float = 1.0
    """Prefill slowdown of quantized weights (dequantization before the matmul)."""
    preallocates_context: bool = False
    """llama.cpp allocates the KV cache for all of n_ctx up front."""
    splits_layers: bool = False
    """Across GPUs the engine splits layers (a pipeline for one sequence: no added bandwidth)
    rather than tensors."""
    pipelined_prefill_ubatch: int = 0
    """With its layers split, the engine pipelines a long prompt's micro-batches of this many tokens across the
    GPUs (llama.cpp since PR 6017, n_ubatch 512); 0: each GPU waits for the one before."""
    pipeline_efficiency: float = 1.0
    """Share of the ideal pipeline speed-up a layer-split prefill reaches (stage imbalance, copies between GPUs,
    the synchronisation per micro-batch). llama.cpp: 0.55, the value in 0..1 (steps of 0.05) with the least mean
    |log(measured / predicted)| over the fit set's 46 multi-GPU llama-bench pp rows (0.455 serial, 0.325 at 0.55;
    flat from 0.35 to 0.6). On the check set's 15 (the PR 6017 8x A100 PCIe rows among them): 0.353 serial,
    0.307 at 0.55."""
    fp16_accumulate: bool = False
    """Runs FP16 matmuls with FP16 accumulation, which GeForce cards execute at twice the rate
    of FP32 accumulation (Ampere GA102 and Ada whitepapers)."""
    kv_formats: tuple[str, ...] = ("fp16", "bf16", "fp32")
    """The --kv formats the engine can hold its KV cache in (formats.kv_key's spelling)."""
    label: str = ""
    """The engine's name as its project writes it, for notes."""

    @property
    def display(self) -> str:
        return self.label or self.name


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

ENGINES: dict[str, Engine] = {
    "transformers": Engine("transformers", 500 * MIB, bandwidth_efficiency=0.85, hbm_bandwidth_factor=1.0,
                           cpu_s_per_layer=8.5e-4, step_overhead_s=0.0, layer_overhead_s=0.0,
                           kv_traffic_per_group=3.6, prefill_compute_efficiency=0.45, quantized_cpu_factor=1.35,
                           splits_layers=True, kv_formats=TRANSFORMERS_KV_FORMATS),
    "vllm": Engine("vllm", 1024 * MIB, bandwidth_efficiency=0.80, hbm_bandwidth_factor=1.0, cpu_s_per_layer=0.0,
                   step_overhead_s=3.2e-3, layer_overhead_s=0.0, kv_traffic_per_group=0.0,
                   prefill_compute_efficiency=0.60, kv_formats=VLLM_KV_FORMATS, label="vLLM"),
    "llama.cpp": Engine("llama.cpp", 457 * MIB, bandwidth_efficiency=0.80, hbm_bandwidth_factor=0.62,
                        cpu_s_per_layer=0.0, step_overhead_s=0.0, layer_overhead_s=4.0e-5, kv_traffic_per_group=0.0,
                        prefill_compute_efficiency=0.42, quantized_prefill_factor=0.6, preallocates_context=True,
                        splits_layers=True, pipelined_prefill_ubatch=512, pipeline_efficiency=0.55,
                        fp16_accumulate=True, kv_formats=LLAMA_CPP_KV_FORMATS),
}
_ENGINE_ALIASES = {"hf": "transformers", "huggingface": "transformers", "llamacpp": "llama.cpp",
                   "llama-cpp": "llama.cpp", "gguf": "llama.cpp", "ollama": "llama.cpp"}

GGUF_BANDWIDTH_FACTOR: dict[str, float] = {
    "F16": 1.0, "Q8_0": 0.93, "Q6_K": 0.85, "Q5_K_M": 0.80, "Q5_K_S": 0.80, "Q4_K_M": 0.76,
    "Q4_K_S": 0.76, "Q3_K_L": 0.65, "Q3_K_S": 0.62, "Q2_K": 0.55,
}
"""Dequantization cost: llama.cpp's effective decode bandwidth falls with the quant type
(its tools/quantize/README.md table for Llama-3.1-8B: size x t/s falls from 436 GiB/s at F16 and
405 at Q8_0 to 329 at Q4_K_M and 236 at Q2_K). Factors relative to F16."""

TRAINING_MFU = 0.70
"""Share of the dense tensor rate a training step's matmuls reach (the elementwise traffic below is counted apart,
so this is the GEMMs' own share: cuBLAS reaches 0.7-0.85 of peak on large GEMMs, estimate/calibrate.py). Fitted
with TRAINING_ATTENTION_COST on the fit set's training rows (Lambda ResNet/BERT and llm-foundry MPT, 107 rows) by
the least mean |log(measured / predicted)| over MFU 0.55-0.70 (kept at most 0.70, the low end of cuBLAS's share)
and attention cost 1.5-2.5: 0.264 before (MFU 0.50, cost 1), 0.193 after; on the check set 0.225 -> 0.159."""
TRAINING_ATTENTION_COST = 2.25
"""Time of one attention FLOP in training, in matmul FLOPs: flash attention recomputes its forward in the backward
(four passes where the matmuls take three) and its kernels reach a lower share of peak than GEMMs (FlashAttention-2
reports 50-73% of peak on A100). Fitted with TRAINING_MFU."""
TRAINING_TRAFFIC_PER_ACTIVATION_BYTE = 12.0
"""Bytes of memory traffic per byte of saved activations in a training step: each is written in
the forward, read in the backward, and elementwise kernels read and write around it. Fitted."""
TRAINING_BANDWIDTH_EFFICIENCY = 0.8
"""Share of the datasheet bandwidth elementwise training kernels reach."""
ALLOCATOR_FRAGMENTATION = 0.05
"""Share added for the caching allocator's rounding and fragmentation (PyTorch rounds large
blocks to 2 MiB; ROCm-Megatron models fragmentation as 7%). PyTorch engines only: llama.cpp
allocates its weights, KV cache and compute buffer as fixed ggml backend buffers, sized up front."""

VRAM_MEDIAN_ERROR = 0.015
"""Median error of the memory estimate against measured peaks (docs/calibration.md: 1.5% over the
Qwen2.5 rows). A fit with less room than this share of its total is within the estimate's error."""
SPEED_MEDIAN_ERROR: dict[str, float] = {"transformers": 0.06, "vllm": 0.11, "llama.cpp": 0.08, "training": 0.10}
"""Median error of a speed prediction, per engine (decode tok/s on one GPU) and for training (samples/s), from
`python benchmarks/estimate_accuracy.py` (docs/calibration.md). Each prediction carries its own 80% range
(estimate/ranges.py); `recommend` still calls two setups a near-tie when they are within +-this share, a
comparison between setups on the same engine, whose shared bias cancels."""


def engine(name: str) -> Engine:
    key = _ENGINE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key in ENGINES:
        return ENGINES[key]
    raise unknown_choice("engine", name, [*ENGINES, *_ENGINE_ALIASES], hint="engines: " + ", ".join(ENGINES))
