"""Memory estimates against figures that are known exactly: the KV cache, the ZeRO paper, formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.estimate.engines import GIB
from gpufly.estimate.formats import weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import inference_memory, kv_cache_bytes, training_memory, weight_bytes
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.spec import ModelSpec

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return spec_from_config(load_config_file(CONFIGS / "llama-3.1-8b"), "Llama 3.1 8B", "test")


def test_llama_kv_cache_at_8k_is_exactly_one_gib(llama8b: ModelSpec) -> None:
    assert kv_cache_bytes(llama8b, 8192, 1, "fp16") == GIB
    assert kv_cache_bytes(llama8b, 8192, 4, "fp8") == 2 * GIB
    assert kv_cache_bytes(llama8b, 8192, 1, "q8_0") == GIB * 34 // 64


def test_sliding_window_layers_cap_the_cache() -> None:
    gemma = spec_from_config({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
                              "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
                              "head_dim": 256, "vocab_size": 256000, "sliding_window": 4096}, "g", "t")
    per_layer_token = 2 * 8 * 256 * 2
    assert kv_cache_bytes(gemma, 8192, 1, "fp16") == per_layer_token * (21 * 8192 + 21 * 4096)


def test_mla_caches_the_latent_not_the_heads() -> None:
    deepseek = spec_from_config({
        "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128}, "DeepSeek-V3", "t")
    assert kv_cache_bytes(deepseek, 1, 1, "fp16") == (512 + 64) * 2 * 61
    assert deepseek.params == pytest.approx(671e9, rel=0.002)
    assert deepseek.active_params == pytest.approx(37e9, rel=0.03)


ZERO_PAPER_GB = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}


@pytest.mark.parametrize("stage, expected_gb", ZERO_PAPER_GB.items())
def test_zero_paper_example(stage: int, expected_gb: float) -> None:
    """Rajbhandari et al. 2020, Figure 1: 7.5B params, 64 GPUs, mixed-precision Adam (K = 12)."""
    model = ModelSpec(name="7.5B", kind="other", source="test", params=7_500_000_000, params_method="given")
    job = Job(task="full", gpus=64, zero=stage, batch=1, context=1)
    breakdown = training_memory(model, job)
    states = breakdown.get("weights") + breakdown.get("gradients") + breakdown.get("optimizer")
    assert round(states / 1e9, 1) == expected_gb


def test_weight_formats_follow_their_bits(llama8b: ModelSpec) -> None:
    assert weight_bytes(llama8b, weight_format("bf16")) == 2 * llama8b.params
    kept = llama8b.embedding_params * 2
    int4 = weight_bytes(llama8b, weight_format("int4"))
    assert int4 == round((llama8b.params - kept) * (4 + 20 / 128) / 8 + kept * 2)
    q4 = weight_bytes(llama8b, weight_format("q4_k_m"))
    assert q4 / GIB == pytest.approx(4.58, abs=0.01), "llama.cpp's table: Q4_K_M of Llama-3.1-8B is 4.58 GiB"
    assert weight_format("int4-g64").bits_per_weight == pytest.approx(4 + 20 / 64)


def test_tensor_parallel_splits_weights_and_kv(llama8b: ModelSpec) -> None:
    one = inference_memory(llama8b, Job(context=8192))
    two = inference_memory(llama8b, Job(context=8192, gpus=2))
    assert two.get("weights") == one.get("weights") // 2
    assert two.get("kv_cache") == one.get("kv_cache") // 2


def test_training_recipes_order_as_expected(llama8b: ModelSpec) -> None:
    full = training_memory(llama8b, Job(task="full", context=2048)).total_bytes
    lora = training_memory(llama8b, Job(task="lora", context=2048)).total_bytes
    qlora = training_memory(llama8b, Job(task="qlora", context=2048)).total_bytes
    checkpointed = training_memory(llama8b, Job(task="qlora", context=2048, checkpointing=True)).total_bytes
    assert full > lora > qlora > checkpointed
    eight_bit = training_memory(llama8b, Job(task="full", optimizer="adamw8bit", context=2048))
    assert eight_bit.get("optimizer") == 4 * llama8b.params + 2 * llama8b.params


def test_lora_adapters_count_rank_times_in_plus_out(llama8b: ModelSpec) -> None:
    breakdown = training_memory(llama8b, Job(task="lora", lora_rank=8, lora_targets=("q_proj", "v_proj")))
    adapters = 32 * 8 * ((4096 + 4096) + (4096 + 1024))
    assert breakdown.get("lora_adapters") == adapters * 8


@pytest.mark.parametrize("changes, message", [
    ({"batch": 0}, "--batch must be a positive"), ({"context": -1}, "--ctx must be a positive"),
    ({"zero": 4}, "--zero must be 0, 1, 2 or 3"), ({"task": "finetune"}, "unknown task 'finetune'"),
    ({"optimizer": "adam"}, "unknown optimizer 'adam'; did you mean adamw"),
])
def test_bad_jobs_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(GpuflyError, match=message):
        Job(**changes)


def test_unknown_quant_suggests() -> None:
    with pytest.raises(GpuflyError, match="unknown quantization 'q4_k_x'; did you mean q4_k"):
        weight_format("q4_k_x")
