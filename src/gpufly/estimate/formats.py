"""Bits per weight of each weight format, and bytes per element of each KV-cache format.

Sources: dtype sizes; the bits per weight of llama.cpp's file types (K-quant and i-quant mixes) from the
table in llama.cpp's tools/quantize/README.md for Llama-3.1-8B (the mixes keep some tensors at higher
precision, so a mix is more than its base type); the other GGUF types from ggml's block layouts; NF4
with double quantization from the QLoRA paper (Dettmers et al. 2023, section 3: 4 + 0.127 bits);
GPTQ/AWQ int4 groups carry an fp16 scale and a 4-bit zero point per group.
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
    """"gguf" formats run in llama.cpp-style engines, "exl2" in exllamav2, "mlc" in MLC LLM; "torch" ones in
    PyTorch-based engines and the serving engines that load Hugging Face checkpoints."""
    kernel: str = ""
    """The checkpoint's quantizer where a PyTorch engine runs it through its own kernels ("gptq", "awq"): they
    cost the host differently per layer (``Engine.kernel_cpu_factor``). Empty: not known, or not a quantizer."""

    @property
    def label(self) -> str:
        """The name as the user reads it: "AWQ int4" where the quantizer is known, else the name."""
        return f"{self.kernel.upper()} {self.name}" if self.kernel else self.name


# llama.cpp tools/quantize/README.md, Llama-3.1-8B, "bits/weight" row (b4000-era table): the file types
# llama-quantize writes, each a mix that keeps some tensors (output, attn_v, ffn_down) at higher types.
_GGUF_MIX_BPW = {
    "iq1_s": 2.0042, "iq1_m": 2.1460, "iq2_xxs": 2.3824, "iq2_xs": 2.5882, "iq2_s": 2.7403, "iq2_m": 2.9294,
    "iq3_xxs": 3.2548, "iq3_xs": 3.4977, "iq3_s": 3.6606, "iq3_m": 3.7628, "iq4_xs": 4.4597, "iq4_nl": 4.6818,
    "q2_k_s": 2.9697, "q2_k": 3.1593, "q3_k_s": 3.6429, "q3_k_m": 3.9960, "q3_k_l": 4.2979, "q4_k_s": 4.6672,
    "q4_k_m": 4.8944, "q5_k_s": 5.5704, "q5_k_m": 5.7036, "q6_k": 6.5633, "q8_0": 8.5008,
}
# ggml's block layouts (ggml-common.h; gguf-py's GGML_QUANT_SIZES): 8 x bytes per block / weights per
# block, for the types the table above has no file-type figure for: the legacy types (one type for all
# large tensors), the K types as tensor types (`--pure`), and the newer ternary and FP4 types. Q2_K, Q6_K
# and Q8_0 name file types as well, and keep the table's mix figure (2.625, 6.5625, 8.5 as blocks).
_GGML_BLOCK_BPW = {
    "q4_0": 8 * 18 / 32, "q4_1": 8 * 20 / 32, "q5_0": 8 * 22 / 32, "q5_1": 8 * 24 / 32,
    "q3_k": 8 * 110 / 256, "q4_k": 8 * 144 / 256, "q5_k": 8 * 176 / 256,
    "tq1_0": 8 * 54 / 256, "tq2_0": 8 * 66 / 256, "mxfp4": 8 * 17 / 32, "nvfp4": 8 * 36 / 64, "q1_0": 8 * 18 / 128,
}

WEIGHT_FORMATS: dict[str, WeightFormat] = {
    "fp32": WeightFormat("fp32", 32, "fp32"),
    "fp16": WeightFormat("fp16", 16, "fp16"),
    "bf16": WeightFormat("bf16", 16, "bf16"),
    "fp8": WeightFormat("fp8", 8, "fp8", keeps_embeddings_16bit=True),
    "int8": WeightFormat("int8", 8, "fp16", keeps_embeddings_16bit=True),
    "int4": WeightFormat("int4", 4 + 20 / 128, "fp16", keeps_embeddings_16bit=True),
    # The same 4-bit groups, from a named quantizer: transformers runs GPTQ's 4-bit layers through the ExLlama
    # kernel and AWQ's through AutoAWQ's GEMM, whose host costs differ (Engine.kernel_cpu_factor).
    "gptq-int4": WeightFormat("int4", 4 + 20 / 128, "fp16", keeps_embeddings_16bit=True, kernel="gptq"),
    "awq": WeightFormat("int4", 4 + 20 / 128, "fp16", keeps_embeddings_16bit=True, kernel="awq"),
    "nf4": WeightFormat("nf4", 4.127, "bf16", keeps_embeddings_16bit=True),
    **{name: WeightFormat(name.upper(), bpw, "fp16", engine_family="gguf")
       for name, bpw in {**_GGML_BLOCK_BPW, **_GGUF_MIX_BPW}.items()},
    "f16": WeightFormat("F16", 16, "fp16", engine_family="gguf"),
    # exllamav2's EXL2: a mix of 2-8 bit layers at an average bits per weight chosen at conversion (scales
    # included); its converter keeps the embeddings in fp16. `exl2` alone is 4.0, `exl2-4.65` any other.
    "exl2": WeightFormat("EXL2-4.0", 4.0, "fp16", keeps_embeddings_16bit=True, engine_family="exl2"),
    # MLC LLM's q4f16_1: 4-bit weights with an fp16 scale per group of 32 (mlc_llm/quantization), embeddings too.
    "q4f16_1": WeightFormat("q4f16_1", 4 + 16 / 32, "fp16", engine_family="mlc"),
}

GGUF_LADDER = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k")
"""The llama.cpp file types the advisor offers as smaller weights, largest first: the common
llama-quantize choices, one per bit width."""

_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "gptq": "gptq-int4", "awq-int4": "awq", "gptq-int8": "int8", "bnb4": "nf4",
            "4bit": "nf4", "8bit": "int8", "llm.int8": "int8", "f32": "fp32", "mxfp4_moe": "mxfp4"}
_SAME_BYTES = {"f16": "fp16", "gptq-int4": "int4", "awq": "int4"}
"""Formats whose weights take the same bytes under another name: GGUF's F16 is fp16, GPTQ's and AWQ's 4-bit
groups are int4's."""

