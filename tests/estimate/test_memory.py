"""Memory estimates against figures that are known exactly: the KV cache, the ZeRO paper, formats."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.estimate.advise import fit
from gpufly.estimate.engines import GIB
from gpufly.estimate.formats import kv_key, weight_format
from gpufly.estimate.job import DEFAULT_LORA_TARGETS, Job
from gpufly.estimate.memory import inference_memory, kv_cache_bytes, lora_targets, training_memory, weight_bytes
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.resolve import load_model
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


@pytest.mark.parametrize("task", ["lora", "qlora"])
def test_zero_and_fsdp_shard_lora_and_qlora(llama8b: ModelSpec, task: str) -> None:
    """ZeRO-3 (FSDP full_shard) splits the frozen base; adapter gradients split from ZeRO-2, their
    optimizer states from ZeRO-1 (Rajbhandari et al. 2020, applied to the trainable adapters)."""
    by_stage = {stage: training_memory(llama8b, Job(task=task, gpus=4, zero=stage, context=2048))
                for stage in (0, 1, 2, 3)}
    adapters = 32 * 16 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 2 * (4096 + 14336) + (14336 + 4096))
    base = by_stage[0].get("weights")
    assert by_stage[0].get("lora_adapters") == 8 * adapters
    assert by_stage[0].get("optimizer") == 8 * adapters
    assert by_stage[1].get("optimizer") == 8 * adapters // 4
    assert by_stage[1].get("lora_adapters") == 8 * adapters
    assert by_stage[2].get("lora_adapters") == 4 * adapters + 4 * adapters // 4
    assert by_stage[2].get("weights") == base
    assert by_stage[3].get("weights") == base // 4
    assert by_stage[3].get("lora_adapters") == 2 * (4 * adapters // 4)
    totals = [by_stage[stage].total_bytes for stage in (0, 1, 2, 3)]
    assert totals == sorted(totals, reverse=True) and totals[3] < totals[0] - base // 2


def test_one_gpu_is_not_sharded(llama8b: ModelSpec) -> None:
    assert training_memory(llama8b, Job(task="qlora", zero=3)) == training_memory(llama8b, Job(task="qlora"))


@pytest.mark.parametrize("name, bits", [("q4_0", 4.5), ("q4_1", 5.0), ("q5_0", 5.5), ("q5_1", 6.0), ("q8_0", 8.5),
                                        ("q3_k", 3.4375), ("q4_k", 4.5), ("q5_k", 5.5), ("q3_k_m", 3.996),
                                        ("iq4_xs", 4.4597), ("Q4_0", 4.5), ("q2_k", 3.1593), ("q6_k", 6.5633)])
def test_gguf_types_have_their_bits(name: str, bits: float) -> None:
    """Block types at ggml's block layout; llama-quantize's file types (mixes) at llama.cpp's table."""
    fmt = weight_format(name)
    assert fmt.bits_per_weight == pytest.approx(bits, abs=0.001)
    assert fmt.engine_family == "gguf"


def test_block_types_follow_ggml_block_sizes() -> None:
    gguf = pytest.importorskip("gguf")
    for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q3_K", "Q4_K", "Q5_K", "TQ1_0", "TQ2_0", "MXFP4"):
        size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
        assert weight_format(name).bits_per_weight == 8 * type_size / size, name


def test_every_gguf_file_type_is_a_format() -> None:
    gguf = pytest.importorskip("gguf")
    for member in gguf.LlamaFileType:
        if member != gguf.LlamaFileType.GUESSED:
            weight_format("F32" if member == gguf.LlamaFileType.ALL_F32 else member.name.removeprefix("MOSTLY_"))


@pytest.mark.parametrize("file_format, quant, exact", [
    ("Q4_0", "q4_0", True), ("Q3_K_M", "Q3_K_M", True), ("F32", "fp32", True), ("F16", "fp16", True),
    ("BF16", "bf16", True), ("MXFP4_MOE", "mxfp4_moe", True), ("Q4_K", "q4_k_m", False), ("Q8_0", "bf16", False),
])
def test_a_files_own_bytes_are_used_in_its_own_format(file_format: str, quant: str, exact: bool) -> None:
    spec = ModelSpec(name="f", kind="decoder", source="gguf:f", params=1000, params_method="gguf header",
                     weight_bytes=1234, weight_format=file_format)
    assert (weight_bytes(spec, weight_format(quant)) == 1234) is exact


@pytest.mark.parametrize("engine, quant, expected", [
    ("llama.cpp", "nf4", "llama.cpp does not run nf4 weights"), ("llama.cpp", "awq", "--quant q4_k_m"),
    ("llama.cpp", "int8", "--quant q8_0"), ("vllm", "q4_k_m", "vLLM's GGUF support is experimental"),
    ("transformers", "q8_0", "transformers does not run GGUF Q8_0"), ("llama.cpp", "q4_k_m", None),
    ("vllm", "int4", None), ("llama.cpp", "bf16", None),
])
def test_engine_and_format_mismatch_is_a_note(llama8b: ModelSpec, engine: str, quant: str,
                                              expected: str | None) -> None:
    notes = " ".join(inference_memory(llama8b, Job(engine=engine, quant=quant)).notes)
    if expected is None:
        assert "does not run" not in notes and "experimental" not in notes
    else:
        assert expected in notes


