"""The roofline's shape: what each term does, on hand-made GPUs where the arithmetic is visible."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate import engines
from gpufly.estimate.advise import fit, largest, parse_gpu, recommend
from gpufly.estimate.formats import weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import lm_head_params
from gpufly.estimate.speed import (
    ATTENTION_SCORE_BYTES,
    attention_ceiling,
    attention_scores,
    decode_step_s,
    decode_weight_bytes,
    matmul_ceiling,
    matmul_efficiency,
    peak_flops,
    prefill_flops,
    prefill_memory_bytes,
    prefill_parallelism,
    prefill_rate,
    prefill_s,
    speed,
    training_speed,
    training_step_s_per_sample,
)
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.resolve import load_model

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
LLAMA = spec_from_config(load_config_file(CONFIGS / "llama-3.1-8b"), "Llama 3.1 8B", "test")


def card(**fields) -> GpuSpec:
    base = dict(id="card", name="Card", full_name="Card", vendor="nvidia", segment="datacenter",
                architecture="Hopper", vram_gib=80, memory_type="GDDR6", memory_bandwidth_gbps=1000,
                launch_year=2024, sources=("https://example.org",), fp32_tflops=50, fp16_tensor_tflops=400,
                bf16_tensor_tflops=400, compute_capability="9.0", tdp_w=500)
    return GpuSpec(**{**base, **fields})


def test_decode_is_bandwidth_bound_for_a_big_model_on_llama_cpp() -> None:
    job = Job(quant="f16", engine="llama.cpp")
    slow, fast = decode_step_s(LLAMA, card(), job, 1), decode_step_s(LLAMA, card(memory_bandwidth_gbps=2000), job, 1)
    fixed = LLAMA.layers * engines.ENGINES["llama.cpp"].layer_overhead_s
    assert (slow - fixed) == pytest.approx(2 * (fast - fixed))


def test_embeddings_are_looked_up_not_read() -> None:
    fmt = weight_format("bf16")
    assert decode_weight_bytes(LLAMA, fmt, 1) == (LLAMA.params - LLAMA.embedding_params) * 2


def test_moe_decode_reads_only_the_active_experts() -> None:
    mixtral = spec_from_config({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2}, "m", "t")
    fmt = weight_format("bf16")
    one = decode_weight_bytes(mixtral, fmt, 1)
    assert one == pytest.approx((mixtral.active_params - mixtral.embedding_params) * 2)
    assert decode_weight_bytes(mixtral, fmt, 64) == pytest.approx((mixtral.params - mixtral.embedding_params) * 2,
                                                                  rel=1e-6), "a big batch touches every expert"


def test_small_models_in_eager_transformers_are_host_bound() -> None:
    job = Job(quant="bf16", engine="transformers")
    tiny = spec_from_config({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
                             "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                             "vocab_size": 151936, "tie_word_embeddings": True}, "q", "t")
    assert decode_step_s(tiny, card(), job, 1) == decode_step_s(tiny, card(memory_bandwidth_gbps=4000), job, 1)


def test_llama_cpp_across_gpus_is_a_pipeline_not_more_bandwidth() -> None:
    one = decode_step_s(LLAMA, card(), Job(quant="q4_k_m", engine="llama.cpp"), 512)
    four = decode_step_s(LLAMA, card(), Job(quant="q4_k_m", engine="llama.cpp", gpus=4), 512)
    assert four == pytest.approx(one)
    vllm_one = decode_step_s(LLAMA, card(), Job(engine="vllm"), 512)
    vllm_two = decode_step_s(LLAMA, card(), Job(engine="vllm", gpus=2), 512)
    assert vllm_two < vllm_one


def test_geforce_fp16_accumulate_doubles_the_rate_for_llama_cpp_only() -> None:
    geforce = card(segment="consumer", fp16_tensor_tflops=165.2)
    assert peak_flops(geforce, "fp16") == pytest.approx(165.2e12)
    assert peak_flops(geforce, "fp16", fp16_accumulate=True) == pytest.approx(330.4e12)
    assert peak_flops(card(), "fp16", fp16_accumulate=True) == pytest.approx(400e12)


def test_unpublished_tensor_rate_gives_no_compute_prediction() -> None:
    no_rates = card(fp16_tensor_tflops=None, bf16_tensor_tflops=None)
    assert peak_flops(no_rates, "bf16") is None
    speed = training_speed(LLAMA, no_rates, Job(task="full"))
    assert speed.train_tokens_s is None and "publishes no dense tensor rate" in speed.why


def test_prefill_flops_count_the_body_per_token_the_head_once_and_causal_attention() -> None:
    heads_dim = 32 * 128
    body = LLAMA.params - LLAMA.embedding_params - lm_head_params(LLAMA)
    assert prefill_flops(LLAMA, 1000) == 2 * body * 1000 + 2 * lm_head_params(LLAMA) + 2 * 32 * 1000**2 * heads_dim


def test_attention_scores_in_micro_batches_count_each_block_against_the_keys_before_it() -> None:
    per_layer_head = LLAMA.layers * LLAMA.heads
    assert attention_scores(LLAMA, 1024, 512) == per_layer_head * (512 * 512 + 512 * 1024)
    assert attention_scores(LLAMA, 1000, 0) == per_layer_head * 1000 * 1000, "eager: the whole masked square"


def _prefill_tok_s(job: Job, tokens: int, gpu: GpuSpec | None = None) -> float:
    seconds = prefill_s(LLAMA, gpu or card(), job, tokens)
    assert seconds is not None
    return tokens / seconds


def test_materialized_attention_scores_slow_long_prompts_in_llama_cpp() -> None:
    without = Job(quant="f16", engine="llama.cpp", flash_attention=False)
    flash = without.with_(flash_attention=True)
    assert _prefill_tok_s(without, 8192) < 0.8 * _prefill_tok_s(flash, 8192)
    assert _prefill_tok_s(without, 512) > 0.85 * _prefill_tok_s(flash, 512), "a short prompt hardly notices"
    extra = prefill_s(LLAMA, card(), without, 8192) - prefill_s(LLAMA, card(), flash, 8192)
    assert extra == pytest.approx(attention_scores(LLAMA, 8192, 512) * ATTENTION_SCORE_BYTES
                                  / (1000e9 * engines.ELEMENTWISE_BANDWIDTH_EFFICIENCY))


def test_llama_cpp_dequantizes_quantized_weights_for_each_prompt_micro_batch() -> None:
    f16, q4 = Job(quant="f16", engine="llama.cpp"), Job(quant="q4_k_m", engine="llama.cpp")
    assert _prefill_tok_s(q4, 4096) < _prefill_tok_s(f16, 4096), "the 16-bit copy costs memory traffic"
    assert _prefill_tok_s(q4, 4096) > 0.5 * _prefill_tok_s(f16, 4096)


def test_a_batch_of_short_prompts_shares_its_micro_batches_dequantization() -> None:
    q4 = Job(quant="q4_k_m", engine="llama.cpp")
    fmt, runtime = weight_format("q4_k_m"), engines.ENGINES["llama.cpp"]
    one = prefill_memory_bytes(LLAMA, fmt, runtime, q4, 64)
    assert prefill_memory_bytes(LLAMA, fmt, runtime, q4.with_(batch=8), 64) == one, "8 x 64 tokens: one micro-batch"
    assert prefill_memory_bytes(LLAMA, fmt, runtime, q4.with_(batch=9), 64) == 2 * one


def test_board_power_caps_llama_cpp_prefill_on_a_calibrated_chip_family() -> None:
    runtime, fmt = engines.ENGINES["llama.cpp"], weight_format("f16")
    geforce = card(segment="consumer", chip="AD102", tdp_w=450, fp16_tensor_tflops=165, bf16_tensor_tflops=165)
    workstation = card(segment="workstation", chip="AD102", tdp_w=300, fp16_tensor_tflops=364,
                       bf16_tensor_tflops=364)
    per_watt = dict(runtime.prefill_tflops_per_watt)["AD10"] * 1e12
    assert prefill_rate(workstation, runtime, fmt) == pytest.approx(300 * per_watt)
    assert prefill_rate(geforce, runtime, fmt) == pytest.approx(
        min(2 * 165e12 * runtime.prefill_compute_efficiency, 450 * per_watt))
    uncalibrated = card(chip="XY100", tdp_w=50)
    assert prefill_rate(uncalibrated, runtime, fmt) == pytest.approx(400e12 * runtime.prefill_compute_efficiency)


def test_a_short_prompt_pays_the_engines_fixed_step_costs() -> None:
    vllm = engines.ENGINES["vllm"]
    seconds = prefill_s(LLAMA, card(), Job(engine="vllm"), 1)
    assert seconds is not None and seconds > vllm.step_overhead_s
    eager = prefill_s(LLAMA, card(), Job(engine="transformers"), 16)
    assert eager is not None and eager >= LLAMA.layers * engines.ENGINES["transformers"].cpu_s_per_layer


def test_vllm_reads_int4_weights_at_a_lower_share_of_bandwidth_than_bf16() -> None:
    gpu, position = card(memory_bandwidth_gbps=2000, fp16_tensor_tflops=1000, bf16_tensor_tflops=1000), 1
    bf16 = decode_step_s(LLAMA, gpu, Job(engine="vllm"), position) - engines.ENGINES["vllm"].step_overhead_s
    int4 = decode_step_s(LLAMA, gpu, Job(engine="vllm", quant="int4"), position) - engines.ENGINES[
        "vllm"].step_overhead_s
    bytes_ratio = (decode_weight_bytes(LLAMA, weight_format("int4"), 1)
                   / decode_weight_bytes(LLAMA, weight_format("bf16"), 1))
    factor = dict(engines.ENGINES["vllm"].quantized_bandwidth_factor)["int4"]
    assert int4 / bf16 == pytest.approx(bytes_ratio / factor, rel=0.02)


def test_transformers_runs_gptq_4bit_through_exllama_at_a_16bit_layers_host_cost_and_awq_at_the_quantized_one() -> None:
    """The host floor of an eager transformers step: GPTQ 4-bit layers (ExLlama kernel) cost a 16-bit layer's,
    AWQ's and 8-bit layers cost quantized_cpu_factor times that; vLLM runs both 4-bit checkpoints alike (Marlin)."""
    gpu, position = card(memory_bandwidth_gbps=2000, fp16_tensor_tflops=1000, bf16_tensor_tflops=1000), 1
    transformers = engines.ENGINES["transformers"]
    floor = {quant: decode_step_s(LLAMA, gpu, Job(engine="transformers", quant=quant), position)
             for quant in ("bf16", "gptq", "awq", "int8")}
    assert floor["gptq"] == pytest.approx(floor["bf16"], rel=1e-6)
    assert floor["awq"] == pytest.approx(floor["bf16"] * transformers.quantized_cpu_factor, rel=1e-6)
    assert floor["int8"] == pytest.approx(floor["awq"], rel=1e-6)
    vllm = {quant: decode_step_s(LLAMA, gpu, Job(engine="vllm", quant=quant), position) for quant in ("gptq", "awq")}
    assert vllm["gptq"] == vllm["awq"]
    assert weight_format("gptq").bits_per_weight == weight_format("awq-int4").bits_per_weight == weight_format(
        "int4").bits_per_weight
    assert (weight_format("gptq-int4").kernel, weight_format("awq").kernel, weight_format("int4").kernel) == (
        "gptq", "awq", "")


