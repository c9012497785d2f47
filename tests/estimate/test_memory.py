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
    constants = 0 if task == "lora" else round((llama8b.params - 2 * 128256 * 4096 - 266240) * 0.127 / 8)
    assert by_stage[3].get("weights") == (base - constants) // 4 + constants, "NF4's constants are no parameter"
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


def _items(spec: ModelSpec, job: Job) -> dict[str, int]:
    return {item.name: item.bytes for item in training_memory(spec, job).items}


def test_pure_bf16_keeps_2_b_weights_2_b_gradients_and_4_b_adam_states(llama8b: ModelSpec) -> None:
    """torchtune's full fine-tune: bf16 weights (2 B), bf16 gradients (2 B), AdamW's two moments in bf16 (4 B): 8 B
    per param against mixed precision's 16 (2 + 2 + fp32 master 4 + fp32 moments 8)."""
    params = llama8b.params
    mixed = _items(llama8b, Job(task="full"))
    bf16 = _items(llama8b, Job(task="full", master_weights=False))
    assert (bf16["weights"], bf16["gradients"], bf16["optimizer"]) == (2 * params, 2 * params, 4 * params)
    assert mixed["optimizer"] == 12 * params
    assert {name: value for name, value in bf16.items() if name not in ("optimizer", "allocator")} == {
        name: value for name, value in mixed.items() if name not in ("optimizer", "allocator")}
    assert Job(task="full", master_weights=False).precision == "bf16"
    assert _items(llama8b, Job(task="full", master_weights=False, optimizer="adamw8bit"))["optimizer"] == 2 * params


def test_optimizer_in_backward_keeps_only_the_largest_gradient(llama8b: ModelSpec) -> None:
    base = _items(llama8b, Job(task="full", master_weights=False))
    eager_step = _items(llama8b, Job(task="full", master_weights=False, optimizer_in_backward=True))
    assert eager_step["gradients"] == 2 * 128256 * 4096, "the embedding is Llama 3.1 8B's largest tensor"
    assert {k: v for k, v in eager_step.items() if k not in ("gradients", "allocator")} == {
        k: v for k, v in base.items() if k not in ("gradients", "allocator")}
    lora = _items(llama8b, Job(task="lora", optimizer_in_backward=True))
    assert lora["lora_adapters"] < _items(llama8b, Job(task="lora"))["lora_adapters"]


def test_offload_moves_state_to_host_memory_and_says_how_much(llama8b: ModelSpec) -> None:
    params = llama8b.params
    on_gpu = training_memory(llama8b, Job(task="full"))
    optimizer = training_memory(llama8b, Job(task="full", offload="optimizer"))
    assert optimizer.get("optimizer") == 0 and optimizer.get("weights") == on_gpu.get("weights")
    assert optimizer.get("gradients") < on_gpu.get("gradients") / 10
    assert optimizer.host_bytes == 12 * params + 2 * params, "master + Adam states + the gradients"
    assert any("host memory for --offload optimizer" in note for note in optimizer.notes)
    everything = training_memory(llama8b, Job(task="full", offload="params"))
    assert everything.get("weights") == 0 and everything.get("gathered") > 0
    assert everything.host_bytes == optimizer.host_bytes + 2 * params
    assert on_gpu.host_bytes == 0 and on_gpu.to_dict()["host_bytes"] == 0


def test_eager_attention_adds_a_term_quadratic_in_the_context(llama8b: ModelSpec) -> None:
    def extra(context: int) -> int:
        job = Job(task="full", context=context)
        flash = training_memory(llama8b, job).get("activations")
        return training_memory(llama8b, job.with_(flash_attention=False)).get("activations") - flash

    assert extra(4096) / extra(2048) == pytest.approx(4, rel=0.01)
    sdpa = training_memory(llama8b, Job(task="full", sdpa=True))
    assert sdpa.get("activations") == training_memory(llama8b, Job(task="full")).get("activations")
    assert Job(sdpa=True).attention == "sdpa" and Job(flash_attention=False).attention == "eager"


def test_qlora_in_fp32_holds_the_unquantized_params_in_fp32(llama8b: ModelSpec) -> None:
    """fp32 QLoRA is never lighter than PEFT's mixed recipe, which upcasts the same parameters to fp32."""
    weights = {precision: training_memory(llama8b, Job(task="qlora", master_weights=precision != "bf16",
                                                       mixed_precision=precision != "fp32")).get("weights")
               for precision in ("mixed", "bf16", "fp32")}
    assert weights["fp32"] == weights["mixed"] > weights["bf16"]


