"""Named constants per inference engine and for training, each with where it comes from.

The efficiency factors (``*_efficiency``, ``*_overhead_s``) are calibrated on public measurements
by benchmarks/estimate_accuracy.py (docs/calibration.md lists the rows); the memory constants come
from the engines' own documentation and issue threads, as cited.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from gpufly.errors import GpuflyError

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class Engine:
    """An inference runtime as the estimators model it."""

    name: str
    context_bytes: int
    """CUDA context plus the runtime's fixed buffers. PyTorch: 287 MB with lazy module loading,
    667 MB eager (pytorch#86509), ~426 MiB seen on torch 2.10 + CUDA 13 (unsloth-zoo#1053);
    llama.cpp/ollama reserve 457 MiB per CUDA GPU (ollama ml/device.go MinimumMemory)."""
    decode_bandwidth_efficiency: float
    """Share of the datasheet memory bandwidth one decode step reaches (MBU)."""
    decode_overhead_s_per_layer: float
    """Fixed cost per layer and decode step (kernel launches, sampling, Python): why small models
    in eager engines fall short of the bandwidth bound."""
    prefill_compute_efficiency: float
    """Share of the datasheet dense tensor rate a long prefill reaches."""
    preallocates_context: bool = False
    """llama.cpp allocates the KV cache for all of n_ctx up front."""


ENGINES: dict[str, Engine] = {
    "transformers": Engine("transformers", 500 * MIB, 0.55, 3.0e-4, 0.45),
    "vllm": Engine("vllm", 1024 * MIB, 0.80, 4.0e-5, 0.60),
    "llama.cpp": Engine("llama.cpp", 457 * MIB, 0.75, 4.0e-5, 0.40, preallocates_context=True),
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

TRAINING_MFU = 0.40
"""Model FLOPs utilization of a well-fed mixed-precision training step (PaLM reports 46%,
Megatron 54% at 530B scale; single-GPU fine-tunes reach less)."""
ALLOCATOR_FRAGMENTATION = 0.05
"""Share added for the caching allocator's rounding and fragmentation (PyTorch rounds large
blocks to 2 MiB; ROCm-Megatron models fragmentation as 7%)."""


def engine(name: str) -> Engine:
    key = _ENGINE_ALIASES.get(name.strip().lower(), name.strip().lower())
    if key in ENGINES:
        return ENGINES[key]
    close = difflib.get_close_matches(key, [*ENGINES, *_ENGINE_ALIASES], n=3, cutoff=0.5)
    did_you_mean = f"; did you mean {', '.join(close)}?" if close else ""
    raise GpuflyError(f"unknown engine '{name}'{did_you_mean}", hint="engines: " + ", ".join(ENGINES))