def test_llama_cpp_decode_pays_a_fixed_cost_per_layer_so_bigger_models_use_bandwidth_better() -> None:
    big = spec_from_config({**load_config_file(CONFIGS / "llama-3.1-8b"), "hidden_size": 8192,
                            "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64},
                           "Llama 70B-shaped", "test")
    job = Job(quant="q4_k_m", engine="llama.cpp")
    fmt = weight_format("q4_k_m")
    small_rate = decode_weight_bytes(LLAMA, fmt, 1) / decode_step_s(LLAMA, card(), job, 1)
    big_rate = decode_weight_bytes(big, fmt, 1) / decode_step_s(big, card(), job, 1)
    assert big_rate > small_rate


def test_training_scales_with_gpus_where_the_link_hides_the_communication() -> None:
    nvlink = card(form_factor="SXM5", interconnect_gbps=900)
    one = training_speed(LLAMA, nvlink, Job(task="full", context=2048)).train_tokens_s
    ddp = training_speed(LLAMA, nvlink, Job(task="full", context=2048, gpus=8)).train_tokens_s
    assert ddp == pytest.approx(8 * one), "DDP's all-reduce hides behind the backward on NVLink"
    eight = training_speed(LLAMA, nvlink, Job(task="full", context=2048, gpus=8, zero=3))
    assert eight.train_tokens_s > 8 * one, "FSDP's gathers hide on NVLink, and it shards the optimizer step"
    pcie = training_speed(LLAMA, card(pcie_gen=4, form_factor="PCIe card"),
                          Job(task="full", context=2048, gpus=8, zero=3))
    assert pcie.train_tokens_s < eight.train_tokens_s, "over PCIe some of FSDP's traffic is left exposed"
    assert pcie.communication_s > 0 and eight.communication_s == 0


def test_largest_context_is_the_boundary(catalog) -> None:
    gpu = parse_gpu("4090", catalog).spec
    longest = largest(LLAMA, gpu, Job(), "context", 131072)
    assert fit(LLAMA, gpu, Job(context=longest)).fits
    assert not fit(LLAMA, gpu, Job(context=longest + 1)).fits


def test_parse_gpu_counts(catalog) -> None:
    assert parse_gpu("2xH100", catalog).count == 2
    assert parse_gpu("8 x a100-80g", catalog).spec.id == "a100-sxm4-80gb"


def test_every_more_gpus_change_names_a_gpu_that_gpu_reads_back(catalog) -> None:
    """The change is a command line to copy: ``--gpu 8xmi300x``, not a display name the parser rejects."""
    from gpufly.estimate.advise import changes

    seventy = load_model("llama-3.1-70b")
    for gpu in catalog.specs:
        if gpu.vram_gib < 100:
            for change in changes(fit(seventy, gpu, Job(context=8192))):
                if change.description.startswith("--gpu "):
                    wanted = change.description.split()[1]
                    assert parse_gpu(wanted, catalog).spec.id == gpu.id, change.description


def test_nccl_buffers_follow_the_link_the_gpu_defaults_to(catalog) -> None:
    h100 = parse_gpu("h100 sxm", catalog).spec
    job = Job(task="full", gpus=8, zero=3, checkpointing=True, context=2048)
    default, nvlink = fit(LLAMA, h100, job), fit(LLAMA, h100, job.with_(link="nvlink"))
    assert default.memory.get("nccl") == nvlink.memory.get("nccl") > fit(
        LLAMA, h100, job.with_(link="pcie")).memory.get("nccl")
    assert default.job.link == "", "the job stays as given; the notes say which link was assumed"


def test_a_prompt_sets_the_prefill_and_the_first_token(catalog) -> None:
    gpu = parse_gpu("4090", catalog).spec
    default, short = speed(LLAMA, gpu, Job(context=8192)), speed(LLAMA, gpu, Job(context=8192, prompt=512))
    assert default.prompt_tokens == 4096 and short.prompt_tokens == 512
    assert short.time_to_first_token_s < default.time_to_first_token_s / 4
    assert short.decode_tok_s == default.decode_tok_s, "decode is read at the end of the context either way"


def test_recommend_takes_the_fewest_gpus_that_fit(catalog) -> None:
    picks = recommend(LLAMA, Job(task="full", context=2048), catalog, max_gpus=8).picks
    assert picks
    for pick in picks:
        if pick.fit.job.gpus > 1:
            fewer = replace(pick.fit.job, gpus=pick.fit.job.gpus // 2, zero=3 if pick.fit.job.gpus > 2 else 0)
            assert not fit(LLAMA, pick.fit.gpu, fewer).fits


def test_llama_cpp_pipelines_a_long_prompt_across_its_layer_split() -> None:
    llama_cpp, transformers = engines.engine("llama.cpp"), engines.engine("transformers")
    assert prefill_parallelism(llama_cpp, 8, 512) == 1, "one micro-batch has nothing to overlap"
    ideal = 8 * 8 / (8 + 8 - 1)
    assert prefill_parallelism(llama_cpp, 8, 4096) == pytest.approx(1 + (ideal - 1) * llama_cpp.pipeline_efficiency)
    assert prefill_parallelism(llama_cpp, 1, 4096) == 1
    assert prefill_parallelism(transformers, 4, 4096) == 1, "transformers' device_map runs the GPUs in turn"
    assert prefill_parallelism(engines.engine("vllm"), 4, 4096) == 4, "tensor parallelism splits every matmul"


TINY = spec_from_config({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                         "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                         "tie_word_embeddings": True}, "tiny", "test")


def step_part(speed, name: str) -> float:
    return next(part.seconds for part in speed.step if part.name == name)


def test_amp_on_a_card_without_tensor_cores_runs_at_the_fp32_rate() -> None:
    """A GTX 1080 Ti's FP16 runs at 1/64 of its FP32 rate; cuBLAS computes AMP's 16-bit GEMMs in FP32 instead."""
    pascal = card(architecture="Pascal", compute_capability="6.1", fp32_tflops=11.34, fp16_tflops=0.177,
                  fp16_tensor_tflops=None, bf16_tensor_tflops=None, segment="consumer", memory_bandwidth_gbps=484)
    assert not pascal.has_tensor_cores
    assert peak_flops(pascal, "bf16") == pytest.approx(11.34e12)
    amp = training_speed(TINY, pascal, Job(task="full", context=512, batch=8)).train_tokens_s
    fp32 = training_speed(TINY, pascal, Job(task="full", context=512, batch=8, mixed_precision=False)).train_tokens_s
    assert amp is not None and fp32 is not None and amp >= fp32, "same matmul rate, half the activation bytes"


def test_bf16_before_ampere_runs_at_the_fp32_rate_and_the_mixed_recipe_at_fp16(catalog) -> None:
    """A T4 has FP16 tensor cores and no bf16 ones: pure-bf16 training there must not be predicted faster than the
    mixed recipe (which runs fp16 autocast on it), as it was when bf16 fell back to the FP16 tensor rate."""
    t4 = catalog.get("t4")
    assert peak_flops(t4, "bf16") == pytest.approx(t4.fp32_tflops * 1e12)
    assert peak_flops(catalog.get("a100 sxm4 80gb"), "bf16") == pytest.approx(312e12)
    pure = training_speed(TINY, t4, Job(task="full", context=512, batch=8, master_weights=False)).train_tokens_s
    mixed = training_speed(TINY, t4, Job(task="full", context=512, batch=8)).train_tokens_s
    assert pure is not None and mixed is not None and mixed > 1.5 * pure


def test_batch_one_is_slower_per_sample_than_batch_eight(catalog) -> None:
    a100 = catalog.get("a100 sxm4 80gb")
    one = training_step_s_per_sample(TINY, a100, Job(task="full", context=512, batch=1))
    eight = training_step_s_per_sample(TINY, a100, Job(task="full", context=512, batch=8))
    assert one is not None and eight is not None and one > 1.5 * eight
    tiny_batch = training_speed(TINY, a100, Job(task="lora", context=128, batch=1, lora_rank=16))
    assert step_part(tiny_batch, "host launch floor") > 0, "a tiny micro-batch waits on the host's kernel launches"


def test_the_optimizer_step_is_paid_once_per_step_whatever_the_batch(catalog) -> None:
    a100 = catalog.get("a100 sxm4 80gb")
    small, big = (training_speed(LLAMA, a100, Job(task="full", context=1024, batch=b)) for b in (1, 8))
    assert step_part(small, "optimizer step") == step_part(big, "optimizer step")
    assert step_part(small, "optimizer step") / small.step_s > 4 * step_part(big, "optimizer step") / big.step_s
    accumulated = training_speed(LLAMA, a100, Job(task="full", context=1024, batch=1, global_batch=8))
    assert accumulated.train_samples_s > small.train_samples_s, "gradient accumulation spreads the step over 8"
    lora = training_speed(LLAMA, a100, Job(task="lora", context=1024, batch=1, lora_rank=16))
    assert step_part(lora, "optimizer step") < step_part(small, "optimizer step") / 100, "only the adapters"


def test_hopper_reaches_a_smaller_share_of_its_peak_than_ampere(catalog) -> None:
    h100, a100 = catalog.get("h100 sxm"), catalog.get("a100 sxm4 80gb")
    job = Job(task="full", context=2048, batch=4)
    assert matmul_ceiling(h100).share < matmul_ceiling(a100).share, "MAMF: 80% against 87%"
    assert matmul_efficiency(LLAMA, h100, job) < matmul_efficiency(LLAMA, a100, job)
    assert attention_ceiling(h100) < attention_ceiling(a100), "FlashAttention-2: 35% on H100, ~60% on A100"
    assert matmul_ceiling(card(id="unmeasured")).share == 0.80


def test_narrow_models_and_tiny_micro_batches_reach_less_of_the_ceiling(catalog) -> None:
    a100 = catalog.get("a100 sxm4 80gb")
    job = Job(task="full", context=2048, batch=4)
    assert matmul_efficiency(TINY, a100, job) < matmul_efficiency(LLAMA, a100, job), "hidden 896 against 4096"
    short = Job(task="full", context=64, batch=1)
    assert matmul_efficiency(TINY, a100, short) < matmul_efficiency(TINY, a100, job), "38 x 1 tiles on 108 SMs"


def test_the_attention_kernel_sets_attention_time(catalog) -> None:
    a100 = catalog.get("a100 sxm4 80gb")
    job = Job(task="full", context=16384, batch=1)
    fa2, triton = (step_part(training_speed(LLAMA, a100, job, kernel), "attention")
                   for kernel in ("flash-attention-2", "triton"))
    assert triton == pytest.approx(fa2 / 0.55)
    with pytest.raises(GpuflyError, match="attention kernel"):
        training_speed(LLAMA, a100, job, "flash-attention-9")


def test_qlora_pays_the_dequantization_per_micro_batch_not_per_sample(catalog) -> None:
    a100 = catalog.get("a100 sxm4 80gb")
    one, eight = (training_speed(LLAMA, a100, Job(task="qlora", quant="nf4", context=512, batch=b, lora_rank=16))
                  for b in (1, 8))
    assert step_part(one, "NF4 dequantization") == step_part(eight, "NF4 dequantization")
    assert step_part(one, "NF4 dequantization") / one.step_s > 4 * step_part(eight, "NF4 dequantization") / eight.step_s
    assert eight.train_samples_s > one.train_samples_s


def test_cnn_training_at_16_bits_follows_bandwidth_more_than_tensor_rate() -> None:
    resnet = load_model("resnet-50")
    job = Job(task="full", batch=256, context=1)
    base = training_speed(resnet, card(), job).train_samples_s
    wider = training_speed(resnet, card(memory_bandwidth_gbps=2000), job).train_samples_s
    faster = training_speed(resnet, card(fp16_tensor_tflops=800, bf16_tensor_tflops=800), job).train_samples_s
    assert base is not None and wider is not None and faster is not None
    assert wider / base > faster / base > 1


def test_every_measured_matmul_ceiling_names_a_catalog_gpu(catalog) -> None:
    from gpufly.estimate.speed import _ceilings

    ids = {spec.id for spec in catalog}
    measured = [name for name in _ceilings()["matmul"] if name]
    assert measured and all(name in ids for name in measured), "a ceiling keyed by a GPU id the catalog lacks"


def test_training_recipes_change_the_step_where_they_act(catalog) -> None:
    """Selective checkpointing recomputes half the forward (between none and full); pure bf16 drops the weight
    casts and halves the optimizer's traffic; offload moves the optimizer step to the CPU and the PCIe link; a paged
    optimizer costs what its unpaged twin does."""
    h100 = catalog.get("h100 sxm")
    speeds = {mode: training_speed(LLAMA, h100, Job.from_options(LLAMA, task="full", context=2048, batch=2,
                                                                   checkpointing_mode=mode))
              for mode in ("none", "selective", "full")}
    assert speeds["none"].train_tokens_s > speeds["selective"].train_tokens_s > speeds["full"].train_tokens_s
    mixed = training_speed(LLAMA, h100, Job(task="full", context=2048, batch=2))
    bf16 = training_speed(LLAMA, h100, Job(task="full", context=2048, batch=2, master_weights=False))
    casts = "weight casts and gradient accumulation"
    assert casts in {p.name for p in mixed.step} and casts not in {p.name for p in bf16.step}
    assert step_part(bf16, "optimizer step") == pytest.approx(step_part(mixed, "optimizer step") / 2)
    offloaded = training_speed(LLAMA, h100, Job(task="full", context=2048, batch=2, offload="optimizer"))
    step = next(p for p in offloaded.step if p.name == "optimizer step")
    assert "on the CPU" in step.note and "PCIe 5.0 x16" in step.note
    assert step.seconds > 10 * step_part(mixed, "optimizer step")
    paged = training_speed(LLAMA, h100, Job(task="full", context=2048, batch=2, optimizer="paged-adamw"))
    assert paged.train_tokens_s == mixed.train_tokens_s


def test_a_prompt_crosses_the_network_once_per_node_boundary(catalog) -> None:
    """vLLM across nodes runs a pipeline stage per node: the prompt's activations cross each boundary, so a slow
    network slows the prefill (it did not before: 10 GbE and one node gave the same prefill)."""
    h100 = catalog.get("h100 sxm")
    one = prefill_s(LLAMA, h100, Job(engine="vllm", gpus=2), 2048)
    ethernet = prefill_s(LLAMA, h100, Job(engine="vllm", gpus=2, nodes=2, internode="eth-10"), 2048)
    infiniband = prefill_s(LLAMA, h100, Job(engine="vllm", gpus=2, nodes=2, internode="ib-ndr"), 2048)
    assert one is not None and ethernet is not None and infiniband is not None
    assert ethernet - one > 0.01 > infiniband - one > 0, "16.8 MB: ~13 ms over 10 GbE, well under 1 ms over NDR"