def test_a_plain_mlp_saves_half_of_what_a_gated_one_does(llama8b: ModelSpec) -> None:
    """A gated MLP keeps gate, up, the activated gate and the product (4 F-wide tensors); a GELU MLP its first
    projection's output and the activation's (2): 4 bytes per token and channel less in 16 bits."""
    import dataclasses

    plain = dataclasses.replace(llama8b, gated_mlp=False)
    job = Job(task="lora", context=1024, batch=2)
    saved = training_memory(llama8b, job).get("activations") - training_memory(plain, job).get("activations")
    assert saved == 4 * 1024 * 2 * (llama8b.intermediate or 0) * (llama8b.layers or 0)


@pytest.mark.parametrize(("loss", "bytes_per_entry"), [("full", 14), ("chunked", 4), ("fused", 0)])
def test_the_loss_recipe_sets_the_logits_the_peak_holds(llama8b: ModelSpec, loss: str, bytes_per_entry: int) -> None:
    job = Job(task="lora", context=1024, batch=2)
    body = training_memory(llama8b, job.with_(loss="fused")).get("activations")
    memory = training_memory(llama8b, job.with_(loss=loss))
    assert memory.get("activations") - body == bytes_per_entry * 1024 * 2 * (llama8b.vocab or 0)
    note = next(item.note for item in memory.items if item.name == "activations")
    said = {"full": "14 B/token x vocab", "chunked": "chunked loss", "fused": "fused linear cross-entropy"}
    assert said[loss] in note


def test_selective_checkpointing_lies_between_none_and_full(llama8b: ModelSpec) -> None:
    jobs = [Job(task="full", context=4096), Job(task="full", context=4096, checkpointing=True, selective=True),
            Job(task="full", context=4096, checkpointing=True)]
    none, selective, full = (training_memory(llama8b, job).get("activations") for job in jobs)
    assert none > selective > full
    assert [job.recompute_forward_fraction for job in jobs] == [0.0, 0.5, 1.0]
    assert [job.checkpointing_mode for job in jobs] == ["none", "selective", "full"]


def test_the_cuda_context_is_an_item_a_user_can_set(llama8b: ModelSpec) -> None:
    default = training_memory(llama8b, Job(task="qlora"))
    assert default.get("runtime") == 500 * 2**20 and "pytorch#86509" in next(
        item.note for item in default.items if item.name == "runtime")
    assert training_memory(llama8b, Job(task="qlora", cuda_context_bytes=GIB)).get("runtime") == GIB
    assert default.get("nccl") == 0
    assert training_memory(llama8b, Job(task="qlora", gpus=2)).get("nccl") > 0


def test_paged_optimizers_hold_what_their_unpaged_twins_do_and_say_so(llama8b: ModelSpec) -> None:
    paged = training_memory(llama8b, Job(task="full", optimizer="paged-adamw8bit"))
    assert paged.get("optimizer") == training_memory(llama8b, Job(task="full", optimizer="adamw8bit")).get("optimizer")
    assert any("pages its states to host memory" in note for note in paged.notes)


def test_peft_qlora_holds_the_unquantized_parameters_in_fp32(llama8b: ModelSpec) -> None:
    """prepare_model_for_kbit_training casts the embeddings, LM head and norms to fp32: 2 B more each."""
    unquantized = 2 * 128256 * 4096 + 266240
    peft = _items(llama8b, Job(task="qlora"))
    pure = _items(llama8b, Job(task="qlora", master_weights=False))
    assert peft["weights"] - pure["weights"] == 2 * unquantized
    assert peft["lora_adapters"] == 2 * pure["lora_adapters"], "fp32 adapters against bf16"
    assert peft["activations"] > pure["activations"], "the residual stream is fp32 after an fp32 embedding"


def test_the_loss_logits_grow_with_the_vocabulary_and_the_tokens(llama8b: ModelSpec) -> None:
    short, long = (training_memory(llama8b, Job(task="qlora", context=context)).get("activations")
                   for context in (8192, 16384))
    assert long - short >= 14 * 8192 * 128256


def test_more_than_one_gpu_adds_nccl_buffers_and_the_streams_allocator_share(llama8b: ModelSpec) -> None:
    pcie = training_memory(llama8b, Job(task="qlora", gpus=2, link="pcie"))
    nvlink = training_memory(llama8b, Job(task="qlora", gpus=2, link="nvlink"))
    assert nvlink.get("nccl") == 8 * pcie.get("nccl") and pcie.get("nccl") == 4 * 36 * 2**20
    one = training_memory(llama8b, Job(task="qlora"))
    assert one.get("allocator") / one.without("allocator", "runtime") == pytest.approx(0.05, rel=1e-3)
    assert pcie.get("allocator") / pcie.without("allocator", "runtime", "nccl") == pytest.approx(0.18, rel=1e-3)


def test_offloaded_qlora_keeps_only_the_nf4_constants_and_the_gathered_units(llama8b: ModelSpec) -> None:
    job = Job(task="qlora", gpus=2, zero=3, master_weights=False, offload="params")
    offloaded = training_memory(llama8b, job)
    constants = round((llama8b.params - 2 * 128256 * 4096 - 266240) * 0.127 / 8)
    assert offloaded.get("weights") == constants and offloaded.get("gathered") > 0
    assert offloaded.host_bytes > weight_bytes(llama8b, weight_format("nf4")) // 2 - constants


