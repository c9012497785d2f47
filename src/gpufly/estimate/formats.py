"""Bits per weight of each weight format, and bytes per element of each KV-cache format.

Sources: dtype sizes; the bits per weight of llama.cpp's K-quant mixes from the table in llama.cpp's
tools/quantize/README.md for Llama-3.1-8B (the mixes keep some tensors at higher precision, so a mix
is more than its base type); NF4 with double quantization from the QLoRA paper (Dettmers et al.
2023, section 3: 4 + 0.127 bits); GPTQ/AWQ int4 groups carry an fp16 scale and a 4-bit zero point
per group.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufly.errors import GpuflyError, unknown_choice


@dataclass(frozen=True)
class WeightFormat:
    """How weights are stored. ``keeps_embeddings_16bit``: embeddings and the LM head stay bf16
    (bitsandbytes, GPTQ/AWQ); GGUF mixes quantize them too (their bpw already includes it)."""

    name: str
    bits_per_weight: float
    compute_dtype: str
    """The precision the matmuls run in: picks the tensor rate for compute-bound estimates."""
    keeps_embeddings_16bit: bool = False
    engine_family: str = "torch"
    """"gguf" formats run in llama.cpp-style engines; the others in PyTorch-based ones."""


# llama.cpp tools/quantize/README.md, Llama-3.1-8B column "bpw" (b4000-era table).
_GGUF_MIX_BPW = {
    "q2_k": 3.1593, "q3_k_s": 3.6429, "q3_k_l": 4.2979, "q4_k_s": 4.6672, "q4_k_m": 4.8944,
    "q5_k_s": 5.5704, "q5_k_m": 5.7036, "q6_k": 6.5633, "q8_0": 8.5008,
}

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "fp32": WeightFormat("fp32", 32, "fp32"),
    "fp16": WeightFormat("fp16", 16, "fp16"),
    "bf16": WeightFormat("bf16", 16, "bf16"),
    "fp8": WeightFormat("fp8", 8, "fp8", keeps_embeddings_16bit=True),
    "int8": WeightFormat("int8", 8, "fp16", keeps_embeddings_16bit=True),
    "int4": WeightFormat("int4", 4 + 20 / 128, "fp16", keeps_embeddings_16bit=True),
    "nf4": WeightFormat("nf4", 4.127, "bf16", keeps_embeddings_16bit=True),
    **{name: WeightFormat(name.upper(), bpw, "fp16", engine_family="gguf") for name, bpw in _GGUF_MIX_BPW.items()},
    "f16": WeightFormat("F16", 16, "fp16", engine_family="gguf"),
}

_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "awq": "int4",
            "gptq": "int4", "gptq-int4": "int4", "awq-int4": "int4", "gptq-int8": "int8", "bnb4": "nf4",
            "4bit": "nf4", "8bit": "int8", "llm.int8": "int8", "f32": "fp32", "q4_k": "q4_k_m",
            "q5_k": "q5_k_m"}

KV_BYTES: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "q8_0": 34 / 32, "q8": 34 / 32,
                              "q4_0": 18 / 32, "q4": 18 / 32, "fp32": 4.0}
"""Bytes per KV element: ggml's q8_0 block is 34 bytes per 32 values, q4_0 18 bytes per 32."""


def weight_format(name: str) -> WeightFormat:
    """Parse a --quant value: fp16, bf16, fp8, int8, int4 (or int4-g64, awq, gptq), nf4, q4_k_m..."""
    key = name.strip().lower().replace("-", "_") if name.lower().startswith("q") else name.strip().lower()
    key = _ALIASES.get(key, key)
    if key.startswith("int4_g") or key.startswith("int4-g"):
        group = key.split("g", 1)[1]
        if not group.isdigit() or int(group) <= 0:
            raise GpuflyError(f"bad group size in '{name}'", hint="e.g. int4-g128 or int4-g64")
        return WeightFormat(f"int4-g{group}", 4 + 20 / int(group), "fp16", keeps_embeddings_16bit=True)
    if key in WEIGHT_FORMATS:
        return WEIGHT_FORMATS[key]
    raise unknown_choice("quantization", name, [*WEIGHT_FORMATS, *_ALIASES],
                         hint="formats: " + ", ".join(sorted(WEIGHT_FORMATS)) + ", int4-gN")


def kv_bytes(name: str) -> float:
    key = name.strip().lower()
    if key not in KV_BYTES:
        raise unknown_choice("KV-cache format", name, KV_BYTES, hint="KV formats: fp16, bf16, fp8, q8_0, q4_0")
    return KV_BYTES[key]