def test_lora_targets_are_checked_against_the_models_linear_layers(llama8b: ModelSpec) -> None:
    assert lora_targets(llama8b, None) == DEFAULT_LORA_TARGETS
    assert lora_targets(llama8b, ("q_proj", "v_proj")) == ("q_proj", "v_proj")
    with pytest.raises(GpuflyError, match="unknown LoRA target module 'qproj'; did you mean q_proj") as caught:
        lora_targets(llama8b, ("qproj",))
    assert "q_proj" in caught.value.hint
    gpt2 = spec_from_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100},
                            "gpt2", "t")
    with pytest.raises(GpuflyError, match="has none of the default LoRA targets") as caught:
        lora_targets(gpt2, None)
    assert "c_attn" in caught.value.hint
    assert lora_targets(gpt2, ("c_attn",)) == ("c_attn",)
    assert training_memory(gpt2, Job(task="lora", lora_targets=("c_attn",))).get("lora_adapters") > 0
    bare = ModelSpec(name="embeddings only", kind="recsys", source="t", params=10, params_method="given")
    with pytest.raises(GpuflyError, match="has no linear layers for LoRA to adapt"):
        lora_targets(bare, None)


def test_lora_targets_match_as_peft_does() -> None:
    """A target names a module whose name is it or ends with '.target' (a Sequential index included)."""
    spec = ModelSpec(name="mlp", kind="other", source="t", params=0, params_method="given",
                     linear_shapes={"top_mlp.0": (8, 4, 1), "attention.output.dense": (4, 4, 2)})
    assert training_memory(spec, Job(task="lora", lora_rank=2, lora_targets=("top_mlp.0",))).get(
        "lora_adapters") == 2 * (8 + 4) * 8
    assert lora_targets(spec, ("dense",)) == ("dense",)
    with pytest.raises(GpuflyError, match=r"unknown LoRA target module 'top_mlp\.1'"):
        lora_targets(spec, ("top_mlp.1",))


@pytest.mark.parametrize("engine, kv, nearest", [("llama.cpp", "fp8", "q8_0"), ("vllm", "q4_0", "fp8"),
                                                 ("vllm", "q8", "fp8"), ("transformers", "fp8", "fp16")])
def test_a_kv_format_the_engine_lacks_is_a_note(llama8b: ModelSpec, engine: str, kv: str, nearest: str) -> None:
    notes = inference_memory(llama8b, Job(engine=engine, kv_format=kv)).notes
    assert any(f"has no {kv_key(kv)} KV cache" in note and f"--kv {nearest} is its nearest" in note for note in notes)


@pytest.mark.parametrize("engine, kv", [("llama.cpp", "q4_0"), ("llama.cpp", "Q8"), ("vllm", "fp8"),
                                        ("transformers", "bf16")])
def test_a_kv_format_the_engine_has_gets_no_note(llama8b: ModelSpec, engine: str, kv: str) -> None:
    notes = inference_memory(llama8b, Job(engine=engine, kv_format=kv)).notes
    assert not any("KV cache (its KV formats" in note for note in notes)


def test_llama_cpp_holds_no_pytorch_allocator_share_and_keeps_the_embedding_on_the_host(llama8b: ModelSpec) -> None:
    breakdown = inference_memory(llama8b, Job(engine="llama.cpp", quant="f16", context=8192))
    assert "allocator" not in {item.name for item in breakdown.items}
    embedding = llama8b.embedding_params * 2
    assert embedding / 2**20 == 1002, "Llama-3-8B F16: llama.cpp's log prints 'CPU buffer size = 1002.00 MiB'"
    assert breakdown.get("weights") == llama8b.params * 2 - embedding
    assert round(breakdown.get("activations") / 2**20) == 560, "ollama's GraphSize at n_ctx 8192, n_batch 512"
    tied = inference_memory(load_model("llama-3.2-1b"), Job(engine="llama.cpp", quant="f16"))
    assert tied.get("weights") == load_model("llama-3.2-1b").params * 2, "a tied table is the GPU's output layer"
    assert "allocator" in {item.name for item in inference_memory(llama8b, Job()).items}


def test_an_8b_at_f16_on_a_16_gb_card_agrees_with_llama_bench(llama8b: ModelSpec, catalog) -> None:
    """XiongjieDai's llama-bench table (RTX 4080 16GB, Llama-3-8B F16, May 2024): tg/pp 512 to 4096 ran,
    8192 was OOM (github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference, README, LLaMA 3 NVIDIA table)."""
    rtx_4080 = catalog.get("rtx 4080")
    for context in (512, 1024, 4096):
        ran = fit(llama8b, rtx_4080, Job(engine="llama.cpp", quant="f16", context=context))
        assert ran.fits and not ran.tight, (context, ran.verdict)
    oom = fit(llama8b, rtx_4080, Job(engine="llama.cpp", quant="f16", context=8192))
    assert oom.tight or not oom.fits, oom.verdict


@pytest.mark.parametrize(("task", "option", "applies", "words"), [
    ("qlora", None, True, "the qlora recipe's default: PEFT's prepare_model_for_kbit_training turns it on"),
    ("lora", None, True, "the lora recipe's default: TRL's SFTConfig turns it on"),
    ("full", None, False, "the full recipe's default: transformers' TrainingArguments leave it off"),
    ("qlora", False, False, "checkpointing off by --no-checkpointing; the qlora recipe's default is on"),
    ("full", True, True, "checkpointing on by --checkpointing; the full recipe's default is off"),
])
def test_checkpointing_follows_the_recipe_unless_overridden(llama8b: ModelSpec, task: str, option: bool | None,
                                                            applies: bool, words: str) -> None:
    job = Job.from_options(llama8b, task=task, checkpointing=option)
    assert job.checkpointing is applies
    assert any(words in note for note in training_memory(llama8b, job).notes)