def test_a_transformers_prefill_runs_the_prompt_not_the_context() -> None:
    """Qwen's speed benchmark ran 1+2048 tokens: a one-token prefill, whose activations are a few MiB, not the
    activations of a 2,049-token prompt (what the estimate charged before the Job knew the prompt)."""
    qwen = load_model("qwen2.5-3b")
    whole = inference_memory(qwen, Job(quant="int4", context=2049)).get("activations")
    decode_only = inference_memory(qwen, Job(quant="int4", context=2049, prompt=1)).get("activations")
    h, f = qwen.hidden or 0, qwen.intermediate or 0
    assert decode_only == (3 * f + 4 * h) * 2 + 151936 * 4
    assert whole - decode_only == 2048 * (3 * f + 4 * h) * 2
    with pytest.raises(GpuflyError, match="prompt must be within"):
        Job(context=2049, prompt=4096)


def test_an_awq_checkpoint_that_stores_its_lm_head_holds_a_second_copy() -> None:
    """Qwen2.5-1.5B-Instruct ties its LM head to the embedding; Qwen's AWQ checkpoint stores both (QwenLM/Qwen3#1117),
    so its config unties them and the 16-bit head is counted apart: 151936 x 1536 x 2 bytes (0.43 GiB), the gap the
    Qwen2.5 speed table shows between AWQ and GPTQ-Int4 at 1.5B-3B."""
    config = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936}
    tied = spec_from_config({**config, "tie_word_embeddings": True}, "Qwen2.5-1.5B-Instruct", "t")
    awq = spec_from_config({**config, "tie_word_embeddings": False}, "Qwen2.5-1.5B-Instruct-AWQ", "t")
    job = Job(quant="awq", context=2049, prompt=1)
    extra = inference_memory(awq, job).get("weights") - inference_memory(tied, job).get("weights")
    assert extra == 151936 * 1536 * 2
    said = inference_memory(tied, job).notes
    assert any("tie_word_embeddings: false" in note and "0.43 GiB" in note for note in said)
    assert not any("tie_word_embeddings" in note for note in inference_memory(awq, job).notes)


def test_eager_attention_holds_one_layers_scores_in_a_transformers_prefill(llama8b: ModelSpec) -> None:
    flash = inference_memory(llama8b, Job(context=8192, flash_attention=True)).get("activations")
    eager = inference_memory(llama8b, Job(context=8192, flash_attention=False)).get("activations")
    assert eager - flash == 8192 * 8192 * (6 * 32 + 2)
    assert "eager attention" in inference_memory(llama8b, Job(context=8192, flash_attention=False)).items[2].note


def test_a_wide_attention_outweighs_a_narrow_mlp() -> None:
    """A model whose 32 heads of 128 (4096) are four times its hidden size, over an MLP of 3072: its prefill peaks
    in attention (q and RoPE's three temporaries beside k, v, the residual and the norm), not in the MLP the Qwen2.5
    rows were calibrated on. (Qwen3-0.6B, 16 heads of 128 over 1024, still peaks in its MLP: 12,288 < 13,312.)"""
    wide = spec_from_config({"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
                             "num_hidden_layers": 28, "num_attention_heads": 32, "num_key_value_heads": 8,
                             "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True}, "wide", "t")
    act = inference_memory(wide, Job(context=1000)).get("activations") - 151936 * 4
    assert act == 1000 * (2 * 1024 + 4 * 4096 + 2 * 1024) * 2 > 1000 * (3 * 3072 + 4 * 1024) * 2


def test_a_long_prompt_says_what_an_older_transformers_would_add(llama8b: ModelSpec) -> None:
    notes = inference_memory(llama8b, Job(context=32768)).notes
    size = 6 * 32768 * 128256 / GIB
    assert any("4.45" in note and f"{size:.1f} GiB" in note for note in notes)
    assert not any("4.45" in note for note in inference_memory(llama8b, Job(context=512)).notes)
    assert not any("4.45" in note for note in inference_memory(llama8b, Job(context=32768, engine="vllm")).notes)


def test_a_model_without_a_sequence_says_no_context_in_its_activations() -> None:
    """A CNN's activations are per sample: "micro-batch 32 x 4,096" named a sequence it does not have."""
    from gpufly.estimate.job import Job
    from gpufly.estimate.memory import training_memory
    from gpufly.models.resolve import load_model

    item = next(i for i in training_memory(load_model("resnet-50"), Job(task="full", batch=32)).items
                if i.name == "activations")
    assert item.note.startswith("micro-batch 32: ") and " x " not in item.note.split(":")[0]