KV_BYTES: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "q8_0": 34 / 32, "q8": 34 / 32,
                              "q4_0": 18 / 32, "q4": 18 / 32, "fp32": 4.0}
"""Bytes per KV element: ggml's q8_0 block is 34 bytes per 32 values, q4_0 18 bytes per 32."""


def _key(name: str) -> str:
    key = name.strip().lower()
    if key.startswith(("q", "iq", "tq")):
        key = key.replace("-", "_")
    return _ALIASES.get(key, key)


def same_format(first: str, second: str) -> bool:
    """Whether two format names store weights alike: 'Q8_0' and 'q8_0', 'F32' and 'fp32', 'F16' and 'fp16'.

    >>> same_format("F32", "fp32"), same_format("Q4_K", "q4_k_m")
    (True, False)
    """
    one, other = _key(first), _key(second)
    return _SAME_BYTES.get(one, one) == _SAME_BYTES.get(other, other)


def weight_format(name: str) -> WeightFormat:
    """Parse a --quant value: fp16, bf16, fp8, int8, int4 (or int4-g64, awq, gptq), nf4, q4_k_m, q4_0..."""
    key = _key(name)
    if key.startswith("int4_g") or key.startswith("int4-g"):
        group = key.split("g", 1)[1]
        if not group.isdigit() or int(group) <= 0:
            raise GpuflyError(f"bad group size in '{name}'", hint="e.g. int4-g128 or int4-g64")
        return WeightFormat(f"int4-g{group}", 4 + 20 / int(group), "fp16", keeps_embeddings_16bit=True)
    if key.startswith("exl2-") or key.startswith("exl2_"):
        bits = key[5:]
        try:
            value = float(bits)
        except ValueError:
            value = 0.0
        if not 2.0 <= value <= 8.0:
            raise GpuflyError(f"bad bits per weight in '{name}'", hint="e.g. exl2-4.65 (EXL2 takes 2 to 8)")
        return WeightFormat(f"EXL2-{value:g}", value, "fp16", keeps_embeddings_16bit=True, engine_family="exl2")
    if key in WEIGHT_FORMATS:
        return WEIGHT_FORMATS[key]
    raise unknown_choice("quantization", name, [*WEIGHT_FORMATS, *_ALIASES],
                         hint="formats: " + ", ".join(sorted(WEIGHT_FORMATS)) + ", int4-gN, exl2-N")


_KV_ALIASES = {"q8": "q8_0", "q4": "q4_0"}


def kv_key(name: str) -> str:
    """A --kv value in one spelling ('Q8' -> 'q8_0'), so engines list each format once."""
    key = name.strip().lower()
    return _KV_ALIASES.get(key, key)


def kv_bytes(name: str) -> float:
    key = name.strip().lower()
    if key not in KV_BYTES:
        raise unknown_choice("KV-cache format", name, KV_BYTES, hint="KV formats: fp16, bf16, fp8, q8_0, q4_0")
    return KV_BYTES[key]
